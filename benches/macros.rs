//! What the macros cost on the success path: the code `#[retry]` generates
//! against calling the runtime by hand, and a fn with both attributes whose
//! first attempt succeeds against the bare fn. `#[circuit_breaker]` alone
//! must stay below both attributes stacked, in time and in instructions
//! (it once measured slower): filter on `'#\[circuit_breaker\]'` to
//! compare the two in one run. The peer, backon, runs around the same
//! body (`get_user_backon`), and so does its attribute, backon-macros'
//! `#[backon]` (`get_user_backon_macros`). `get_value`'s rows compare the
//! two attributes as users write them, with their defaults, on a fn that
//! awaits another; `macros/instrumented` runs them again with a Prometheus
//! recorder and a tracing subscriber installed.
//!
//! `cargo bench --bench macros -- --warm-up-time 1 --measurement-time 3`
//! (and `--profile peers` for the build of BENCHMARKS.md's peers section)
//!
//! Every body awaits a ready future, as a real call awaits its transport
//! (a breaker around a body that awaits nothing does not compile).

use std::future::ready;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use resilience::retry::Policy;
use resilience::telemetry::{self, Labels, RetryMetrics};
use resilience::{circuit_breaker, retry};

mod common;
use common::{batched, poll_once};

type Error = std::io::Error;

#[inline(never)]
async fn get_user(id: u64) -> Result<u64, Error> {
    ready(Ok(black_box(id) + 1)).await
}

// The same body, expanded by the macro.
#[inline(never)]
#[retry(max = 3, initial = "100ms")]
async fn get_user_retried(id: u64) -> Result<u64, Error> {
    ready(Ok(black_box(id) + 1)).await
}

// Both layers, as in the README: breaker around retry.
#[inline(never)]
#[circuit_breaker(name = "bench-user", ratio = 0.5, min = 20)]
#[retry(max = 3, initial = "100ms")]
async fn get_user_protected(id: u64) -> Result<u64, Error> {
    ready(Ok(black_box(id) + 1)).await
}

#[inline(never)]
#[circuit_breaker(name = "bench-breaker-only", ratio = 0.5, min = 20)]
async fn get_user_breaker(id: u64) -> Result<u64, Error> {
    ready(Ok(black_box(id) + 1)).await
}

#[inline(never)]
async fn get_user_breaker_by_hand(id: u64) -> Result<u64, Error> {
    let breaker = breaker_by_hand();
    breaker
        .call(async move { ready(Ok(black_box(id) + 1)).await })
        .await
}

#[inline(never)]
async fn get_user_both_by_hand(id: u64) -> Result<u64, Error> {
    let breaker = breaker_both_by_hand();
    let policy = resolved_policy();
    breaker
        .call(policy.retry(|| async move { ready(Ok(black_box(id) + 1)).await }))
        .await
}

/// The breakers of the hand-written lines, resolved once from the registry
/// into a `static`, as the attributes' are.
fn breaker_by_hand() -> &'static resilience::CircuitBreaker {
    static BREAKER: std::sync::OnceLock<&'static resilience::CircuitBreaker> =
        std::sync::OnceLock::new();
    BREAKER.get_or_init(|| registered_breaker("bench-by-hand"))
}

fn breaker_both_by_hand() -> &'static resilience::CircuitBreaker {
    static BREAKER: std::sync::OnceLock<&'static resilience::CircuitBreaker> =
        std::sync::OnceLock::new();
    BREAKER.get_or_init(|| registered_breaker("bench-both-by-hand"))
}

