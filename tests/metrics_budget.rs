//! A retry refused by an empty budget is counted in
//! `http_client_retry_budget_exhausted_total{service,target}`, under the
//! breaker's name, and the chain ends with its attempt's error.
#![cfg(feature = "metrics")]

mod macros_common;

use std::time::Duration;

use macros_common::{ClientError, Script};
use metrics_exporter_prometheus::PrometheusBuilder;
use resilience::registry::Registry;
use resilience::retry::BudgetConfig;
use resilience::{circuit_breaker, retry};

#[circuit_breaker(name = "budget-api", min = 1000)]
#[retry(max = 3, initial = "100ms")]
async fn get(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[tokio::test(start_paused = true)]
async fn a_retry_refused_by_the_budget_is_counted_under_the_breakers_name() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    Registry::builder()
        .service("checkout")
        // One retry per second, whatever the traffic.
        .budget(
            "budget-api",
            BudgetConfig::new()
                .with_ratio(0.0)
                .with_min_per_second(1)
                .with_ttl(Duration::from_secs(1)),
        )
        .install()
        .unwrap();
    let script = Script::new(&[503; 20]);
    // 2 attempts (the budget's one retry), then 1, then 1.
    for _ in 0..3 {
        assert_eq!(get(&script).await, Err(ClientError::Status(503)));
    }
    assert_eq!(script.calls(), 4);
    let text = handle.render();
    let line = text
        .lines()
        .find(|l| l.starts_with("http_client_retry_budget_exhausted_total{"))
        .unwrap_or_else(|| panic!("no budget series: {text}"));
    assert!(line.contains("service=\"checkout\""), "{line}");
    assert!(line.contains("target=\"budget-api\""), "{line}");
    assert!(line.ends_with(" 3"), "{line}");
}
