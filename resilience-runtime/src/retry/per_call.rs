//! The caller's say over the retries of one call: "no retry for this
//! call", or "at most N attempts", for a fn whose policy was fixed where it
//! was declared (`#[retry]`, `#[hedge]`, a layer, a [`Policy`](super::Policy)).
//!
//! A handler that has already spent most of its time, a request replayed
//! by an operator, a health check that must answer fast: each may want
//! one call to be tried once without a second annotated fn. The override
//! is scoped to the future it wraps, like the caller's
//! [deadline](crate::deadline): it needs no extra parameter, reaches every
//! retry chain started inside it however deep, and does not leak into
//! tasks spawned from inside.
//!
//! ```
//! use resilience::retry::{self, HttpStatus, Policy};
//! use std::num::NonZeroU32;
//! use std::sync::atomic::{AtomicU32, Ordering};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let calls = AtomicU32::new(0);
//! let flaky = || async {
//!     calls.fetch_add(1, Ordering::Relaxed);
//!     Err::<(), _>(Failed(HttpStatus(503)))
//! };
//!
//! // The policy makes 3 attempts; this call, one.
//! let _ = retry::once(Policy::http().retry(flaky)).await;
//! assert_eq!(calls.swap(0, Ordering::Relaxed), 1);
//!
//! // At most 2, whatever the policy says.
//! let two = NonZeroU32::new(2).expect("not zero");
//! let _ = retry::at_most(two, Policy::http().retry(flaky)).await;
//! assert_eq!(calls.load(Ordering::Relaxed), 2);
//! # }
//! # #[derive(Debug)] struct Failed(HttpStatus);
//! # impl resilience::retry::Classify for Failed {
//! #     fn classify(&self) -> resilience::retry::Verdict { self.0.classify() }
//! # }
//! # impl From<resilience::Error> for Failed {
//! #     fn from(_: resilience::Error) -> Self { Failed(HttpStatus(504)) }
//! # }
//! ```
//!
//! An override only lowers: a chain makes the fewer of its policy's
//! attempts and the override's, and nested overrides keep the lowest, so
//! no caller can raise what the policy (checked when it was declared)
//! allows. A chain stopped by it ends as when its policy's attempts are
//! used up ([`GiveUp::Exhausted`](super::GiveUp::Exhausted)): the caller
//! gets the last attempt's error, and a hedged call starts no attempt
//! beyond the override's. The success path does not read it: only a
//! failed attempt, deciding whether to try again, does.

use std::cell::Cell;
use std::future::{Future, IntoFuture};
use std::num::NonZeroU32;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

thread_local! {
    // The most attempts a chain may make, set only while an `AtMost`
    // future is being polled on this thread; `u32::MAX` outside any.
    static AT_MOST: Cell<u32> = const { Cell::new(u32::MAX) };
}

/// The most attempts the caller allows the chain deciding now, or
/// `u32::MAX` outside any override.
pub(crate) fn limit() -> u32 {
    AT_MOST.get()
}

pin_project! {
    /// A future whose retry chains make at most a number of attempts; see
    /// [`at_most`] and [`once`].
    #[derive(Debug)]
    #[must_use = "futures do nothing unless `.await`ed"]
    pub struct AtMost<F> {
        attempts: u32,
        #[pin]
        inner: F,
    }
}

impl<F: Future> Future for AtMost<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        // Restores the outer value even if the inner future panics.
        struct Restore(u32);
        impl Drop for Restore {
            fn drop(&mut self) {
                AT_MOST.set(self.0);
            }
        }
        let outer = AT_MOST.get();
        let _restore = Restore(AT_MOST.replace(outer.min(*this.attempts)));
        this.inner.poll(cx)
    }
}

