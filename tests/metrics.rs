//! The series of `resilience::guide` as Prometheus scrapes them: a scripted failure
//! scenario against a real HTTP server on loopback, then the exact text that
//! `metrics-exporter-prometheus` renders for `/metrics`.
#![cfg(feature = "metrics")]

#[path = "../examples/common/mod.rs"]
mod common;
mod macros_common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{FaultServer, Reply};
use macros_common::ClientError;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};
use resilience::breaker::{BreakerConfig, CircuitBreaker};
use resilience::registry::Registry;
use resilience::retry::Policy;
use resilience::telemetry::{self, Labels, RetryMetrics};

const USERS: Labels = Labels::new("checkout", "users");

async fn get(http: &reqwest::Client, url: &str) -> Result<String, ClientError> {
    let attempt = || async {
        let response = http
            .get(url)
            .send()
            .await
            .map_err(|_| ClientError::Transport)?;
        match response.status().as_u16() {
            200 => response.text().await.map_err(|_| ClientError::Transport),
            code => Err(ClientError::Status(code)),
        }
    };
    telemetry::observe(
        USERS,
        Policy::http()
            .retry(attempt)
            .notify_with(RetryMetrics::new(USERS)),
    )
    .await
}

fn prometheus() -> PrometheusRecorder {
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(telemetry::REQUEST_DURATION_SECONDS.into()),
            telemetry::DURATION_BUCKETS,
        )
        .expect("the buckets are not empty")
        .build_recorder()
}

/// The samples of a Prometheus text exposition: `name{labels}` (labels
/// sorted by name) → value. Comment lines are checked for the metric kind.
fn parse(text: &str) -> (BTreeMap<String, f64>, BTreeMap<String, String>) {
    let mut samples = BTreeMap::new();
    let mut kinds = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("`# TYPE name kind`");
            kinds.insert(name.to_owned(), kind.to_owned());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("`series value`");
        let value: f64 = value.parse().expect("a numeric sample");
        let key = match series.split_once('{') {
            None => series.to_owned(),
            Some((name, labels)) => {
                let labels = labels.strip_suffix('}').expect("closing brace");
                let mut labels: Vec<&str> = labels.split(',').collect();
                labels.sort();
                format!("{name}{{{}}}", labels.join(","))
            }
        };
        assert!(
            samples.insert(key.clone(), value).is_none(),
            "duplicate series {key}"
        );
    }
    (samples, kinds)
}

fn retries(attempt: &str, result: &str) -> String {
    format!(
        "http_client_retries_total{{attempt=\"{attempt}\",result=\"{result}\",service=\"checkout\",target=\"users\"}}"
    )
}

fn errors(reason: &str) -> String {
    format!("dependency_errors_total{{reason=\"{reason}\",service=\"checkout\",target=\"users\"}}")
}

fn duration(suffix: &str, status: &str, le: Option<&str>) -> String {
    let le = le.map(|le| format!("le=\"{le}\",")).unwrap_or_default();
    format!(
        "http_client_request_duration_seconds_{suffix}{{{le}service=\"checkout\",status=\"{status}\",target=\"users\"}}"
    )
}

