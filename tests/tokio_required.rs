//! The runtime needs Tokio's timer: a protected call that must pause or
//! time an attempt outside a Tokio runtime panics with a message that says
//! so, instead of tokio's "no reactor running". A call that needs no timer
//! (its first attempt succeeds, no attempt timeout) runs anywhere.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll, Waker};

use resilience::retry;

/// A minimal executor on the current thread, without any Tokio context:
/// what `futures::executor::block_on` does.
fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = fut.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::yield_now();
    }
}

static CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(max = 3, initial = "10ms")]
async fn get_flaky() -> Result<u32, std::io::Error> {
    match CALLS.fetch_add(1, Ordering::Relaxed) {
        0 => Err(std::io::ErrorKind::ConnectionReset.into()),
        n => Ok(n),
    }
}

#[retry(max = 3)]
async fn get_healthy() -> Result<u32, std::io::Error> {
    Ok(7)
}

#[test]
fn a_retry_outside_tokio_panics_with_a_message_that_names_tokio() {
    let panic = std::thread::spawn(|| block_on(get_flaky()))
        .join()
        .expect_err("the pause before the retry needs Tokio's timer");
    let message = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default();
    assert!(
        message.starts_with("resilience needs a Tokio runtime with its timer"),
        "{message}"
    );
    assert!(message.contains("#[tokio::main]"), "{message}");
    assert_eq!(CALLS.load(Ordering::Relaxed), 1);
}

#[test]
fn a_call_that_needs_no_timer_runs_outside_tokio() {
    assert_eq!(block_on(get_healthy()).unwrap(), 7);
}
