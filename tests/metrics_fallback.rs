//! A `#[circuit_breaker(fallback = …)]` answer is counted in
//! `http_client_fallbacks_total`, as every fallback must be (`resilience::guide`: fallbacks, metrics).
#![cfg(feature = "metrics")]

mod macros_common;

use macros_common::{ClientError, Script};
use metrics_exporter_prometheus::PrometheusBuilder;
use resilience::registry::Registry;
use resilience::{circuit_breaker, retry};

struct Prices {
    script: Script,
}

impl Prices {
    #[circuit_breaker(name = "prices", min = 2, ratio = 0.5, fallback = Self::cached)]
    #[retry(name = "prices", max = 2)]
    async fn get_price(&self, sku: String) -> Result<String, ClientError> {
        self.script.send().await?;
        Ok(format!("live:{sku}"))
    }

    async fn cached(&self, sku: String, _: ClientError) -> Result<String, ClientError> {
        Ok(format!("stale:{sku}"))
    }
}

/// A fallback with nothing to answer: the docs' `last_good.stale(&key)
/// .ok_or(error)` idiom with nothing cached hands the error back.
struct Quotes {
    script: Script,
}

impl Quotes {
    #[circuit_breaker(name = "quotes", min = 2, ratio = 0.5, fallback = Self::nothing_cached)]
    #[retry(name = "quotes", max = 2)]
    async fn get_quote(&self, sku: String) -> Result<String, ClientError> {
        self.script.send().await?;
        Ok(format!("live:{sku}"))
    }

    async fn nothing_cached(&self, _: String, error: ClientError) -> Result<String, ClientError> {
        Err(error)
    }
}

#[tokio::test(start_paused = true)]
async fn fallback_answers_are_counted_and_a_failed_fallback_is_not() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    Registry::builder().service("checkout").install().unwrap();

    let prices = Prices {
        script: Script::new(&[200, 503, 503, 503, 503]),
    };
    assert_eq!(prices.get_price("a".into()).await.as_deref(), Ok("live:a"));
    // Exhausted on a transient error, then rejected by the open breaker.
    assert_eq!(prices.get_price("b".into()).await.as_deref(), Ok("stale:b"));
    assert_eq!(prices.get_price("c".into()).await.as_deref(), Ok("stale:c"));
    assert_eq!(prices.get_price("d".into()).await.as_deref(), Ok("stale:d"));

    let text = handle.render();
    let series =
        "http_client_fallbacks_total{service=\"checkout\",target=\"prices\",kind=\"fallback_fn\"}";
    let value = text
        .lines()
        .find_map(|line| line.strip_prefix(series))
        .map(|value| value.trim().parse::<f64>().unwrap());
    assert_eq!(value, Some(3.0), "{text}");

    // A fallback that returns an error answered nothing: the caller gets
    // the error, and no fallback answer is counted.
    let quotes = Quotes {
        script: Script::new(&[503, 503, 503, 503]),
    };
    // Two calls of two 503s each: the breaker (min 2, ratio 0.5) opens.
    for sku in ["a", "b"] {
        assert_eq!(
            quotes.get_quote(sku.into()).await,
            Err(ClientError::Status(503))
        );
    }
    assert_eq!(quotes.script.calls(), 4);
    assert!(matches!(
        quotes.get_quote("c".into()).await,
        Err(ClientError::Resilience(resilience::Error::DependencyDown(
            _
        )))
    ));
    let text = handle.render();
    assert!(
        !text.contains("http_client_fallbacks_total{service=\"checkout\",target=\"quotes\""),
        "{text}"
    );
}
