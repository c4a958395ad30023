//! The chaos suite that needs no outside service: a real axum
//! server and the annotated reqwest client on loopback, with the
//! fault-injecting proxy of `resilience-chaos` between them, on real time.
//! The figures are in `RELIABILITY.md`.
//!
//! ```text
//! cargo test --workspace --all-features --test chaos -- --nocapture --test-threads 1
//! CHAOS_SOAK=1 cargo test --workspace --all-features --test chaos -- --nocapture --test-threads 1
//! ```
//!
//! `CHAOS_SEED=<n>` replays the proxy's choices of another run (the seed is
//! printed with each table); `CHAOS_SOAK=1` makes the runs ten times longer.

mod chaos_common;

use std::time::{Duration, Instant};

use chaos_common::{
    Downstream, PaymentServer, assert_exactly_once, exactly_once_runs, fresh_connections, ms,
    percentile, print_table, seed, soak,
};
use resilience::breaker::{BreakerConfig, CircuitBreaker, State};
use resilience::http::{HttpError, ResponseExt};
use resilience::idempotency::server::{IdempotencyLayer, MemoryStore, Scope};
use resilience::retry::Policy;
use resilience::{circuit_breaker, registry, retry};
use resilience_chaos::{Proxy, Toxic};

fn breaker(name: &str) -> CircuitBreaker {
    registry::global()
        .breakers()
        .into_iter()
        .find(|breaker| breaker.name() == name)
        .unwrap_or_else(|| panic!("no breaker named {name}"))
        .clone()
}

// ---------------------------------------------------------------------------
// 1. Exactly once under network faults, memory store
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_under_network_faults_memory_store() {
    let posts = if soak() { 10_000 } else { 1_000 };
    let server = PaymentServer::start(IdempotencyLayer::new(
        MemoryStore::new(4 * posts).expect("capacity"),
        Scope::unscoped(),
    ))
    .await;
    let runs = exactly_once_runs("memory", &server, posts).await;
    for run in &runs {
        assert_exactly_once(run);
    }
}

// ---------------------------------------------------------------------------
// 2. A blackholed dependency opens the breaker
// ---------------------------------------------------------------------------

const BLACKHOLE_MIN: u32 = 5;

