//! One outcome for every layer, end to end against a real HTTP server on
//! loopback: a dependency that hangs opens the breaker (with the error
//! enum the docs teach and with `std::io::Error` alike), the caller's
//! deadline bounds a breaker-only fn, refused and unreachable connections
//! are retried, and our client waits out our own idempotency server's
//! `409` instead of failing.

#[path = "../examples/common/mod.rs"]
mod common;

use std::error::Error as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{FaultServer, Reply};
use resilience::breaker::{CircuitBreaker, State};
use resilience::http::{HttpError, RequestBuilderExt, ResponseExt};
use resilience::retry::{Classify, HttpStatus, Verdict};
use resilience::{IdempotencyKey, circuit_breaker, deadline, registry, retry};
use tokio::time::Instant;

fn breaker(name: &str) -> &'static CircuitBreaker {
    registry::global()
        .breakers()
        .into_iter()
        .find(|breaker| breaker.name() == name)
        .unwrap_or_else(|| panic!("no breaker named {name}"))
}

/// The error type the docs teach: statuses, the transport, and the
/// runtime's own errors, classified through `resilience::Error::classify`.
#[derive(Debug, thiserror::Error)]
enum ClientError {
    #[error("http status {0}")]
    Status(u16),
    #[error("transport: {0}")]
    Transport(#[source] reqwest::Error),
    #[error(transparent)]
    Resilience(#[from] resilience::Error),
}

impl Classify for ClientError {
    fn classify(&self) -> Verdict {
        match self {
            ClientError::Status(code) => HttpStatus(*code).classify(),
            ClientError::Transport(err) => err.classify(),
            ClientError::Resilience(err) => err.classify(),
        }
    }
}

async fn get(url: &str) -> Result<String, ClientError> {
    let response = reqwest::get(url).await.map_err(ClientError::Transport)?;
    match response.status().as_u16() {
        200 => response.text().await.map_err(ClientError::Transport),
        code => Err(ClientError::Status(code)),
    }
}

async fn get_io(url: &str) -> Result<String, std::io::Error> {
    let response = reqwest::get(url).await.map_err(std::io::Error::other)?;
    match response.status().as_u16() {
        200 => response.text().await.map_err(std::io::Error::other),
        code => Err(std::io::Error::other(format!("http status {code}"))),
    }
}

#[circuit_breaker(name = "outcome.hang.enum", min = 4, cooldown = "1s")]
#[retry(max = 3, max_elapsed = "300ms")]
async fn get_hung(url: &str) -> Result<String, ClientError> {
    get(url).await
}

#[circuit_breaker(name = "outcome.hang.io", min = 4, cooldown = "1s")]
#[retry(max = 3, max_elapsed = "300ms")]
async fn get_hung_io(url: &str) -> Result<String, std::io::Error> {
    get_io(url).await
}

/// Four hung calls open the breaker; the fifth never reaches the server; a
/// probe that hangs after the cooldown opens it again.
#[tokio::test(start_paused = true)]
async fn a_hanging_dependency_opens_the_breaker_and_a_hanging_probe_reopens_it() {
    let server = FaultServer::start().await.unwrap();
    server.always("/hang", Reply::Slow(Duration::from_secs(3)));
    let url = server.url("/hang");

    for call in 1..=4 {
        let start = Instant::now();
        let err = get_hung(&url).await.unwrap_err();
        assert_eq!(start.elapsed(), Duration::from_millis(300), "call {call}");
        assert!(
            matches!(
                err,
                ClientError::Resilience(resilience::Error::MaxElapsedExceeded { attempts: 1, .. })
            ),
            "call {call}: {err:?}"
        );
    }
    let hung = breaker("outcome.hang.enum");
    assert_eq!(hung.state(), State::Open);
    assert_eq!((hung.snapshot().calls, hung.snapshot().failures), (4, 4));
    assert_eq!(server.requests_to("/hang").len(), 4);

    let err = get_hung(&url).await.unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Resilience(resilience::Error::DependencyDown(_))
        ),
        "{err:?}"
    );
    assert_eq!(
        server.requests_to("/hang").len(),
        4,
        "an open breaker sends nothing"
    );

