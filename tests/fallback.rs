//! The guide's fallbacks as library pieces (`resilience::fallback`): a
//! `fallback =` fn answering with a value marked stale or a part marked
//! unavailable is counted by kind, and axum turns them (and a dependency
//! that is down) into responses that say so.
#![cfg(feature = "metrics")]

mod macros_common;

use axum::Router;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use macros_common::{ClientError, Script};
use metrics_exporter_prometheus::PrometheusBuilder;
use resilience::circuit_breaker;
use resilience::fallback::{LastGood, MaybeStale, Part};
use tower::ServiceExt as _;

struct Quotes {
    script: Script,
    last_good: LastGood<String, String>,
}

impl Quotes {
    #[circuit_breaker(name = "fb-quotes", min = 2, ratio = 0.5, cooldown = "30s", fallback = Self::stale_quote)]
    async fn quote(&self, symbol: String) -> Result<MaybeStale<String>, ClientError> {
        self.script.send().await?;
        let quote = format!("{symbol}:{}", self.script.calls());
        Ok(self.last_good.fresh(symbol, quote))
    }

    // Nothing good seen yet: the call's own error stands.
    async fn stale_quote(
        &self,
        symbol: String,
        error: ClientError,
    ) -> Result<MaybeStale<String>, ClientError> {
        self.last_good.stale(&symbol).ok_or(error)
    }

    #[circuit_breaker(name = "fb-news", min = 2, ratio = 0.5, fallback = Self::no_news)]
    async fn news(&self) -> Result<Part<Vec<String>>, ClientError> {
        self.script.send().await?;
        Ok(Part::Available(vec!["rates unchanged".to_owned()]))
    }

    async fn no_news(&self, _: ClientError) -> Result<Part<Vec<String>>, ClientError> {
        Ok(Part::unavailable("news"))
    }

    // The same as `quote`, behind its own breaker, for the axum test.
    #[circuit_breaker(name = "fb-board", min = 2, ratio = 0.5, fallback = Self::stale_quote)]
    async fn board(&self, symbol: String) -> Result<MaybeStale<String>, ClientError> {
        self.script.send().await?;
        let quote = format!("{symbol}:{}", self.script.calls());
        Ok(self.last_good.fresh(symbol, quote))
    }

    // No fallback: an open breaker reaches the caller as dependency down.
    #[circuit_breaker(name = "fb-ledger", min = 2, ratio = 0.5, cooldown = "30s")]
    async fn ledger(&self) -> Result<String, ClientError> {
        self.script.send().await?;
        Ok("balanced".to_owned())
    }
}

/// A fallback that records the error it was handed, and answers with it.
struct Ledger {
    script: Script,
    handed: std::sync::Mutex<Vec<ClientError>>,
}

impl Ledger {
    #[circuit_breaker(name = "fb-handed", min = 4, ratio = 0.5, cooldown = "30s", fallback = Self::handed)]
    #[resilience::retry(max = 2)]
    async fn get_balance(&self, account: u32) -> Result<u32, ClientError> {
        self.script.send().await?;
        Ok(account * 100)
    }

    async fn handed(&self, account: u32, error: ClientError) -> Result<u32, ClientError> {
        assert_eq!(account, 7, "the fallback gets the call's arguments");
        self.handed.lock().unwrap().push(error.clone());
        Err(error)
    }
}

/// The fallback is handed what the call ended with: the last attempt's
/// error after the retries, or the breaker's rejection; a permanent error
/// is the caller's answer and reaches no fallback.
#[tokio::test(start_paused = true)]
async fn the_fallback_is_handed_the_error_the_call_ended_with() {
    let ledger = Ledger {
        script: Script::new(&[404, 502, 503, 200, 503, 503]),
        handed: Default::default(),
    };
    // A 404 is an answer: no fallback.
    assert_eq!(ledger.get_balance(7).await, Err(ClientError::Status(404)));
    // 502 then 503: the retries are spent, the fallback gets the 503.
    assert_eq!(ledger.get_balance(7).await, Err(ClientError::Status(503)));
    assert_eq!(ledger.get_balance(7).await, Ok(700));
    assert_eq!(ledger.get_balance(7).await, Err(ClientError::Status(503)));
    // 2 failures in 4 calls open the breaker: the next is sent nowhere.
    let sent = ledger.script.calls();
    let rejected = ledger.get_balance(7).await;
    assert_eq!(ledger.script.calls(), sent);
    let handed = ledger.handed.lock().unwrap().clone();
    assert_eq!(handed.len(), 3, "{handed:?}");
    assert_eq!(
        handed[..2],
        [ClientError::Status(503), ClientError::Status(503)]
    );
    match (&handed[2], rejected) {
        (
            ClientError::Resilience(resilience::Error::DependencyDown(down)),
            Err(ClientError::Resilience(resilience::Error::DependencyDown(answered))),
        ) => {
            assert_eq!((down.breaker(), down.state()), ("fb-handed", "open"));
            assert_eq!(answered, *down);
        }
        other => panic!("expected the rejection, handed and answered: {other:?}"),
    }
}

fn quotes(statuses: &[u16]) -> Quotes {
    Quotes {
        script: Script::new(statuses),
        last_good: LastGood::new("fb-quotes"),
    }
}

