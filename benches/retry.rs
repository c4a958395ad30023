//! The cost of the retry executor when the first attempt succeeds, against a
//! direct call of the same async fn, and backon (the most used peer) and
//! tokio-retry2 around the same fn in the same run.
//!
//! Two harnesses: `first-attempt-succeeds` polls each future on the stack,
//! where the optimizer may keep a small one in registers; `in-task` puts it
//! behind a pointer the optimizer cannot see through, as it is inside a
//! task. Each has a floor: the least any wrapper that calls an operation
//! and stores its future can cost.
//!
//! `retry/blocking` is the same comparison for blocking code, without a
//! runtime: `Policy::retry_blocking` against backon's `BlockingRetryable`.
//!
//! `cargo bench --bench retry -- --warm-up-time 1 --measurement-time 3`

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll};

use criterion::{Criterion, criterion_group, criterion_main};
use resilience::retry::{Hedge, Policy};

mod common;
use common::{poll_in_task, poll_once};

#[inline(never)]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    Ok(black_box(id) + 1)
}

/// `get_user` as the compiler sees a real call: it may fail. `get_user`
/// never does, and with LTO the optimizer proves it and drops the chain's
/// failure path; a real dependency's errors keep that path reachable.
#[inline(never)]
async fn get_user_may_fail(id: u64) -> Result<u64, std::io::Error> {
    let id = black_box(id);
    if id == u64::MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset",
        ));
    }
    Ok(id + 1)
}

pin_project_lite::pin_project! {
    /// The floor: calls `op` once and polls its future, nothing else.
    struct Floor<F, Fut> {
        op: F,
        #[pin]
        fut: Option<Fut>,
    }
}

impl<F: FnMut() -> Fut, Fut: Future> Future for Floor<F, Fut> {
    type Output = Fut::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Fut::Output> {
        let mut this = self.project();
        if this.fut.is_none() {
            let fut = (this.op)();
            this.fut.set(Some(fut));
        }
        match this.fut.as_pin_mut() {
            Some(fut) => fut.poll(cx),
            None => unreachable!("the future was just stored"),
        }
    }
}

fn floor<F: FnMut() -> Fut, Fut>(op: F) -> Floor<F, Fut> {
    Floor { op, fut: None }
}

fn success_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("retry/first-attempt-succeeds");
    group.bench_function("direct call", |b| {
        b.iter(|| poll_once(get_user(black_box(7))))
    });
    group.bench_function("floor: op + its future", |b| {
        b.iter(|| poll_once(floor(|| get_user(black_box(7)))))
    });
    let policy = Policy::http();
    group.bench_function("Policy::retry", |b| {
        b.iter(|| poll_once(black_box(policy).retry(|| get_user(black_box(7)))))
    });
    group.bench_function("Policy::retry, policy known at compile time", |b| {
        b.iter(|| poll_once(Policy::http().retry(|| get_user(black_box(7)))))
    });
    group.bench_function("backon (peer, same fn)", |b| {
        use backon::Retryable;
        let builder = backon::ExponentialBuilder::default().with_jitter();
        b.iter(|| poll_once((|| get_user(black_box(7))).retry(black_box(builder))))
    });
    // backon as its README writes the call and as users compare it: the
    // default builder (no jitter), built in place, as the policy of the row
    // `Policy::retry, policy known at compile time` is.
    group.bench_function(
        "backon, ExponentialBuilder::default() (peer, same fn)",
        |b| {
            use backon::Retryable;
            b.iter(|| {
                poll_once((|| get_user(black_box(7))).retry(backon::ExponentialBuilder::default()))
            })
        },
    );
    // The same two with an fn that may fail (see `get_user_may_fail`).
    group.bench_function(
        "Policy::retry, policy known at compile time, fn may fail",
        |b| b.iter(|| poll_once(Policy::http().retry(|| get_user_may_fail(black_box(7))))),
    );
    group.bench_function(
        "backon, ExponentialBuilder::default(), fn may fail (peer, same fn)",
        |b| {
            use backon::Retryable;
            b.iter(|| {
                poll_once(
                    (|| get_user_may_fail(black_box(7)))
                        .retry(backon::ExponentialBuilder::default()),
                )
            })
        },
    );
    // tokio-retry2 has no default strategy: its README's, built per call as
    // the README builds it. Its actions return its own error type, so the
    // same fn is mapped with its `MapErr`.
    group.bench_function("tokio-retry2 (peer, same fn)", |b| {
        use tokio_retry2::MapErr;
        use tokio_retry2::strategy::{ExponentialBackoff, MaxInterval, jitter};
        b.iter(|| {
            let strategy = ExponentialBackoff::from_millis(10)
                .factor(1)
                .max_delay_millis(100)
                .max_interval(10000)
                .map(jitter)
                .take(3);
            poll_once(tokio_retry2::Retry::spawn(strategy, || async {
                get_user(black_box(7)).await.map_transient_err()
            }))
        })
    });
    // The same without `max_interval`, which reads the clock when the
    // strategy is built: the least tokio-retry2 costs per call.
    group.bench_function("tokio-retry2, no max_interval (peer, same fn)", |b| {
        use tokio_retry2::MapErr;
        use tokio_retry2::strategy::{ExponentialBackoff, jitter};
        b.iter(|| {
            let strategy = ExponentialBackoff::from_millis(10)
                .factor(1)
                .max_delay_millis(100)
                .map(jitter)
                .take(3);
            poll_once(tokio_retry2::Retry::spawn(strategy, || async {
                get_user(black_box(7)).await.map_transient_err()
            }))
        })
    });
    group.finish();
}

