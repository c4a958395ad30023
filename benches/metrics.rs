//! What the telemetry of `resilience::guide` adds to a call whose first attempt succeeds:
//! with the `metrics` feature compiled out, with it compiled in but no
//! recorder installed, and with a Prometheus recorder.
//!
//! The same binary cannot hold both builds, so run it twice and compare the
//! `instrumented` lines (BENCHMARKS.md, *Telemetry*):
//!
//! ```text
//! cargo bench --bench metrics -- --warm-up-time 1 --measurement-time 3
//! cargo bench --bench metrics --no-default-features -- --warm-up-time 1 --measurement-time 3
//! ```

use std::hint::black_box;

use criterion::{Criterion, criterion_group};
use resilience::retry::Policy;
use resilience::telemetry::{self, Labels, RetryMetrics};

mod common;
use common::poll_once;

const USERS: Labels = Labels::new("checkout", "users");

#[inline(never)]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    Ok(black_box(id) + 1)
}

#[inline(always)]
fn instrumented(policy: Policy) -> Result<u64, std::io::Error> {
    poll_once(telemetry::observe(
        USERS,
        policy
            .retry(|| get_user(black_box(7)))
            .notify_with(RetryMetrics::new(black_box(USERS))),
    ))
}

fn success_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("metrics/first-attempt-succeeds");
    let policy = Policy::http();
    group.bench_function("bare Policy::retry", |b| {
        b.iter(|| poll_once(black_box(policy).retry(|| get_user(black_box(7)))))
    });

    group.bench_function("Policy::retry + RetryMetrics", |b| {
        b.iter(|| {
            poll_once(
                black_box(policy)
                    .retry(|| get_user(black_box(7)))
                    .notify_with(RetryMetrics::new(black_box(USERS))),
            )
        })
    });
    group.bench_function("observe(Policy::retry)", |b| {
        b.iter(|| {
            poll_once(telemetry::observe(
                black_box(USERS),
                black_box(policy).retry(|| get_user(black_box(7))),
            ))
        })
    });

    #[cfg(not(feature = "metrics"))]
    group.bench_function("instrumented, metrics compiled out", |b| {
        b.iter(|| instrumented(black_box(policy)))
    });

    #[cfg(feature = "metrics")]
    {
        assert!(!telemetry::recorder_installed());
        group.bench_function("instrumented, no recorder", |b| {
            b.iter(|| instrumented(black_box(policy)))
        });
        // Most of what "no recorder" adds over "compiled out": the one
        // lookup per call, alone.
        group.bench_function("the recorder lookup alone", |b| {
            b.iter(|| black_box(telemetry::recorder_installed()))
        });

        let recorder = common::prometheus_recorder();
        let handle = recorder.handle();
        let _local = metrics::set_default_local_recorder(&recorder);
        assert!(telemetry::recorder_installed());
        group.bench_function("instrumented, Prometheus recorder", |b| {
            b.iter_custom(|iters| {
                common::batched(iters, &handle, || instrumented(black_box(policy)))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, success_path);

/// `RESILIENCE_BENCH_CALLS=N`: instead of criterion, make N instrumented
/// calls (no recorder) and exit, for an instruction count that the load of
/// a shared machine cannot skew:
/// `perf stat -e instructions:u` with N = 0 and N = 10 000 000, in both
/// builds.
fn count_mode() -> bool {
    let Ok(calls) = std::env::var("RESILIENCE_BENCH_CALLS") else {
        return false;
    };
    let calls: u64 = calls
        .parse()
        .unwrap_or_else(|_| panic!("RESILIENCE_BENCH_CALLS={calls:?} is not a number"));
    let policy = Policy::http();
    for _ in 0..calls {
        let _ = black_box(instrumented(black_box(policy)));
    }
    true
}

fn main() {
    if !count_mode() {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
}