/// The value of the `http_client_fallbacks_total` series of `target` and
/// `kind` in Prometheus's text format.
fn fallbacks(text: &str, target: &str, kind: &str) -> Option<f64> {
    text.lines()
        .filter(|line| line.starts_with("http_client_fallbacks_total{"))
        .filter(|line| line.contains(&format!("target=\"{target}\"")))
        .filter(|line| line.contains(&format!("kind=\"{kind}\"")))
        .find_map(|line| line.rsplit(' ').next()?.parse().ok())
}

#[tokio::test(start_paused = true)]
async fn a_fallback_fn_answering_stale_is_counted_as_stale() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let quotes = quotes(&[200, 503]);

    let fresh = quotes.quote("EUR".into()).await.unwrap();
    assert_eq!(fresh, MaybeStale::Fresh("EUR:1".to_owned()));
    // A 503 (one failure in two calls: the breaker opens), then two
    // rejections: all three answered by the last good value, marked stale.
    for _ in 0..3 {
        let answer = quotes.quote("EUR".into()).await.unwrap();
        assert!(answer.is_stale(), "{answer:?}");
        assert_eq!(answer.value(), "EUR:1");
    }
    assert_eq!(quotes.script.calls(), 2, "the open breaker sent nothing");
    // No last good value for another symbol: the error the fallback was
    // handed, the open breaker's rejection.
    match quotes.quote("USD".into()).await {
        Err(ClientError::Resilience(resilience::Error::DependencyDown(down))) => {
            assert_eq!(down.breaker(), "fb-quotes");
        }
        other => panic!("expected the rejection, got {other:?}"),
    }

    let text = handle.render();
    assert_eq!(fallbacks(&text, "fb-quotes", "stale"), Some(3.0), "{text}");
    // The one without a value to serve answered nothing (its fallback
    // handed the error back): no fallback answer is counted for it.
    assert_eq!(fallbacks(&text, "fb-quotes", "fallback_fn"), None, "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_fallback_fn_answering_unavailable_is_counted_as_partial() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let quotes = quotes(&[502]);

    assert_eq!(quotes.news().await, Ok(Part::unavailable("news")));
    assert_eq!(
        quotes.news().await,
        Ok(Part::Available(vec!["rates unchanged".to_owned()]))
    );

    let text = handle.render();
    assert_eq!(fallbacks(&text, "fb-news", "partial"), Some(1.0), "{text}");
    assert_eq!(fallbacks(&text, "fb-news", "fallback_fn"), None, "{text}");
}

async fn body(response: Response) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn axum_marks_a_stale_answer_and_fails_fast_with_503_and_retry_after() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let quotes = std::sync::Arc::new(quotes(&[200, 503, 503, 503, 503]));
    let app = Router::new()
        .route(
            "/quote",
            get({
                let quotes = quotes.clone();
                move || async move {
                    match quotes.board("EUR".into()).await {
                        Ok(answer) => answer.into_response(),
                        Err(err) => format!("{err:?}").into_response(),
                    }
                }
            }),
        )
        .route(
            "/ledger",
            get({
                let quotes = quotes.clone();
                move || async move {
                    match quotes.ledger().await {
                        Ok(ledger) => ledger.into_response(),
                        Err(ClientError::Resilience(err)) => err.into_response(),
                        Err(err) => format!("{err:?}").into_response(),
                    }
                }
            }),
        );
    let request = |path: &str| {
        axum::http::Request::get(path)
            .body(axum::body::Body::empty())
            .unwrap()
    };

    let fresh = app.clone().oneshot(request("/quote")).await.unwrap();
    assert_eq!(fresh.status(), 200);
    assert!(!fresh.headers().contains_key("x-from-cache"));
    assert_eq!(body(fresh).await, "EUR:1");

    tokio::time::advance(std::time::Duration::from_secs(5)).await;
    let stale = app.clone().oneshot(request("/quote")).await.unwrap();
    assert_eq!(stale.status(), 200);
    assert_eq!(stale.headers()["x-from-cache"], "stale");
    assert_eq!(stale.headers()["age"], "5");
    assert_eq!(body(stale).await, "EUR:1");

    // Two failures open `fb-ledger`; the third call is rejected unsent.
    for _ in 0..2 {
        let failed = app.clone().oneshot(request("/ledger")).await.unwrap();
        assert_eq!(body(failed).await, "Status(503)");
    }
    let sent = quotes.script.calls();
    let down = app.clone().oneshot(request("/ledger")).await.unwrap();
    assert_eq!(quotes.script.calls(), sent);
    assert_eq!(down.status(), 503);
    assert_eq!(down.headers()["retry-after"], "30");
    assert_eq!(down.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(
        body(down).await,
        "dependency down: circuit breaker `fb-ledger` is open: the request was not sent; retry in 30 s\n"
    );

    let text = handle.render();
    assert_eq!(fallbacks(&text, "fb-board", "stale"), Some(1.0), "{text}");
    assert_eq!(
        fallbacks(&text, "fb-ledger", "fail_fast"),
        Some(1.0),
        "{text}"
    );
}