    // The cooldown ends; the probe hangs too, is cut, and re-opens it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let err = get_hung(&url).await.unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Resilience(resilience::Error::MaxElapsedExceeded { .. })
        ),
        "{err:?}"
    );
    assert_eq!(server.requests_to("/hang").len(), 5);
    assert_eq!(hung.state(), State::Open);
    assert!(get_hung(&url).await.is_err());
    assert_eq!(server.requests_to("/hang").len(), 5);

    // Healed: the next probe closes it.
    server.always("/hang", Reply::Ok);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(get_hung(&url).await.unwrap(), "ok /hang");
    assert_eq!(hung.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_dependency_opens_the_breaker_with_io_errors_too() {
    let server = FaultServer::start().await.unwrap();
    server.always("/hang", Reply::Slow(Duration::from_secs(3)));
    let url = server.url("/hang");
    for _ in 0..4 {
        let err = get_hung_io(&url).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
    }
    let hung = breaker("outcome.hang.io");
    assert_eq!(hung.state(), State::Open);
    let err = get_hung_io(&url).await.unwrap_err();
    assert!(err.to_string().starts_with("dependency down"), "{err}");
    assert_eq!(server.requests_to("/hang").len(), 4);

    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(get_hung_io(&url).await.is_err());
    assert_eq!(server.requests_to("/hang").len(), 5);
    assert_eq!(hung.state(), State::Open);
}

#[circuit_breaker(name = "outcome.solo", min = 2, cooldown = "1s")]
async fn get_solo(url: &str) -> Result<String, ClientError> {
    get(url).await
}

/// Without `#[retry]`, the caller's deadline still cuts the call, and the
/// call cut in flight counts as a failure.
#[tokio::test(start_paused = true)]
async fn the_callers_deadline_bounds_a_breaker_only_fn() {
    let server = FaultServer::start().await.unwrap();
    server.always("/slow", Reply::Slow(Duration::from_secs(2)));
    let url = server.url("/slow");
    for _ in 0..2 {
        let start = Instant::now();
        let result = deadline::with_timeout(Duration::from_millis(100), get_solo(&url)).await;
        assert_eq!(start.elapsed(), Duration::from_millis(100));
        assert!(
            matches!(
                result,
                Err(ClientError::Resilience(
                    resilience::Error::DeadlineExceeded { attempts: 1, .. }
                ))
            ),
            "{result:?}"
        );
    }
    assert_eq!(breaker("outcome.solo").state(), State::Open);
}

#[circuit_breaker(
    name = "outcome.probe",
    min = 2,
    cooldown = "1s",
    probe_timeout = "250ms"
)]
async fn get_probed(url: &str) -> Result<String, ClientError> {
    get(url).await
}

/// A breaker-only fn's probe that hangs is cut by `probe_timeout` and
/// opens the breaker again.
#[tokio::test(start_paused = true)]
async fn a_hanging_probe_of_a_breaker_only_fn_is_cut_and_reopens_it() {
    let server = FaultServer::start().await.unwrap();
    server.always("/down", Reply::Status(503));
    let url = server.url("/down");
    for _ in 0..2 {
        assert!(matches!(
            get_probed(&url).await,
            Err(ClientError::Status(503))
        ));
    }
    let probed = breaker("outcome.probe");
    assert_eq!(probed.state(), State::Open);
    server.always("/down", Reply::Slow(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let start = Instant::now();
    let err = get_probed(&url).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_millis(250));
    assert!(
        matches!(
            err,
            ClientError::Resilience(resilience::Error::AttemptTimeout(_))
        ),
        "{err:?}"
    );
    assert_eq!(probed.state(), State::Open);
    assert_eq!(server.requests_to("/down").len(), 3);
}

/// The last attempt's answer survives a chain cut by its budget: the 503
/// that caused the retries is the error's source.
#[tokio::test(start_paused = true)]
async fn a_spent_budget_carries_the_last_attempts_error() {
    #[retry(max = 3, initial = "100ms", max_elapsed = "1s")]
    async fn get_flaky(url: &str) -> Result<String, ClientError> {
        get(url).await
    }
    let server = FaultServer::start().await.unwrap();
    server.script("/flaky", [Reply::Status(503)]);
    server.always("/flaky", Reply::Slow(Duration::from_secs(5)));
    let err = get_flaky(&server.url("/flaky")).await.unwrap_err();
    let ClientError::Resilience(runtime) = &err else {
        panic!("{err:?}");
    };
    assert!(
        matches!(
            runtime,
            resilience::Error::MaxElapsedExceeded { attempts: 2, .. }
        ),
        "{runtime:?}"
    );
    assert_eq!(
        err.to_string(),
        "the retry chain's max_elapsed of 1s passed with attempt 2 in flight; the last attempt failed: http status 503"
    );
    let source = err
        .source()
        .unwrap()
        .downcast_ref::<resilience::Cause>()
        .unwrap();
    assert!(matches!(
        source.get().downcast_ref::<ClientError>(),
        Some(ClientError::Status(503))
    ));
}

/// A port nothing listens on: connections are refused.
async fn refused_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/user")
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_retried() {
    #[retry(max = 3, initial = "100ms")]
    async fn get_refused(url: &str, attempts: &AtomicU32) -> Result<String, ClientError> {
        attempts.fetch_add(1, Ordering::SeqCst);
        get(url).await
    }
    let attempts = AtomicU32::new(0);
    let err = get_refused(&refused_url().await, &attempts)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Transport(ref e) if e.is_connect()),
        "{err:?}"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 3);

    // The same through the io error kind a raw connect reports.
    #[retry(max = 3, initial = "100ms")]
    async fn get_connected(url: &str, attempts: &AtomicU32) -> Result<(), std::io::Error> {
        attempts.fetch_add(1, Ordering::SeqCst);
        let addr = url.trim_start_matches("http://").trim_end_matches("/user");
        tokio::net::TcpStream::connect(addr).await.map(drop)
    }
    let attempts = AtomicU32::new(0);
    let err = get_connected(&refused_url().await, &attempts)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
}

