//! Every series of one logical call carries one `target`: with both
//! attributes, the breaker's name, so that the retries, durations and
//! errors of a dependency join its breaker's state and trips in the alert
//! rules and dashboards. And a method's retry site is named after its
//! impl's type, so that two `get`s of two clients keep their own series.
#![cfg(feature = "metrics")]

mod macros_common;

use std::collections::BTreeSet;

use macros_common::{ClientError, Script};
use metrics_exporter_prometheus::PrometheusBuilder;
use resilience::registry::Registry;
use resilience::{circuit_breaker, retry};

struct Users {
    script: Script,
}

impl Users {
    #[circuit_breaker(name = "users-api", min = 2, cooldown = "30s")]
    #[retry(max = 2, initial = "100ms")]
    async fn get(&self) -> Result<(), ClientError> {
        self.script.send().await
    }
}

struct Orders {
    script: Script,
}

impl Orders {
    #[retry(max = 2, initial = "100ms")]
    async fn get(&self) -> Result<(), ClientError> {
        self.script.send().await
    }
}

#[tokio::test(start_paused = true)]
async fn one_dependency_one_target_and_one_site_per_method() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    Registry::builder().service("checkout").install().unwrap();

    let users = Users {
        script: Script::new(&[503, 503, 503, 503]),
    };
    for _ in 0..3 {
        // Two exhausted calls trip the breaker; the third is rejected.
        assert!(users.get().await.is_err());
    }
    let orders = Orders {
        script: Script::new(&[502]),
    };
    orders.get().await.unwrap();

    let text = handle.render();
    let mut targets = BTreeSet::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, labels) = line.split_once('{').unwrap_or((line, ""));
        let target = labels
            .split(',')
            .find_map(|label| label.strip_prefix("target=\""))
            .map(|rest| rest.split('"').next().unwrap_or_default().to_owned());
        if let Some(target) = target {
            targets.insert((name.trim_end_matches("_bucket").to_owned(), target));
        }
    }
    let of = |target: &str| -> BTreeSet<&str> {
        targets
            .iter()
            .filter(|(_, t)| t == target)
            .map(|(name, _)| name.as_str())
            .collect()
    };
    let users_series = of("users-api");
    for name in [
        "http_client_retries_total",
        "http_client_request_duration_seconds",
        "dependency_errors_total",
        "circuit_breaker_state",
        "circuit_breaker_trips_total",
    ] {
        assert!(
            users_series.iter().any(|series| series.starts_with(name)),
            "{name} has no series with target=\"users-api\": {targets:#?}"
        );
    }
    let orders_target = "metrics_target::Orders::get";
    assert!(
        of(orders_target).contains("http_client_retries_total"),
        "{targets:#?}"
    );
    // Nothing is labelled with a fn path but the breaker-less `Orders::get`.
    for (name, target) in &targets {
        assert!(
            target == "users-api" || target == orders_target,
            "{name} has target={target}"
        );
    }
}