#[circuit_breaker(name = "chaos-blackhole", min = 5, ratio = 0.5, cooldown = "1s")]
#[retry(
    max = 2,
    initial = "10ms",
    attempt_timeout = "100ms",
    max_elapsed = "300ms"
)]
async fn get_stock(client: &reqwest::Client, url: &str) -> Result<String, HttpError> {
    Ok(client.get(url).send().await?.check().await?.text().await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_dependency_opens_the_breaker_and_a_probe_closes_it() {
    let downstream = Downstream::start().await;
    let proxy = Proxy::builder(downstream.addr())
        .seed(seed(2))
        .toxic(Toxic::blackhole(), 1.0)
        .start()
        .await
        .unwrap();
    let url = format!("http://{}/ok/stock", proxy.addr());
    let client = fresh_connections();

    // Closed: every call hangs until its chain's budget cuts it.
    let mut to_open = 0;
    let mut failing = Vec::new();
    while to_open < 3 * BLACKHOLE_MIN {
        let began = Instant::now();
        let result = get_stock(&client, &url).await;
        failing.push(began.elapsed());
        to_open += 1;
        assert!(result.is_err(), "a blackholed call succeeded: {result:?}");
        if breaker("chaos-blackhole").state() == State::Open {
            break;
        }
    }
    let snapshot = breaker("chaos-blackhole").snapshot();
    assert_eq!(snapshot.state, State::Open, "{snapshot:?}");

    // Open: rejected at once, nothing sent.
    let (requests, connections) = (downstream.total(), proxy.connections());
    let mut rejections = Vec::with_capacity(100);
    for _ in 0..100 {
        let began = Instant::now();
        let result = get_stock(&client, &url).await;
        rejections.push(began.elapsed());
        assert!(
            matches!(&result, Err(err) if err.is_dependency_down()),
            "{result:?}"
        );
    }
    let reached_server = downstream.total() - requests;
    let opened_connections = proxy.connections() - connections;
    rejections.sort_unstable();

    // Healed, after the cooldown one probe closes it.
    proxy.heal();
    let wait = breaker("chaos-blackhole")
        .snapshot()
        .until_half_open
        .unwrap_or_default();
    tokio::time::sleep(wait + Duration::from_millis(50)).await;
    let probe_requests = downstream.total();
    let began = Instant::now();
    let probe = get_stock(&client, &url).await;
    let probe_latency = began.elapsed();
    let after_probe = breaker("chaos-blackhole").state();

    failing.sort_unstable();
    print_table(
        "blackholed dependency → breaker",
        &[
            "min",
            "calls to open",
            "failing call p50",
            "failing call max",
            "rejections",
            "rejection p50",
            "rejection p99",
            "rejection max",
            "requests reaching the server while open",
            "connections opened while open",
            "probe",
            "state after probe",
        ],
        &[vec![
            BLACKHOLE_MIN.to_string(),
            to_open.to_string(),
            ms(percentile(&failing, 0.5)),
            ms(failing.last().copied().unwrap_or_default()),
            rejections.len().to_string(),
            ms(percentile(&rejections, 0.5)),
            ms(percentile(&rejections, 0.99)),
            ms(rejections.last().copied().unwrap_or_default()),
            reached_server.to_string(),
            opened_connections.to_string(),
            format!(
                "{} in {}, {} request",
                if probe.is_ok() { "ok" } else { "failed" },
                ms(probe_latency),
                downstream.total() - probe_requests
            ),
            format!("{after_probe:?}"),
        ]],
    );

    assert!(
        to_open <= BLACKHOLE_MIN,
        "the breaker opened after {to_open} calls, min is {BLACKHOLE_MIN}"
    );
    // A hung call is cut by the chain's budget (300 ms), not by the OS.
    assert!(
        *failing.last().unwrap() < Duration::from_secs(2),
        "{failing:?}"
    );
    assert!(
        percentile(&rejections, 0.5) < Duration::from_millis(1),
        "{rejections:?}"
    );
    assert_eq!((reached_server, opened_connections), (0, 0));
    assert!(probe.is_ok(), "{probe:?}");
    assert_eq!(after_probe, State::Closed);
}

// ---------------------------------------------------------------------------
// 4. Retry storm: 5 replicas × 3 attempts against a downstream that is down
// ---------------------------------------------------------------------------

const REPLICAS: usize = 5;
const STORM_MIN: u32 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_storm_is_cut_by_each_replicas_breaker() {
    let calls_per_replica = if soak() { 200 } else { 20 };
    let downstream = Downstream::start().await;
    let client = fresh_connections();
    let policy = Policy::builder()
        .with_max_attempts(3)
        .with_initial(Duration::from_millis(10))
        .with_max_elapsed(Duration::from_secs(2))
        .build()
        .unwrap();
    const NAMES: [&str; REPLICAS] = [
        "chaos-storm-0",
        "chaos-storm-1",
        "chaos-storm-2",
        "chaos-storm-3",
        "chaos-storm-4",
    ];

    let mut replicas = tokio::task::JoinSet::new();
    for (replica, name) in NAMES.into_iter().enumerate() {
        let breaker = CircuitBreaker::new(
            name,
            BreakerConfig::new()
                .with_min_requests(STORM_MIN)
                .with_failure_ratio(0.5)
                .with_cooldown(Duration::from_secs(60)),
        )
        .unwrap();
        let client = client.clone();
        let url = format!("http://{}/down/{replica}", downstream.addr());
        replicas.spawn(async move {
            // (attempts per call before the breaker opened, after)
            let mut before = Vec::new();
            let mut after = Vec::new();
            for _ in 0..calls_per_replica {
                let was_open = breaker.state() == State::Open;
                let attempts = std::sync::atomic::AtomicU32::new(0);
                let result: Result<String, HttpError> = breaker
                    .call(policy.retry(|| {
                        attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let request = client.get(&url);
                        async move { Ok(request.send().await?.check().await?.text().await?) }
                    }))
                    .await;
                assert!(result.is_err());
                let attempts = attempts.into_inner();
                if was_open {
                    after.push(attempts);
                } else {
                    before.push(attempts);
                }
            }
            (replica, before, after)
        });
    }
    let mut rows = Vec::new();
    let mut per_replica = Vec::new();
    while let Some(done) = replicas.join_next().await {
        per_replica.push(done.unwrap());
    }
    per_replica.sort_by_key(|(replica, ..)| *replica);
    for (replica, before, after) in &per_replica {
        let hits = downstream.hits(&format!("/down/{replica}"));
        let sent_before: u32 = before.iter().sum();
        let sent_after: u32 = after.iter().sum();
        rows.push(vec![
            replica.to_string(),
            calls_per_replica.to_string(),
            before.len().to_string(),
            format!("{:.2}", f64::from(sent_before) / before.len().max(1) as f64),
            after.len().to_string(),
            sent_after.to_string(),
            hits.to_string(),
            (calls_per_replica * 3).to_string(),
        ]);
    }
    let total = downstream.total();
    rows.push(vec![
        "all".into(),
        (REPLICAS * calls_per_replica).to_string(),
        per_replica
            .iter()
            .map(|r| r.1.len())
            .sum::<usize>()
            .to_string(),
        String::new(),
        per_replica
            .iter()
            .map(|r| r.2.len())
            .sum::<usize>()
            .to_string(),
        per_replica
            .iter()
            .map(|r| r.2.iter().sum::<u32>())
            .sum::<u32>()
            .to_string(),
        total.to_string(),
        (REPLICAS * calls_per_replica * 3).to_string(),
    ]);
    print_table(
        "retry storm: 5 replicas × 3 attempts, downstream answering 503",
        &[
            "replica",
            "logical calls",
            "calls before open",
            "requests per call before open",
            "calls while open",
            "requests while open",
            "requests at the downstream",
            "without a breaker",
        ],
        &rows,
    );

    for (replica, before, after) in &per_replica {
        assert_eq!(before.len(), STORM_MIN as usize, "replica {replica}");
        assert!(
            before.iter().all(|&n| n == 3),
            "replica {replica}: {before:?}"
        );
        assert!(
            after.iter().all(|&n| n == 0),
            "replica {replica}: {after:?}"
        );
        assert_eq!(
            downstream.hits(&format!("/down/{replica}")),
            u64::from(STORM_MIN) * 3
        );
    }
    assert_eq!(total, (REPLICAS as u64) * u64::from(STORM_MIN) * 3);
}