fn only<'a>(samples: &'a BTreeMap<String, f64>, prefix: &str) -> BTreeMap<&'a str, f64> {
    samples
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(k, v)| (k.as_str(), *v))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn retries_and_durations_as_prometheus_scrapes_them() {
    let recorder = prometheus();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    telemetry::describe();

    let server = FaultServer::start().await.unwrap();
    server.script_statuses("/users/1", &[502, 502, 200]);
    server.script_statuses("/users/2", &[503, 503, 503]);
    server.script_statuses("/users/3", &[404]);
    server.script("/users/4", [Reply::DropMidBody, Reply::Ok]);
    let http = reqwest::Client::new();

    assert_eq!(
        get(&http, &server.url("/users/1")).await.unwrap(),
        "ok /users/1"
    );
    assert!(matches!(
        get(&http, &server.url("/users/2")).await,
        Err(ClientError::Status(503))
    ));
    assert!(matches!(
        get(&http, &server.url("/users/3")).await,
        Err(ClientError::Status(404))
    ));
    assert_eq!(
        get(&http, &server.url("/users/4")).await.unwrap(),
        "ok /users/4"
    );
    assert_eq!(server.requests().len(), 3 + 3 + 1 + 2);

    let (samples, kinds) = parse(&handle.render());

    assert_eq!(kinds["http_client_retries_total"], "counter");
    assert_eq!(kinds["dependency_errors_total"], "counter");
    assert_eq!(kinds["http_client_request_duration_seconds"], "histogram");

    // One sample per attempt: 9 requests, minus the 404 which is neither a
    // retry nor an exhausted chain.
    let expected: BTreeMap<String, f64> = [
        (retries("1", "retry"), 3.0),
        (retries("2", "retry"), 2.0),
        (retries("2", "success"), 1.0),
        (retries("3", "success"), 1.0),
        (retries("3", "exhausted"), 1.0),
    ]
    .into_iter()
    .collect();
    let got: BTreeMap<String, f64> = only(&samples, "http_client_retries_total")
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    assert_eq!(got, expected);

    assert_eq!(
        only(&samples, "dependency_errors_total"),
        [
            (errors("5xx").as_str(), 5.0),
            (errors("network").as_str(), 1.0)
        ]
        .into_iter()
        .collect()
    );

    // Whole calls, by how they ended.
    for (status, count) in [("ok", 2.0), ("5xx", 1.0), ("error", 1.0)] {
        assert_eq!(samples[&duration("count", status, None)], count, "{status}");
        assert_eq!(
            samples[&duration("bucket", status, Some("+Inf"))],
            count,
            "{status}"
        );
    }
    assert_eq!(
        only(&samples, "http_client_request_duration_seconds_count").len(),
        3
    );
    // The 404 took no pause; the three-attempt chains paused 100 ms then
    // 200 ms (±25 %) on the paused clock: between 225 and 375 ms.
    assert_eq!(samples[&duration("bucket", "error", Some("0.005"))], 1.0);
    let exhausted = samples[&duration("sum", "5xx", None)];
    assert!((0.225..0.376).contains(&exhausted), "{exhausted}");
    assert_eq!(samples[&duration("bucket", "5xx", Some("0.1"))], 0.0);
    assert_eq!(samples[&duration("bucket", "5xx", Some("0.5"))], 1.0);
}

/// One logical call through the breaker, around the retry chain.
async fn get_through(
    breaker: &CircuitBreaker,
    http: &reqwest::Client,
    url: &str,
) -> Result<String, ClientError> {
    let attempt = || async {
        let response = http
            .get(url)
            .send()
            .await
            .map_err(|_| ClientError::Transport)?;
        match response.status().as_u16() {
            200 => response.text().await.map_err(|_| ClientError::Transport),
            code => Err(ClientError::Status(code)),
        }
    };
    telemetry::observe(
        USERS,
        breaker.call(
            Policy::http()
                .retry(attempt)
                .notify_with(RetryMetrics::new(USERS)),
        ),
    )
    .await
}

fn state_gauge(samples: &BTreeMap<String, f64>) -> f64 {
    samples["circuit_breaker_state{service=\"checkout\",target=\"users\"}"]
}

fn trips(samples: &BTreeMap<String, f64>) -> f64 {
    samples["circuit_breaker_trips_total{service=\"checkout\",target=\"users\"}"]
}