fn in_task(c: &mut Criterion) {
    let mut group = c.benchmark_group("retry/in-task");
    group.bench_function("direct call", |b| {
        b.iter(|| poll_in_task(get_user(black_box(7))))
    });
    group.bench_function("floor: op + its future", |b| {
        b.iter(|| poll_in_task(floor(|| get_user(black_box(7)))))
    });
    let policy = Policy::http();
    group.bench_function("Policy::retry", |b| {
        b.iter(|| poll_in_task(black_box(policy).retry(|| get_user(black_box(7)))))
    });
    group.bench_function("backon (peer, same fn)", |b| {
        use backon::Retryable;
        let builder = backon::ExponentialBuilder::default().with_jitter();
        b.iter(|| poll_in_task((|| get_user(black_box(7))).retry(black_box(builder))))
    });
    group.finish();
}

/// The same fn, blocking: what a caller without a runtime pays when the
/// first attempt succeeds, against backon's `BlockingRetryable`.
#[inline(never)]
fn get_user_blocking(id: u64) -> Result<u64, std::io::Error> {
    Ok(black_box(id) + 1)
}

fn blocking(c: &mut Criterion) {
    let mut group = c.benchmark_group("retry/blocking");
    group.bench_function("direct call", |b| {
        b.iter(|| get_user_blocking(black_box(7)).is_ok())
    });
    group.bench_function("Policy::retry_blocking", |b| {
        let policy = black_box(Policy::http());
        b.iter(|| {
            black_box(policy)
                .retry_blocking(|| get_user_blocking(black_box(7)))
                .call()
                .is_ok()
        })
    });
    group.bench_function("backon (peer, same fn)", |b| {
        use backon::BlockingRetryable;
        let builder = backon::ExponentialBuilder::default().with_jitter();
        b.iter(|| {
            (|| get_user_blocking(black_box(7)))
                .retry(black_box(builder))
                .call()
                .is_ok()
        })
    });
    group.finish();
}

fn report_sizes(_: &mut Criterion) {
    let policy = Policy::http();
    let direct = std::mem::size_of_val(&get_user(1));
    let chain = std::mem::size_of_val(&policy.retry(|| get_user(1)));
    println!(
        "size of the direct future: {direct} bytes; of the retry future around it: {chain} bytes"
    );
}

/// A hedged call whose first attempt answers at once, beside
/// `Policy::retry` in the same runtime context (the hedge's timers need
/// one).
fn hedged(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _entered = rt.enter();
    let mut group = c.benchmark_group("hedge/first-attempt-succeeds");
    let policy = Policy::http();
    let hedge = Hedge::new("bench", std::time::Duration::from_millis(50), 2).unwrap();
    group.bench_function("Policy::retry", |b| {
        b.iter(|| poll_once(black_box(policy).retry(|| get_user(black_box(7)))))
    });
    group.bench_function("Policy::hedge", |b| {
        b.iter(|| poll_once(black_box(policy).hedge(hedge, || get_user(black_box(7)))))
    });
    group.finish();
}

criterion_group!(
    benches,
    success_path,
    in_task,
    blocking,
    hedged,
    report_sizes
);
criterion_main!(benches);
