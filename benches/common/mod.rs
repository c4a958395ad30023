//! What the benches share.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

/// Polls a future that is ready at its first poll, as an executor would,
/// keeping an executor's own costs out of the measurement.
#[inline(always)]
pub fn poll_once<F: Future>(fut: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => unreachable!("the benchmarked future is always ready"),
    }
}

// Not every bench measures in a task.
#[allow(dead_code)]
/// Like [`poll_once`], with the future in memory the optimizer cannot see
/// through, as it is inside a task: no field of it can live in registers.
#[inline(always)]
pub fn poll_in_task<F: Future>(fut: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    let mut fut = pin!(fut);
    let fut = std::hint::black_box(&mut fut);
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => unreachable!("the benchmarked future is always ready"),
    }
}

// Only the benches that install a recorder or run a runtime use these.
#[allow(dead_code)]
/// A Prometheus recorder as a service builds one: the guide's buckets for
/// the request duration, so that it is a histogram, not a summary.
pub fn prometheus_recorder() -> metrics_exporter_prometheus::PrometheusRecorder {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    use resilience::telemetry;
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(telemetry::REQUEST_DURATION_SECONDS.into()),
            telemetry::DURATION_BUCKETS,
        )
        .expect("the buckets are not empty")
        .build_recorder()
}

#[allow(dead_code)]
/// A multi-thread runtime with one worker and the timer, as a service's
/// (the breaker's ticker runs on it).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .expect("a tokio runtime")
}

#[allow(dead_code)]
/// Makes `iters` calls in batches, with the recorder's upkeep between them
/// off the clock: histogram samples wait in the recorder until upkeep folds
/// them into buckets (a service's exporter runs it when scraped).
#[inline(always)]
pub fn batched<T>(
    iters: u64,
    handle: &metrics_exporter_prometheus::PrometheusHandle,
    mut call: impl FnMut() -> T,
) -> std::time::Duration {
    let mut total = std::time::Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let batch = left.min(10_000);
        let start = std::time::Instant::now();
        for _ in 0..batch {
            std::hint::black_box(call());
        }
        total += start.elapsed();
        handle.run_upkeep();
        left -= batch;
    }
    total
}