#[tokio::test(start_paused = true)]
async fn a_breaker_trips_once_then_recovers_through_half_open() {
    let recorder = prometheus();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let scrape = || parse(&handle.render()).0;

    let registry = Registry::builder().service("checkout").build().unwrap();
    assert_eq!(registry.service(), USERS.service());
    let breaker = registry.breaker(
        USERS.target(),
        BreakerConfig::new()
            .with_min_requests(2)
            .with_failure_ratio(0.5)
            .with_cooldown(Duration::from_secs(30)),
    );
    assert_eq!(state_gauge(&scrape()), 0.0);

    let server = FaultServer::start().await.unwrap();
    let http = reqwest::Client::new();
    let url = server.url("/users/1");
    server.script_statuses("/users/1", &[503, 503, 503, 502, 502, 502]);

    // Two exhausted chains: 2 calls, 2 failures, the breaker trips.
    for _ in 0..2 {
        assert!(matches!(
            get_through(breaker, &http, &url).await,
            Err(ClientError::Status(_))
        ));
    }
    let samples = scrape();
    assert_eq!(state_gauge(&samples), 2.0);
    assert_eq!(trips(&samples), 1.0);

    // Open: rejected without a request, and without a retry.
    assert!(matches!(
        get_through(breaker, &http, &url).await,
        Err(ClientError::Resilience(resilience::Error::DependencyDown(
            _
        )))
    ));
    assert_eq!(server.requests().len(), 6);

    // After the cooldown one probe goes through; it is slow enough to be
    // scraped while the breaker is half-open.
    tokio::time::sleep(Duration::from_secs(31)).await;
    server.script("/users/1", [Reply::Slow(Duration::from_secs(1))]);
    let (probe, during) = tokio::join!(get_through(breaker, &http, &url), async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        scrape()
    });
    assert_eq!(probe.unwrap(), "ok /users/1");
    assert_eq!(state_gauge(&during), 1.0);

    let samples = scrape();
    assert_eq!(state_gauge(&samples), 0.0);
    assert_eq!(trips(&samples), 1.0, "half-open → closed is not a trip");
    let expected: BTreeMap<String, f64> = [
        (retries("1", "retry"), 2.0),
        (retries("2", "retry"), 2.0),
        (retries("3", "exhausted"), 2.0),
        (retries("1", "success"), 1.0),
    ]
    .into_iter()
    .collect();
    let got: BTreeMap<String, f64> = only(&samples, "http_client_retries_total")
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    assert_eq!(got, expected);
    assert_eq!(
        only(&samples, "dependency_errors_total"),
        [
            (errors("5xx").as_str(), 6.0),
            (errors("circuit_open").as_str(), 1.0)
        ]
        .into_iter()
        .collect()
    );
    for (status, count) in [("5xx", 2.0), ("circuit_open", 1.0), ("ok", 1.0)] {
        assert_eq!(samples[&duration("count", status, None)], count, "{status}");
    }
    // The rejection took no time; the probe took its second.
    assert_eq!(samples[&duration("sum", "circuit_open", None)], 0.0);
    assert_eq!(samples[&duration("bucket", "ok", Some("0.5"))], 0.0);
    assert_eq!(samples[&duration("bucket", "ok", Some("2.5"))], 1.0);
}

/// One attempt of an annotated fn: the next scripted status.
#[resilience::retry(name = "profiles", max = 3, initial = "100ms")]
async fn get_profile(script: &std::sync::Mutex<Vec<u16>>) -> Result<u16, ClientError> {
    let status = script.lock().unwrap().remove(0);
    match status {
        200 => Ok(status),
        code => Err(ClientError::Status(code)),
    }
}

#[tokio::test(start_paused = true)]
async fn an_annotated_fn_is_one_observed_call() {
    let recorder = prometheus();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    // The only test of this binary that touches the global registry.
    Registry::builder().service("checkout").install().unwrap();

    let script = std::sync::Mutex::new(vec![502, 503, 200]);
    assert_eq!(get_profile(&script).await.unwrap(), 200);

    let samples = parse(&handle.render()).0;
    let series = |name: &str, labels: &str| {
        format!("{name}{{{labels}service=\"checkout\",target=\"profiles\"}}")
    };
    let got: BTreeMap<&str, f64> = samples
        .iter()
        .filter(|(k, _)| k.contains("target=\"profiles\"") && !k.contains("_bucket"))
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    let retries = |attempt: &str, result: &str| {
        series(
            "http_client_retries_total",
            &format!("attempt=\"{attempt}\",result=\"{result}\","),
        )
    };
    let expected = [
        (retries("1", "retry"), 1.0),
        (retries("2", "retry"), 1.0),
        (retries("3", "success"), 1.0),
        (series("dependency_errors_total", "reason=\"5xx\","), 2.0),
        (
            "http_client_request_duration_seconds_count{service=\"checkout\",status=\"ok\",target=\"profiles\"}"
                .to_owned(),
            1.0,
        ),
    ];
    for (key, value) in &expected {
        assert_eq!(got.get(key.as_str()), Some(value), "{key} in {got:#?}");
    }
    // And the sum: the two pauses, 100 ms and 200 ms ±25 %.
    let sum = got["http_client_request_duration_seconds_sum{service=\"checkout\",status=\"ok\",target=\"profiles\"}"];
    assert!((0.225..0.376).contains(&sum), "{sum}");
    assert_eq!(got.len(), expected.len() + 1, "{got:#?}");
}