fn registered_breaker(name: &'static str) -> &'static resilience::CircuitBreaker {
    resilience::registry::global()
        .breaker(name, resilience::BreakerConfig::new().with_min_requests(20))
}

/// A policy resolved once at run time, as the attributes' is (the startup
/// config may override it), rather than a constant the compiler can fold.
fn resolved_policy() -> Policy {
    static POLICY: std::sync::OnceLock<Policy> = std::sync::OnceLock::new();
    *POLICY.get_or_init(|| {
        Policy::builder()
            .with_max_attempts(3)
            .build()
            .expect("a valid policy")
    })
}

// What a careful user writes without the macro: a policy resolved once,
// the runtime's executor around the same body.
#[inline(never)]
async fn get_user_by_hand(id: u64) -> Result<u64, Error> {
    let policy = resolved_policy();
    policy
        .retry(|| async move { ready(Ok(black_box(id) + 1)).await })
        .await
}

// The peer: backon around the same body, as its README writes it.
#[inline(never)]
async fn get_user_backon(id: u64) -> Result<u64, Error> {
    use backon::Retryable;
    (|| async move { ready(Ok(black_box(id) + 1)).await })
        .retry(backon::ExponentialBuilder::default().with_jitter())
        .await
}

// The peer's attribute: backon-macros on the same body, with the backoff
// and sleeper of its documentation.
#[inline(never)]
#[backon_macros::backon(backoff = backon::ExponentialBuilder::default, sleep = tokio::time::sleep)]
async fn get_user_backon_macros(id: u64) -> Result<u64, Error> {
    ready(Ok(black_box(id) + 1)).await
}

// The comparison as users write it: `#[retry]` with its defaults and
// `#[backon]` as its documentation writes it, each on a fn that awaits
// another async fn (`op`) and returns the user's own error type.
#[derive(Debug, thiserror::Error, resilience::Classify)]
enum OpError {
    #[error(transparent)]
    #[classify(source)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    #[classify(runtime)]
    Resilience(#[from] resilience::Error),
}

#[inline(never)]
async fn op() -> Result<u64, OpError> {
    Ok(black_box(7) + 1)
}

#[inline(never)]
#[retry]
async fn get_value() -> Result<u64, OpError> {
    op().await
}

#[inline(never)]
#[backon_macros::backon(backoff = backon::ExponentialBuilder::default, sleep = tokio::time::sleep)]
async fn get_value_backon() -> Result<u64, OpError> {
    op().await
}

// The same, drawing on a retry budget: one deposit per call, on this
// thread's stripe.
#[inline(never)]
async fn get_user_by_hand_budgeted(id: u64) -> Result<u64, Error> {
    static BUDGET: std::sync::OnceLock<resilience::retry::Budget> = std::sync::OnceLock::new();
    static POLICY: std::sync::OnceLock<Policy> = std::sync::OnceLock::new();
    let policy = *POLICY.get_or_init(|| {
        let budget = BUDGET.get_or_init(|| {
            resilience::retry::BudgetConfig::new()
                .build()
                .expect("a valid budget")
        });
        resolved_policy().with_budget(budget)
    });
    policy
        .retry(|| async move { ready(Ok(black_box(id) + 1)).await })
        .await
}

// The same, with the telemetry the attributes emit (span, duration,
// attempt metrics): the like-for-like comparison for the macros' own cost.
const BY_HAND: Labels = Labels::new("unknown_service", "bench-by-hand");

#[inline(never)]
async fn get_user_by_hand_observed(id: u64) -> Result<u64, Error> {
    let policy = resolved_policy();
    telemetry::observe(
        BY_HAND,
        policy
            .retry(|| async move { ready(Ok(black_box(id) + 1)).await })
            .notify_with(RetryMetrics::new(BY_HAND)),
    )
    .await
}

#[inline(never)]
async fn get_user_breaker_by_hand_observed(id: u64) -> Result<u64, Error> {
    let breaker = breaker_by_hand();
    telemetry::observe(
        BY_HAND,
        breaker.call(async move { ready(Ok(black_box(id) + 1)).await }),
    )
    .await
}

#[inline(never)]
async fn get_user_both_by_hand_observed(id: u64) -> Result<u64, Error> {
    let breaker = breaker_both_by_hand();
    let policy = resolved_policy();
    telemetry::observe(
        BY_HAND,
        breaker.call(
            policy
                .retry(|| async move { ready(Ok(black_box(id) + 1)).await })
                .notify_with(RetryMetrics::new(BY_HAND)),
        ),
    )
    .await
}

fn retry_success_path(c: &mut Criterion) {
    // A runtime in context, as in a service: the breaker's ticker runs on it.
    let runtime = common::runtime();
    let _context = runtime.enter();
    let mut group = c.benchmark_group("macros/first-attempt-succeeds");
    group.bench_function("bare fn", |b| b.iter(|| poll_once(get_user(black_box(7)))));
    group.bench_function("runtime by hand (Policy::retry)", |b| {
        b.iter(|| poll_once(get_user_by_hand(black_box(7))))
    });
    group.bench_function("runtime by hand, with a retry budget", |b| {
        b.iter(|| poll_once(get_user_by_hand_budgeted(black_box(7))))
    });
    group.bench_function("runtime by hand, same telemetry", |b| {
        b.iter(|| poll_once(get_user_by_hand_observed(black_box(7))))
    });
    group.bench_function("#[retry]", |b| {
        b.iter(|| poll_once(get_user_retried(black_box(7))))
    });
    group.bench_function("backon (peer, same body)", |b| {
        b.iter(|| poll_once(get_user_backon(black_box(7))))
    });
    group.bench_function("#[backon] (peer attribute, same body)", |b| {
        b.iter(|| poll_once(get_user_backon_macros(black_box(7))))
    });
    group.bench_function("get_value: #[retry]", |b| b.iter(|| poll_once(get_value())));
    group.bench_function("get_value: #[backon] (peer attribute)", |b| {
        b.iter(|| poll_once(get_value_backon()))
    });
    group.bench_function("breaker by hand (CircuitBreaker::call)", |b| {
        b.iter(|| poll_once(get_user_breaker_by_hand(black_box(7))))
    });
    group.bench_function("breaker by hand, same telemetry", |b| {
        b.iter(|| poll_once(get_user_breaker_by_hand_observed(black_box(7))))
    });
    group.bench_function("#[circuit_breaker]", |b| {
        b.iter(|| poll_once(get_user_breaker(black_box(7))))
    });
    group.bench_function("both by hand (CircuitBreaker::call(Policy::retry))", |b| {
        b.iter(|| poll_once(get_user_both_by_hand(black_box(7))))
    });
    group.bench_function("both by hand, same telemetry", |b| {
        b.iter(|| poll_once(get_user_both_by_hand_observed(black_box(7))))
    });
    group.bench_function("#[circuit_breaker] + #[retry]", |b| {
        b.iter(|| poll_once(get_user_protected(black_box(7))))
    });
    group.finish();
}

fn report_sizes(_: &mut Criterion) {
    println!(
        "future sizes in bytes: bare {}, #[retry] {}, by hand {}, #[circuit_breaker] {}, both {}",
        std::mem::size_of_val(&get_user(1)),
        std::mem::size_of_val(&get_user_retried(1)),
        std::mem::size_of_val(&get_user_by_hand(1)),
        std::mem::size_of_val(&get_user_breaker(1)),
        std::mem::size_of_val(&get_user_protected(1)),
    );
}

/// `get_value`'s two rows again, with what a service installs: a Prometheus
/// recorder (`common::prometheus_recorder`) and a `tracing_subscriber`
/// fmt subscriber writing to a sink, both global. `#[retry]` then opens its
/// `resilience.call` span and records its metrics on every call; backon
/// emits neither. Runs last: neither can be uninstalled.
fn instrumented(c: &mut Criterion) {
    let runtime = common::runtime();
    let _context = runtime.enter();

    let recorder = common::prometheus_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("no recorder installed before");
    let subscriber = tracing_subscriber::fmt()
        .with_writer(std::io::sink)
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("no subscriber installed before");
    assert!(telemetry::recorder_installed());
    assert!(tracing::level_enabled!(tracing::Level::INFO));

    let mut group = c.benchmark_group("macros/instrumented");
    group.bench_function(
        "get_value: #[retry], Prometheus recorder + fmt subscriber",
        |b| b.iter_custom(|iters| batched(iters, &handle, || poll_once(get_value()))),
    );
    group.bench_function(
        "get_value: #[backon] (peer attribute), Prometheus recorder + fmt subscriber",
        |b| b.iter_custom(|iters| batched(iters, &handle, || poll_once(get_value_backon()))),
    );
    group.finish();
}

criterion_group!(benches, retry_success_path, report_sizes, instrumented);
criterion_main!(benches);
