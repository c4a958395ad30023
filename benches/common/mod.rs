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