/// Runs `fut` so that every retry chain it starts makes at most `attempts`
/// attempts (or fewer, when its policy or an outer override says so).
///
/// ```
/// use resilience::retry;
/// use std::num::NonZeroU32;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # async fn get_user(id: i64) -> Result<i64, std::io::Error> { Ok(id) }
/// let two = NonZeroU32::new(2).expect("not zero");
/// let user = retry::at_most(two, get_user(7)).await;
/// # assert_eq!(user.unwrap(), 7);
/// # }
/// ```
pub fn at_most<F: IntoFuture>(attempts: NonZeroU32, fut: F) -> AtMost<F::IntoFuture> {
    AtMost {
        attempts: attempts.get(),
        inner: fut.into_future(),
    }
}

/// Runs `fut` with no retry: every retry chain it starts makes one attempt.
/// A hedged call inside starts no second attempt.
///
/// ```
/// use resilience::retry;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # async fn get_user(id: i64) -> Result<i64, std::io::Error> { Ok(id) }
/// let user = retry::once(get_user(7)).await;
/// # assert_eq!(user.unwrap(), 7);
/// # }
/// ```
pub fn once<F: IntoFuture>(fut: F) -> AtMost<F::IntoFuture> {
    at_most(NonZeroU32::MIN, fut)
}

/// What one HTTP request asks of a client-wide layer (the `http` module's
/// reqwest middleware or the `tower` layer), the per-request counterpart
/// of [`once`]: set as a request extension (`with_extension` on a
/// `reqwest_middleware::RequestBuilder`, `extensions_mut().insert(…)` on
/// an `http::Request`).
///
/// ```
/// # #[cfg(feature = "tower")] fn main() {
/// use resilience::retry::RetryOverride;
///
/// // A POST the server treats as a query (no side effects): retried
/// // like a GET although it carries no Idempotency-Key.
/// let mut request = http::Request::post("http://127.0.0.1:8080/reports/query")
///     .body(String::from("{\"from\":\"2026-11-01\"}"))
///     .unwrap();
/// request.extensions_mut().insert(RetryOverride::Idempotent);
/// # }
/// # #[cfg(not(feature = "tower"))] fn main() {}
/// ```
///
/// ```no_run
/// # #[cfg(feature = "reqwest-middleware")]
/// # async fn demo() -> Result<(), reqwest_middleware::Error> {
/// use resilience::http::ResilienceMiddleware;
/// use resilience::retry::RetryOverride;
/// use resilience::Policy;
///
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(ResilienceMiddleware::new("search", Policy::http()))
///     .build();
/// // A search that the user will repeat anyway: one attempt only.
/// let page = client
///     .get("http://127.0.0.1:8080/search?q=boots")
///     .with_extension(RetryOverride::Never)
///     .send()
///     .await?;
/// # Ok(()) }
/// ```
#[cfg(any(feature = "reqwest-middleware", feature = "tower"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryOverride {
    /// Send this request once, whatever the policy allows; the breaker
    /// still counts it.
    Never,
    /// This `POST` or `PATCH` has no side effect a second copy could
    /// repeat (a query sent as a POST, an upsert keyed by its body), so
    /// it may be retried without an `Idempotency-Key`. Only the caller
    /// knows this; a wrong claim can apply a request twice. A streaming
    /// body is still sent once.
    Idempotent,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    async fn seen() -> u32 {
        poll_fn(|_| Poll::Ready(limit())).await
    }

    #[tokio::test]
    async fn the_override_is_in_scope_only_while_its_future_runs() {
        assert_eq!(limit(), u32::MAX);
        assert_eq!(once(seen()).await, 1);
        assert_eq!(limit(), u32::MAX);
    }

    #[tokio::test]
    async fn nested_overrides_keep_the_lowest() {
        let three = NonZeroU32::new(3).unwrap();
        let five = NonZeroU32::new(5).unwrap();
        assert_eq!(at_most(three, at_most(five, seen())).await, 3);
        assert_eq!(at_most(five, at_most(three, seen())).await, 3);
        assert_eq!(at_most(five, once(seen())).await, 1);
    }

    #[tokio::test]
    async fn a_spawned_task_does_not_inherit_it() {
        let inside = once(async { tokio::spawn(seen()).await.unwrap() }).await;
        assert_eq!(inside, u32::MAX);
    }
}
