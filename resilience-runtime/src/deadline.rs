//! The caller's deadline, set once around a request and respected by every
//! retry chain inside it.
//!
//! This is Go's `ctx` deadline for async Rust: a handler declares how long
//! its caller will wait, and every retry loop below it, however deep, stops
//! at that time instead of sleeping past it (SPEC §4). The deadline lives in
//! a task-local, so it needs no extra parameter and cannot leak into other
//! tasks.
//!
//! ```
//! use resilience_runtime::deadline;
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

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

tokio::task_local! {
    static DEADLINE: Instant;
}

/// Runs `fut` with `deadline` as the caller's deadline, or the deadline
/// already in scope when that one is earlier.
pub fn with_deadline<F: Future>(deadline: Instant, fut: F) -> impl Future<Output = F::Output> {
    async move {
        // Resolved at the first poll, inside the task that runs `fut`.
        let deadline = match current() {
            Some(outer) if outer < deadline => outer,
            _ => deadline,
        };
        DEADLINE.scope(deadline, fut).await
    }
}

/// Runs `fut` with a deadline `timeout` from its first poll (or the
/// deadline already in scope when that one is earlier).
pub fn with_timeout<F: Future>(timeout: Duration, fut: F) -> impl Future<Output = F::Output> {
    async move {
        let deadline = Instant::now().checked_add(timeout);
        match deadline {
            Some(deadline) => with_deadline(deadline, fut).await,
            // Too far in the future to represent: no deadline of our own.
            None => fut.await,
        }
    }
}

/// The deadline in scope for the current task, if any.
#[inline]
pub fn current() -> Option<Instant> {
    DEADLINE.try_with(|deadline| *deadline).ok()
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
}
