//! A dependency's errors belong to its own target, whichever chain
//! retries them: a `#[retry]` fn called inside a consumer's handler files
//! its dependency's errors under its own `target`, as it does anywhere else.
#![cfg(feature = "metrics")]

mod macros_common;

use macros_common::{ClientError, Script};
use metrics_exporter_prometheus::PrometheusBuilder;
use resilience::retry;

#[retry(name = "prices-api", max = 3, initial = "100ms")]
async fn get_price(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

/// The handler's error: the API's, as a consumer takes it.
#[derive(Debug)]
struct HandlerError(ClientError);

impl std::fmt::Display for HandlerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the prices API failed: {:?}", self.0)
    }
}

impl std::error::Error for HandlerError {}

impl resilience::Classify for HandlerError {
    fn classify(&self) -> resilience::Verdict {
        self.0.classify()
    }
    fn reason(&self) -> Option<resilience::retry::Reason> {
        self.0.reason()
    }
}

impl From<resilience::Error> for HandlerError {
    fn from(err: resilience::Error) -> Self {
        HandlerError(ClientError::from(err))
    }
}

/// The value of `name{…}` whose labels include every one of `labels`.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .filter(|line| {
            labels
                .iter()
                .all(|(key, value)| line.contains(&format!("{key}=\"{value}\"")))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

// A dependency's errors belong to its own target, whichever chain retries
// them: a `#[retry]` fn called inside a consumer's handler makes one
// attempt per attempt of the consumer (one retrying layer), and each 503
// the API answered is in `dependency_errors_total{target="prices-api"}`,
// where an alert on the API looks, not only under the consumer's target.
#[tokio::test(start_paused = true)]
async fn a_dependency_called_inside_a_consumer_files_its_errors_under_its_own_target() {
    use std::sync::Arc;
    use std::time::Duration;

    use resilience::consumer::{Consumer, ConsumerConfig, Message};
    use resilience::telemetry::Labels;

    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);

    let script = Arc::new(Script::new(&[503; 10]));
    let config = ConsumerConfig::background(
        Labels::new("checkout", "orders-worker"),
        Duration::from_secs(300),
    )
    .unwrap();
    let calls = script.clone();
    let consumer = Consumer::new(config, move |_: Message| {
        let script = calls.clone();
        async move { get_price(&script).await.map_err(HandlerError) }
    });
    let handled = consumer.handle(Message::new(vec![])).await;
    assert!(handled.disposition().is_dead_letter());
    // The consumer's background policy: 6 attempts, one inner call each.
    assert_eq!(script.calls(), 6, "one retrying layer");

    let text = handle.render();
    let api = sample(
        &text,
        "dependency_errors_total",
        &[("target", "prices-api"), ("reason", "5xx")],
    );
    assert_eq!(api, 6.0, "every 503 under the API's target:\n{text}");
    // The consumer's chain still counts its handler's attempts as its own.
    let worker_attempts = sample(
        &text,
        "http_client_retries_total",
        &[("target", "orders-worker")],
    );
    assert_eq!(worker_attempts, 6.0, "{text}");
}
