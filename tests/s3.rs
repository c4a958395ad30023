//! S3 through the AWS SDK for Rust, against a real S3-compatible server
//! (`s3s-fs`, installed by `.ci/install-servers`) on loopback, behind the
//! project's fault proxy.
//!
//! Not part of the default `cargo test`; run with
//!
//! ```text
//! .ci/install-servers
//! cargo test --all-features --test s3 -- --ignored --test-threads 1
//! ```
//!
//! Each test starts its own `s3s-fs` on a free port over a fresh temporary
//! folder, and kills it by its PID when it ends.

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_s3::config::retry::{RetryConfig, RetryPartition};
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_sdk_s3::operation::put_object::PutObjectError;
use aws_sdk_s3::primitives::ByteStream;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use metrics_exporter_prometheus::{PrometheusHandle, PrometheusRecorder};
use resilience::aws::{AwsRetry, runtime_error};
use resilience::chaos::{HttpProxy, HttpReply, Proxy, Toxic};
use resilience::telemetry::Labels;
use resilience::{BreakerConfig, CircuitBreaker, Error, Policy, circuit_breaker, deadline, retry};

/// The runtime's own span collector, shared with its telemetry tests.
#[path = "../resilience-runtime/src/telemetry/traces.rs"]
mod traces;

const ACCESS_KEY: &str = "resilience-test";
const SECRET_KEY: &str = "resilience-test-secret";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// An `s3s-fs` child serving a temporary folder on its own port; killed by
/// its PID, and its folder removed, on drop.
struct S3Server {
    addr: SocketAddr,
    root: PathBuf,
    child: Child,
}