/// An address of TEST-NET-1 (RFC 5737), never routed: depending on the
/// machine the connect fails at once (network unreachable) or hangs until
/// reqwest's connect timeout. Either way it is a transport error, retried.
#[tokio::test(start_paused = true)]
async fn an_unreachable_host_is_retried() {
    #[retry(max = 3, initial = "100ms")]
    async fn get_unreachable(
        client: &reqwest::Client,
        attempts: &AtomicU32,
    ) -> Result<String, ClientError> {
        attempts.fetch_add(1, Ordering::SeqCst);
        let response = client
            .get("http://192.0.2.1:81/user")
            .send()
            .await
            .map_err(ClientError::Transport)?;
        Err(ClientError::Status(response.status().as_u16()))
    }
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let attempts = AtomicU32::new(0);
    let err = get_unreachable(&client, &attempts).await.unwrap_err();
    assert!(matches!(err, ClientError::Transport(_)), "{err:?}");
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
}

/// A server of our own idempotency layer whose handler takes 1.5 s.
async fn slow_payments() -> (String, Arc<AtomicU32>) {
    use axum::routing::post;
    use resilience::idempotency::server::{IdempotencyLayer, MemoryStore, Scope};

    let applied = Arc::new(AtomicU32::new(0));
    let handler_applied = applied.clone();
    let app = axum::Router::new()
        .route(
            "/payments",
            post(move || {
                let applied = handler_applied.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(1500)).await;
                    let n = applied.fetch_add(1, Ordering::SeqCst) + 1;
                    (axum::http::StatusCode::CREATED, format!("payment {n}"))
                }
            }),
        )
        .layer(IdempotencyLayer::new(
            MemoryStore::default(),
            Scope::unscoped(),
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/payments", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, applied)
}

#[retry(method = "POST", max = 4, initial = "100ms")]
async fn pay(
    client: &reqwest::Client,
    url: &str,
    key: IdempotencyKey,
) -> Result<(String, bool), HttpError> {
    let response = client
        .post(url)
        .idempotency_key(&key)
        .body("amount=10")
        .send()
        .await?
        .check()
        .await?;
    let replayed = response.headers().contains_key("x-idempotency-replay");
    Ok((response.text().await?, replayed))
}

/// Two overlapping calls with one key: the second gets `409` with
/// `Retry-After`, waits it out with the same key, and gets the replay; the
/// handler ran once.
#[tokio::test(start_paused = true)]
async fn an_overlapping_retry_waits_for_the_original_and_gets_its_replay() {
    let (url, applied) = slow_payments().await;
    let client = reqwest::Client::new();
    let key = IdempotencyKey::new();
    let first = pay(&client, &url, key.clone());
    let second = async {
        // Sent while the first is in flight.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let start = Instant::now();
        let result = pay(&client, &url, key.clone()).await;
        (result, start.elapsed())
    };
    let (first, (second, waited)) = tokio::join!(first, second);
    assert_eq!(first.unwrap(), ("payment 1".to_owned(), false));
    assert_eq!(second.unwrap(), ("payment 1".to_owned(), true));
    // It waited at least one `Retry-After: 1` before it got the replay.
    assert!(waited >= Duration::from_secs(1), "{waited:?}");
    assert_eq!(applied.load(Ordering::SeqCst), 1);
}

#[circuit_breaker(name = "outcome.fallback", min = 20, fallback = cached)]
#[retry(max = 3, max_elapsed = "300ms")]
async fn get_or_cached(url: &str) -> Result<String, ClientError> {
    get(url).await
}

async fn cached(_url: &str, _: ClientError) -> Result<String, ClientError> {
    Ok("cached".to_owned())
}

/// A hung dependency whose chain ran out of time is a failure for the
/// fallback too: it answers, as it does for a rejection.
#[tokio::test(start_paused = true)]
async fn the_fallback_answers_when_a_hung_dependency_spends_the_budget() {
    let server = FaultServer::start().await.unwrap();
    server.always("/hang", Reply::Slow(Duration::from_secs(3)));
    assert_eq!(get_or_cached(&server.url("/hang")).await.unwrap(), "cached");
    // A permanent answer is not a failure: it stands.
    server.always("/hang", Reply::Status(404));
    assert!(matches!(
        get_or_cached(&server.url("/hang")).await,
        Err(ClientError::Status(404))
    ));
    let snapshot = breaker("outcome.fallback").snapshot();
    assert_eq!((snapshot.calls, snapshot.failures), (2, 1));
}
