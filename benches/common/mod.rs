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
