//! The caller's deadline, set once around a request and respected by every
//! retry chain inside it.
//!
//! This is Go's `ctx` deadline for async Rust: a handler declares how long
//! its caller will wait, and every retry loop below it, however deep, stops
//! at that time instead of sleeping past it (the guide's
//! [deadlines and budgets](crate::guide#deadlines-and-budgets)). The
//! deadline is scoped to the future it wraps, like a task-local: it needs
//! no extra parameter and does not leak into tasks spawned from inside.
//!
//! ```
//! use resilience::deadline;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let left = deadline::with_timeout(Duration::from_secs(30), async {
//!     // Nested scopes keep the earlier deadline.
//!     deadline::with_timeout(Duration::from_secs(60), async { deadline::remaining() }).await
//! })
//! .await;
//! assert!(left.unwrap() <= Duration::from_secs(30));
//! # }
//! ```
//!
//! A scope only informs: the executor never starts an attempt after the
//! deadline, never sleeps past it and cuts the attempt in flight when it
//! passes. Code that does not go through the executor is not cut; wrap it
//! in [`tokio::time::timeout_at`] with [`current`] where that is needed.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::Instant;

thread_local! {
    // Set only while a `WithDeadline` future is being polled on this thread.
    // A const-initialised `Cell` of a `Copy` type: one TLS load to read,
    // which keeps the retry executor's success path cheap.
    static CURRENT: Cell<Option<Instant>> = const { Cell::new(None) };
}

pin_project! {
    /// A future run under a deadline; see [`with_deadline`].
    #[derive(Debug)]
    #[must_use = "futures do nothing unless `.await`ed"]
    pub struct WithDeadline<F> {
        deadline: Deadline,
        #[pin]
        inner: F,
    }
}

#[derive(Debug, Clone, Copy)]
enum Deadline {
    // The earlier of the two is chosen at the first poll, inside the scope
    // that actually runs the future.
    Unresolved(Option<Instant>),
    Resolved(Option<Instant>),
}

/// Runs `fut` with `deadline` as the caller's deadline, or the deadline
/// already in scope when that one is earlier.
pub fn with_deadline<F: Future>(deadline: Instant, fut: F) -> WithDeadline<F> {
    WithDeadline {
        deadline: Deadline::Unresolved(Some(deadline)),
        inner: fut,
    }
}

/// Runs `fut` with a deadline `timeout` from now (or the deadline already in
/// scope when that one is earlier).
pub fn with_timeout<F: Future>(timeout: Duration, fut: F) -> WithDeadline<F> {
    WithDeadline {
        // Too far in the future to represent: no deadline of our own.
        deadline: Deadline::Unresolved(Instant::now().checked_add(timeout)),
        inner: fut,
    }
}

impl<F: Future> Future for WithDeadline<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let outer = current();
        let deadline = match *this.deadline {
            Deadline::Resolved(deadline) => deadline,
            Deadline::Unresolved(own) => {
                let deadline = match (own, outer) {
                    (Some(own), Some(outer)) => Some(own.min(outer)),
                    (own, outer) => own.or(outer),
                };
                *this.deadline = Deadline::Resolved(deadline);
                deadline
            }
        };
        // Restores the outer value even if the inner future panics.
        struct Restore(Option<Instant>);
        impl Drop for Restore {
            fn drop(&mut self) {
                CURRENT.set(self.0);
            }
        }
        let _restore = Restore(CURRENT.replace(deadline));
        this.inner.poll(cx)
    }
}

/// The deadline in scope for the current task, if any.
#[inline]
pub fn current() -> Option<Instant> {
    CURRENT.get()
}

/// The time left before the deadline in scope (zero once it passed), or
/// `None` when no deadline is in scope.
pub fn remaining() -> Option<Duration> {
    current().map(|deadline| deadline.saturating_duration_since(Instant::now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn nested_scopes_keep_the_earlier_deadline() {
        assert_eq!(current(), None);
        let start = Instant::now();
        let (outer, inner_later, inner_earlier) = with_timeout(Duration::from_secs(10), async {
            let outer = current();
            let later = with_timeout(Duration::from_secs(20), async { current() }).await;
            let earlier = with_timeout(Duration::from_secs(2), async { current() }).await;
            (outer, later, earlier)
        })
        .await;
        assert_eq!(outer, Some(start + Duration::from_secs(10)));
        assert_eq!(inner_later, outer);
        assert_eq!(inner_earlier, Some(start + Duration::from_secs(2)));
        assert_eq!(current(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn remaining_counts_down_on_the_paused_clock() {
        with_timeout(Duration::from_secs(3), async {
            assert_eq!(remaining(), Some(Duration::from_secs(3)));
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(remaining(), Some(Duration::from_secs(2)));
            tokio::time::sleep(Duration::from_secs(5)).await;
            assert_eq!(remaining(), Some(Duration::ZERO));
        })
        .await;
    }

    #[tokio::test]
    async fn the_deadline_does_not_leak_into_spawned_tasks() {
        let seen = with_timeout(Duration::from_secs(3), async {
            tokio::spawn(async { current() }).await.unwrap()
        })
        .await;
        assert_eq!(seen, None);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_deadline_is_not_visible_to_other_tasks_on_the_same_thread() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let other = tokio::spawn(async move {
            rx.await.unwrap();
            current()
        });
        with_timeout(Duration::from_secs(3), async {
            tx.send(()).unwrap();
            // Let the other task run while this scope is suspended.
            tokio::task::yield_now().await;
        })
        .await;
        assert_eq!(other.await.unwrap(), None);
    }

    #[test]
    fn a_panicking_future_does_not_leave_its_deadline_behind() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            runtime.block_on(with_timeout(Duration::from_secs(1), async {
                panic!("boom")
            }))
        }));
        assert!(result.is_err());
        assert_eq!(current(), None);
    }
}