impl S3Server {
    fn start() -> Self {
        let port = free_port();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let root =
            std::env::temp_dir().join(format!("resilience-s3-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&root).expect("create the server's folder");
        let child = Command::new("s3s-fs")
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(&root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("s3s-fs must be installed (.ci/install-servers)");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err() {
            assert!(
                Instant::now() < deadline,
                "s3s-fs did not listen on {addr} within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { addr, root, child }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// An SDK client for `addr`: path-style addressing, static credentials,
/// plain HTTP, no TLS stack.
fn client_config(addr: SocketAddr) -> aws_sdk_s3::config::Builder {
    aws_sdk_s3::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(format!("http://{addr}"))
        .force_path_style(true)
        .credentials_provider(Credentials::new(ACCESS_KEY, SECRET_KEY, None, None, "test"))
        .http_client(aws_smithy_http_client::Builder::new().build_http())
}

#[tokio::test]
#[ignore = "starts its own s3s-fs (.ci/install-servers)"]
async fn sdk_talks_to_the_server() {
    let server = S3Server::start();
    let s3 = aws_sdk_s3::Client::from_conf(client_config(server.addr).build());
    s3.create_bucket()
        .bucket("avatars")
        .send()
        .await
        .expect("create the bucket");
    s3.put_object()
        .bucket("avatars")
        .key("ann")
        .body(ByteStream::from_static(b"ann's avatar"))
        .send()
        .await
        .expect("put");
    let object = s3
        .get_object()
        .bucket("avatars")
        .key("ann")
        .send()
        .await
        .expect("get");
    let body = object
        .body
        .collect()
        .await
        .expect("read the body")
        .into_bytes();
    assert_eq!(&body[..], b"ann's avatar");
    let missing = s3
        .get_object()
        .bucket("avatars")
        .key("bob")
        .send()
        .await
        .unwrap_err();
    let service = missing.into_service_error();
    assert!(service.is_no_such_key(), "{service:?}");
}

/// A client whose retry is `retry`'s policy.
fn policy_client(addr: SocketAddr, retry: &AwsRetry) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(
        client_config(addr)
            .retry_config(retry.retry_config())
            .retry_partition(retry.retry_partition())
            .retry_classifier(retry.clone())
            .interceptor(retry.clone())
            .build(),
    )
}

/// A client with the SDK's own standard retry (3 attempts), the loop the
/// SDK runs when nobody turns it off.
fn sdk_loop_client(addr: SocketAddr) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(
        client_config(addr)
            .retry_config(RetryConfig::standard().with_initial_backoff(Duration::from_millis(10)))
            .build(),
    )
}

async fn bucket(server: &S3Server, name: &str) {
    let s3 = aws_sdk_s3::Client::from_conf(client_config(server.addr).build());
    s3.create_bucket()
        .bucket(name)
        .send()
        .await
        .expect("create the bucket");
}

fn recorder() -> (PrometheusRecorder, PrometheusHandle) {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    (recorder, handle)
}

/// The value of the sample `name{labels}` (labels as rendered, sorted by
/// the exporter), 0 when absent.
fn sample(handle: &PrometheusHandle, name: &str, labels: &[(&str, &str)]) -> f64 {
    handle
        .render()
        .lines()
        .filter(|line| line.starts_with(name) && !line.starts_with('#'))
        .find(|line| {
            labels
                .iter()
                .all(|(k, v)| line.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
        .unwrap_or(0.0)
}

// The guide's test for a client (SPEC §9: scripted 502, 502, 200 → exactly
// 3 attempts), on S3's own throttling answer: the SDK's lists name
// `SlowDown` a throttling error (aws-runtime `THROTTLING_ERRORS`).
#[tokio::test(flavor = "current_thread")]
#[ignore = "starts its own s3s-fs (.ci/install-servers)"]
async fn slow_down_twice_then_the_third_attempt_succeeds_three_requests_in_all() {
    let server = S3Server::start();
    bucket(&server, "avatars").await;
    let front = HttpProxy::builder(server.addr).start().await.unwrap();
    let (recorder, handle) = recorder();
    let _local = metrics::set_default_local_recorder(&recorder);
    let retry = AwsRetry::with_labels(Labels::new("test", "s3-put-get"), Policy::http());
    let s3 = policy_client(front.addr(), &retry);

    front.answer_next(2, HttpReply::s3_slow_down());
    let started = Instant::now();
    s3.put_object()
        .bucket("avatars")
        .key("ann")
        .body(ByteStream::from_static(b"ann's avatar"))
        .send()
        .await
        .expect("the third attempt succeeds");
    // The policy's pauses, not the SDK's (1 s initial, full jitter): 100 ms
    // then 200 ms, each ±25 %.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(225) && took < Duration::from_millis(700),
        "paused by the policy's schedule: {took:?}"
    );
    // Three requests reached the S3 endpoint for one logical call: two
    // answered 503 SlowDown, one stored the object. Not 9.
    assert_eq!((front.answered(), front.forwarded()), (2, 1));

    front.answer_next(2, HttpReply::s3_slow_down());
    let object = s3
        .get_object()
        .bucket("avatars")
        .key("ann")
        .send()
        .await
        .expect("get");
    let body = object.body.collect().await.unwrap().into_bytes();
    assert_eq!(&body[..], b"ann's avatar");
    assert_eq!((front.answered(), front.forwarded()), (4, 2));

    // The guide's metric: one sample per attempt, per call.
    let target = [("target", "s3-put-get")];
    let at = |attempt: &'static str, result: &'static str| {
        let mut labels = target.to_vec();
        labels.extend([("attempt", attempt), ("result", result)]);
        sample(&handle, "http_client_retries_total", &labels)
    };
    assert_eq!(at("1", "retry"), 2.0);
    assert_eq!(at("2", "retry"), 2.0);
    assert_eq!(at("3", "success"), 2.0);
    assert_eq!(at("3", "exhausted") + at("4", "success"), 0.0);
}

// One span per logical call (SPEC §7: all attempts of one logical call
// belong to one trace span): the PutObject that met 503 SlowDown twice is
// one `S3.PutObject` span, the SDK's operation span, and its three
// attempts (the SDK's `try_attempt` spans) and the policy's events about
// them all run inside it. Were each attempt a call of its own (a loop
// around the SDK instead of inside it), there would be three. Like the
// suite, run with `--test-threads 1`: tracing's per-callsite cache is
// shared with the tests running beside it on other threads.
#[tokio::test(flavor = "current_thread")]
#[ignore = "starts its own s3s-fs (.ci/install-servers)"]
async fn slow_down_twice_is_one_span_holding_the_three_attempts() {
    let server = S3Server::start();
    bucket(&server, "avatars").await;
    let front = HttpProxy::builder(server.addr).start().await.unwrap();
    let retry = AwsRetry::with_labels(Labels::new("test", "s3-span"), Policy::http());
    let s3 = policy_client(front.addr(), &retry);
    let spans = traces::Collector::default();
    let _guard = tracing::subscriber::set_default(spans.clone());

    front.answer_next(2, HttpReply::s3_slow_down());
    s3.put_object()
        .bucket("avatars")
        .key("ann")
        .body(ByteStream::from_static(b"ann's avatar"))
        .send()
        .await
        .expect("the third attempt succeeds");
    assert_eq!((front.answered(), front.forwarded()), (2, 1), "3 requests");

    let all = spans.spans();
    let calls: Vec<_> = all
        .iter()
        .filter(|(_, name, _)| name == "S3.PutObject")
        .collect();
    assert_eq!(calls.len(), 1, "one span for the logical call: {calls:?}");
    let (call, _, fields) = calls[0];
    assert_eq!(spans.parent(*call), None, "the call's span is the root");
    assert!(
        fields.iter().any(|f| f == "rpc.method=PutObject"),
        "{fields:?}"
    );
    let attempts: Vec<_> = all
        .iter()
        .filter(|(_, name, _)| name == "try_attempt")
        .collect();
    let numbered: Vec<_> = attempts
        .iter()
        .map(|(_, _, fields)| fields.join(","))
        .collect();
    assert_eq!(numbered, ["attempt=1", "attempt=2", "attempt=3"]);
    assert!(
        attempts.iter().all(|(id, _, _)| spans.within(*id, *call)),
        "each attempt inside the call's span"
    );

    // The policy's account of the attempts, inside the same span.
    let events = spans.events();
    let policy: Vec<_> = events
        .iter()
        .filter(|seen| {
            seen.message == "attempt failed, retrying after a pause"
                || seen.message == "attempt succeeded"
        })
        .collect();
    let told: Vec<_> = policy
        .iter()
        .map(|seen| (seen.message.as_str(), seen.fields[0].as_str()))
        .collect();
    assert_eq!(
        told,
        [
            ("attempt failed, retrying after a pause", "attempt=1"),
            ("attempt failed, retrying after a pause", "attempt=2"),
            ("attempt succeeded", "attempt=3"),
        ]
    );
    assert!(
        policy
            .iter()
            .all(|seen| seen.span.is_some_and(|span| spans.within(span, *call))),
        "the policy's events inside the call's span: {policy:?}"
    );
}

// The 3 × 3 the guide warns about (SPEC §10: one retry loop per call,
// never both): our retry wrapped around an SDK call. With the policy as the
// SDK's retry, the inner chain makes one attempt and the outer retries: 3
// requests. Around the SDK's own loop it would be 3 × 3 = 9.
#[tokio::test(flavor = "current_thread")]
#[ignore = "starts its own s3s-fs (.ci/install-servers)"]
async fn our_retry_around_the_policy_client_is_one_loop_not_nine() {
    let server = S3Server::start();
    bucket(&server, "avatars").await;
    let front = HttpProxy::builder(server.addr)
        .answer_ratio(1.0, HttpReply::s3_slow_down())
        .start()
        .await
        .unwrap();
    let retry = AwsRetry::with_labels(Labels::new("test", "s3-nested"), Policy::http());
    let s3 = policy_client(front.addr(), &retry);
    let outer = Policy::builder()
        .with_max_attempts(3)
        .with_initial(Duration::from_millis(10))
        .build()
        .unwrap();
    let result = outer
        .retry(|| s3.get_object().bucket("avatars").key("ann").send())
        .await;
    assert!(result.is_err());
    assert_eq!(
        front.answered(),
        3,
        "one loop: the outer chain's 3 attempts"
    );

    // The same wrapping around the SDK's own loop: 9, what the guide forbids.
    let front = HttpProxy::builder(server.addr)
        .answer_ratio(1.0, HttpReply::s3_slow_down())
        .start()
        .await
        .unwrap();
    let sdk = sdk_loop_client(front.addr());
    let result = outer
        .retry(|| sdk.get_object().bucket("avatars").key("ann").send())
        .await;
    assert!(result.is_err());
    assert_eq!(front.answered(), 9, "two loops: 3 × 3");
}

// The caller's deadline bounds the whole call (SPEC §4) and no attempt
// starts after it (SPEC §1): S3 hangs (every connection blackholed), the
// deadline is 300 ms.
#[tokio::test(flavor = "current_thread")]
#[ignore = "starts its own s3s-fs (.ci/install-servers)"]
async fn the_callers_deadline_cuts_a_hanging_call_and_nothing_starts_after_it() {
    let server = S3Server::start();
    bucket(&server, "avatars").await;
    let proxy = Proxy::builder(server.addr)
        .toxic(Toxic::blackhole(), 1.0)
        .start()
        .await
        .unwrap();
    let retry = AwsRetry::with_labels(Labels::new("test", "s3-deadline"), Policy::http());
    let s3 = policy_client(proxy.addr(), &retry);
    let started = Instant::now();
    let result = deadline::with_timeout(
        Duration::from_millis(300),
        s3.get_object().bucket("avatars").key("ann").send(),
    )
    .await;
    let took = started.elapsed();
    let err = result.expect_err("S3 never answers");
    assert!(
        took >= Duration::from_millis(280) && took < Duration::from_millis(800),
        "cut at the deadline, not later: {took:?}"
    );
    assert!(
        matches!(err, aws_sdk_s3::error::SdkError::TimeoutError(_)),
        "{err:?}"
    );
    let connections = proxy.connections();
    assert_eq!(connections, 1, "one attempt before the deadline");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        proxy.connections(),
        connections,
        "no attempt after the deadline"
    );
}

// The breaker around the call (SPEC §5): S3 down, the breaker opens once
// its window holds `min` calls, all failed, and while it is open the SDK
// sends nothing.
#[tokio::test(flavor = "current_thread")]
#[ignore = "starts its own s3s-fs (.ci/install-servers)"]
async fn s3_down_opens_the_breaker_and_the_sdk_sends_nothing_while_open() {
    let server = S3Server::start();
    bucket(&server, "avatars").await;
    let front = HttpProxy::builder(server.addr).start().await.unwrap();
    let policy = Policy::builder()
        .with_max_attempts(3)
        .with_initial(Duration::from_millis(10))
        .build()
        .unwrap();
    let retry = AwsRetry::with_labels(Labels::new("test", "s3-down"), policy);
    let s3 = policy_client(front.addr(), &retry);
    let breaker = CircuitBreaker::new(
        "s3-down",
        BreakerConfig::new()
            .with_min_requests(5)
            .with_failure_ratio(0.5),
    )
    .unwrap();
    drop(server); // S3 down: killed by its PID

    for call in 1..=5 {
        let err = breaker
            .call(s3.get_object().bucket("avatars").key("ann").send())
            .await
            .unwrap_err();
        assert!(
            runtime_error(&err).is_none(),
            "call {call} reached the SDK: {err:?}"
        );
    }
    // 5 calls × 3 attempts, each reaching the front, none the server.
    assert_eq!(front.received(), 15);
    assert_eq!(front.forwarded(), 0);

    for _ in 0..10 {
        let err = breaker
            .call(s3.get_object().bucket("avatars").key("ann").send())
            .await
            .unwrap_err();
        assert!(
            matches!(runtime_error(&err), Some(Error::DependencyDown(_))),
            "dependency down: {err:?}"
        );
    }
    assert_eq!(
        front.received(),
        15,
        "nothing sent while the breaker is open"
    );
}

// Nothing silently ignored: a client whose SDK retry config allows fewer
// attempts than the policy (here the SDK's default 3 under a policy of 5)
// fails each call before sending anything, and says what to set.
#[tokio::test(flavor = "current_thread")]
#[ignore = "starts its own s3s-fs (.ci/install-servers)"]
async fn a_client_that_would_not_follow_the_policy_sends_nothing_and_says_why() {
    let server = S3Server::start();
    bucket(&server, "avatars").await;
    let front = HttpProxy::builder(server.addr).start().await.unwrap();
    let policy = Policy::builder().with_max_attempts(5).build().unwrap();
    let retry = AwsRetry::with_labels(Labels::new("test", "s3-misconfigured"), policy);
    let s3 = aws_sdk_s3::Client::from_conf(
        client_config(front.addr())
            .retry_config(RetryConfig::standard())
            .retry_classifier(retry.clone())
            .interceptor(retry.clone())
            .build(),
    );
    let err = s3
        .get_object()
        .bucket("avatars")
        .key("ann")
        .send()
        .await
        .unwrap_err();
    let message = format!("{:?}", err);
    assert!(
        message.contains("allows 3 attempts, the policy 5"),
        "{message}"
    );
    assert!(
        message.contains("retry_config(retry.retry_config())"),
        "{message}"
    );
    assert_eq!(front.received(), 0);
}

/// One row of the figures: requests the S3 endpoint saw per logical call.
struct Row {
    calls: u64,
    ok: u64,
    requests: u64,
    max: u64,
}

async fn run_row<F, Fut>(front: &HttpProxy, calls: u64, mut call: F) -> Row
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut row = Row {
        calls,
        ok: 0,
        requests: 0,
        max: 0,
    };
    for _ in 0..calls {
        let before = front.received();
        if call().await {
            row.ok += 1;
        }
        let seen = front.received() - before;
        row.requests += seen;
        row.max = row.max.max(seen);
    }
    row
}

// RELIABILITY.md's figures for S3 (SPEC §10: one retry loop per call, never
// both, 3 × 3 = 9): requests S3 saw per logical call with 30 % of requests
// answered 503 SlowDown, and with S3 throttling every request, for our
// policy as the SDK's retry, the SDK's own default loop, and each wrongly
// wrapped in a 3-attempt retry of ours.
#[tokio::test(flavor = "current_thread")]
#[ignore = "starts its own s3s-fs (.ci/install-servers); prints RELIABILITY.md's S3 table"]
async fn figures_requests_per_call_under_injected_throttling() {
    let server = S3Server::start();
    bucket(&server, "avatars").await;
    let seeded = aws_sdk_s3::Client::from_conf(client_config(server.addr).build());
    seeded
        .put_object()
        .bucket("avatars")
        .key("ann")
        .body(ByteStream::from_static(b"ann's avatar"))
        .send()
        .await
        .unwrap();
    let calls: u64 = std::env::var("S3_FIGURE_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300);
    let fast = |attempts| {
        Policy::builder()
            .with_max_attempts(attempts)
            .with_initial(Duration::from_millis(5))
            .with_max_interval(Duration::from_millis(20))
            .build()
            .unwrap()
    };
    // Each row its own retry partition, so a fresh SDK token bucket (500
    // tokens, 5 a throttled retry): the SDK's client-wide quota shows as it
    // runs out within one row, not across rows.
    let sdk_fast = |addr, partition: String| {
        aws_sdk_s3::Client::from_conf(
            client_config(addr)
                .retry_partition(RetryPartition::new(partition))
                .retry_config(
                    RetryConfig::standard()
                        .with_initial_backoff(Duration::from_millis(5))
                        .with_max_backoff(Duration::from_millis(20)),
                )
                .build(),
        )
    };
    println!(
        "| faults | loop | calls | succeeded | requests per call (mean) | most for one call |"
    );
    println!("|---|---|---|---|---|---|");
    for (ratio, label) in [(0.3, "30 % 503 SlowDown"), (1.0, "100 % 503 SlowDown")] {
        let mut rows = Vec::new();
        for (name, kind) in [
            ("ours, as the SDK's retry (`AwsRetry`, 3 attempts)", 0),
            ("the SDK's default loop (standard, 3 attempts)", 1),
            ("ours around the SDK's loop (the mistake)", 2),
            ("ours around `AwsRetry` (the mistake, caught)", 3),
        ] {
            let front = HttpProxy::builder(server.addr)
                .answer_ratio(ratio, HttpReply::s3_slow_down())
                .seed(7)
                .start()
                .await
                .unwrap();
            let policy = fast(3);
            let retry = AwsRetry::with_labels(Labels::new("figures", "s3"), policy);
            let ours = policy_client(front.addr(), &retry);
            let sdk = sdk_fast(front.addr(), format!("figures-{ratio}-{kind}"));
            let outer = fast(3);
            let row = run_row(&front, calls, || {
                let (ours, sdk) = (ours.clone(), sdk.clone());
                async move {
                    match kind {
                        0 => ours
                            .get_object()
                            .bucket("avatars")
                            .key("ann")
                            .send()
                            .await
                            .is_ok(),
                        1 => sdk
                            .get_object()
                            .bucket("avatars")
                            .key("ann")
                            .send()
                            .await
                            .is_ok(),
                        2 => outer
                            .retry(|| sdk.get_object().bucket("avatars").key("ann").send())
                            .await
                            .is_ok(),
                        _ => outer
                            .retry(|| ours.get_object().bucket("avatars").key("ann").send())
                            .await
                            .is_ok(),
                    }
                }
            })
            .await;
            println!(
                "| {label} | {name} | {} | {} | {:.2} | {} |",
                row.calls,
                row.ok,
                row.requests as f64 / row.calls as f64,
                row.max
            );
            rows.push(row);
        }
        // One loop: never more than 3 requests for one call; two loops: up
        // to 9 (all 9 when S3 throttles everything).
        assert!(rows[0].max <= 3 && rows[1].max <= 3 && rows[3].max <= 3);
        if ratio == 1.0 {
            assert_eq!(rows[2].max, 9);
            assert_eq!(rows[0].requests, 3 * calls);
        }
    }
}

// The policy's retry budget applies to the SDK's retries (Finagle's
// defaults, which the runtime's `BudgetConfig::new` takes: retries within
// 10 s at most 20 % of the calls plus 10 a second): with S3 throttling
// every request, 200 calls in about 2 s may retry about 140 times, not 400.
#[tokio::test(flavor = "current_thread")]
#[ignore = "starts its own s3s-fs (.ci/install-servers)"]
async fn the_policys_budget_caps_the_sdks_retries() {
    let server = S3Server::start();
    bucket(&server, "avatars").await;
    let front = HttpProxy::builder(server.addr)
        .answer_ratio(1.0, HttpReply::s3_slow_down())
        .start()
        .await
        .unwrap();
    let budget: &'static resilience::retry::Budget = Box::leak(Box::new(
        resilience::retry::BudgetConfig::new().build().unwrap(),
    ));
    let policy = Policy::builder()
        .with_max_attempts(3)
        .with_initial(Duration::from_millis(5))
        .with_max_interval(Duration::from_millis(20))
        .build()
        .unwrap()
        .with_budget(budget);
    let retry = AwsRetry::with_labels(Labels::new("test", "s3-budget"), policy);
    let s3 = policy_client(front.addr(), &retry);
    let calls = 200;
    for _ in 0..calls {
        let _ = s3.get_object().bucket("avatars").key("ann").send().await;
    }
    let per_call = front.received() as f64 / f64::from(calls);
    println!("budget: {per_call:.2} requests per call");
    assert!(
        per_call < 2.2,
        "the budget cut the retries: {per_call:.2} per call"
    );
    assert_eq!(budget.balance(), 0, "spent");
}

// The guide's "one span per logical call" (SPEC §7), for an S3 call whose
// retry is the policy's: the breaker's fn opens one `resilience.call`
// span, and the SDK's three attempts (its `try_attempt` spans) and the
// policy's events for them all run inside it.
#[circuit_breaker(name = "s3-span", min = 20, ratio = 0.5)]
async fn put_avatar(
    s3: &aws_sdk_s3::Client,
    name: &str,
) -> Result<(), SdkError<PutObjectError, HttpResponse>> {
    s3.put_object()
        .bucket("avatars")
        .key(name)
        .body(ByteStream::from_static(b"ann's avatar"))
        .send()
        .await?;
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "starts its own s3s-fs (.ci/install-servers)"]
async fn slow_down_twice_in_a_breaker_fn_is_one_resilience_call_span() {
    let server = S3Server::start();
    bucket(&server, "avatars").await;
    let front = HttpProxy::builder(server.addr).start().await.unwrap();
    let (recorder, handle) = recorder();
    let _local = metrics::set_default_local_recorder(&recorder);
    let retry = AwsRetry::new("s3-span", Policy::http());
    let s3 = policy_client(front.addr(), &retry);
    let spans = traces::Collector::default();
    let _traced = tracing::subscriber::set_default(spans.clone());

    front.answer_next(2, HttpReply::s3_slow_down());
    put_avatar(&s3, "ann")
        .await
        .expect("the third attempt succeeds");
    assert_eq!(
        (front.answered(), front.forwarded()),
        (2, 1),
        "3 requests reached S3"
    );

    let all = spans.spans();
    let calls: Vec<_> = all
        .iter()
        .filter(|(_, name, _)| name == "resilience.call")
        .collect();
    assert_eq!(calls.len(), 1, "one span per logical call: {calls:?}");
    let (call, _, fields) = calls[0];
    for field in ["target=s3-span", "otel.kind=client", "status=ok"] {
        assert!(fields.iter().any(|f| f == field), "{field} in {fields:?}");
    }
    // The SDK's span of each attempt, all three inside the call's.
    let attempts: Vec<_> = all
        .iter()
        .filter(|(_, name, _)| name == "try_attempt")
        .collect();
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    assert!(
        attempts.iter().all(|(id, _, _)| spans.within(*id, *call)),
        "every attempt inside the call's span: {all:?}"
    );
    // The policy's event for each failed attempt, inside it too.
    let events = spans.events();
    let retried: Vec<_> = events
        .iter()
        .filter(|seen| seen.message == "attempt failed, retrying after a pause")
        .collect();
    assert_eq!(retried.len(), 2, "{events:?}");
    assert!(
        retried
            .iter()
            .all(|seen| seen.span.is_some_and(|span| spans.within(span, *call))),
        "{events:?}"
    );

    // The metrics of one call: 3 attempts, one duration.
    let at = |attempt: &'static str, result: &'static str| {
        sample(
            &handle,
            "http_client_retries_total",
            &[
                ("target", "s3-span"),
                ("attempt", attempt),
                ("result", result),
            ],
        )
    };
    assert_eq!(
        (at("1", "retry"), at("2", "retry"), at("3", "success")),
        (1.0, 1.0, 1.0)
    );
    assert_eq!(
        sample(
            &handle,
            "http_client_request_duration_seconds_count",
            &[("target", "s3-span"), ("status", "ok")],
        ),
        1.0
    );
}

// `#[retry]` over an SDK call, with the attribute told how the client
// retries (the build refuses it otherwise): the client runs a policy
// through `AwsRetry`, which makes one attempt inside the chain's, or its
// retry is off. Either way one loop: 3 requests for 3 attempts, not 9.
#[retry(max = 3, initial = "10ms", client_retry = "AwsRetry")]
async fn get_through_the_policy_client(
    s3: &aws_sdk_s3::Client,
) -> Result<(), SdkError<GetObjectError, HttpResponse>> {
    s3.get_object().bucket("avatars").key("ann").send().await?;
    Ok(())
}

#[retry(max = 3, initial = "10ms", client_retry = "disabled")]
async fn get_with_the_clients_retry_off(
    s3: &aws_sdk_s3::Client,
) -> Result<(), SdkError<GetObjectError, HttpResponse>> {
    s3.get_object().bucket("avatars").key("ann").send().await?;
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "starts its own s3s-fs (.ci/install-servers)"]
async fn our_retry_declared_over_the_client_is_one_loop() {
    let server = S3Server::start();
    bucket(&server, "avatars").await;

    let front = HttpProxy::builder(server.addr)
        .answer_ratio(1.0, HttpReply::s3_slow_down())
        .start()
        .await
        .unwrap();
    let retry = AwsRetry::with_labels(Labels::new("test", "s3-declared"), Policy::http());
    let s3 = policy_client(front.addr(), &retry);
    let err = get_through_the_policy_client(&s3).await.unwrap_err();
    assert_eq!(
        err.into_service_error().meta().code(),
        Some("SlowDown"),
        "the last attempt's answer"
    );
    assert_eq!(
        front.answered(),
        3,
        "the chain's 3 attempts, one request each"
    );

    let front = HttpProxy::builder(server.addr)
        .answer_ratio(1.0, HttpReply::s3_slow_down())
        .start()
        .await
        .unwrap();
    let s3 = aws_sdk_s3::Client::from_conf(
        client_config(front.addr())
            .retry_config(RetryConfig::disabled())
            .build(),
    );
    assert!(get_with_the_clients_retry_off(&s3).await.is_err());
    assert_eq!(
        front.answered(),
        3,
        "the chain's 3 attempts, one request each"
    );
}
