//! A region where no retry chain may start, read by every chain before its
//! first attempt: the body of a database transaction opened by
//! `db::Transaction`, whose refusal is [`GiveUp::InTransaction`](super::GiveUp::InTransaction).
//!
//! A retry inside a transaction holds the transaction's locks through each
//! pause, and everyone waiting on those rows waits with it. The guard is a
//! thread-local flag set only while the region's future is being polled,
//! like the caller's deadline (see [`deadline`](crate::deadline)): it
//! follows the task that opened the region and nothing else, not another
//! task on the same thread, not a task spawned from inside.
//!
//! It lives here rather than with the database integration so that the
//! retry core knows no integration: the transaction helper opens a region,
//! the chains read it.
//!
//! It costs the retry chains outside such a region nothing: its future
//! also runs under a deadline (the transaction's own time bound), so a
//! chain started inside it never takes the untimed fast path, and the flag
//! is read only on the timed path, when a deadline is in scope.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::Instant;

use crate::deadline::{self, WithDeadline};

thread_local! {
    static OPEN: Cell<bool> = const { Cell::new(false) };
}

/// Whether the code running now is inside a region [`open`]ed here. A
/// deadline is always in scope there: read this only when
/// [`deadline::current`] is `Some`.
#[inline]
pub(crate) fn inside() -> bool {
    OPEN.get()
}

pin_project! {
    /// A future polled with the marker set.
    #[derive(Debug)]
    #[must_use = "futures do nothing unless `.await`ed"]
    pub(crate) struct Open<F> {
        #[pin]
        inner: F,
    }
}

impl<F: Future> Future for Open<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Restores the outer value even if the inner future panics.
        struct Restore(bool);
        impl Drop for Restore {
            fn drop(&mut self) {
                OPEN.set(self.0);
            }
        }
        let _restore = Restore(OPEN.replace(true));
        self.project().inner.poll(cx)
    }
}

/// Runs `fut`, the body of a transaction, as a region where no retry
/// starts, under the deadline `until` (or the caller's, when that one is
/// earlier).
pub(crate) fn open<F: Future>(until: Instant, fut: F) -> WithDeadline<Open<F>> {
    deadline::with_deadline(until, Open { inner: fut })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "current_thread")]
    async fn the_marker_is_set_inside_only_and_a_deadline_with_it() {
        assert!(!inside());
        let until = Instant::now() + Duration::from_secs(5);
        let (open, deadline) = open(until, async {
            tokio::task::yield_now().await;
            (inside(), deadline::current())
        })
        .await;
        assert!(open);
        assert_eq!(deadline, Some(until));
        assert!(!inside());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn other_tasks_on_the_same_thread_and_spawned_tasks_are_outside() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let other = tokio::spawn(async move {
            rx.await.unwrap();
            inside()
        });
        let until = Instant::now() + Duration::from_secs(5);
        let spawned = open(until, async {
            tx.send(()).unwrap();
            tokio::task::yield_now().await;
            tokio::spawn(async { inside() }).await.unwrap()
        })
        .await;
        assert!(!spawned);
        assert!(!other.await.unwrap());
    }
}
