//! Retries with exponential backoff and jitter, bounded by attempts, by
//! elapsed time and by the caller's deadline.
//!
//! The pieces, each in its own module:
//!
//! - [`Backoff`]: how long to pause, by the guide's
//!   [formula](crate::guide#retry), with [`Jitter`] strategies;
//! - [`Policy`]: a validated schedule plus the bounds of the whole chain,
//!   with the presets `http`, `background` and `db_tx`;
//! - [`Classify`]: the one source of truth on
//!   [what may be retried](crate::guide#what-may-be-retried);
//! - [`Retry`]: the executor, a future that runs an async operation under a
//!   policy;
//! - [`BlockingRetry`]: the executor for blocking code, on the caller's
//!   thread, no runtime needed ([`Policy::retry_blocking`]);
//! - [`Budget`]: the retries of every chain to one dependency, capped at a
//!   share of its calls;
//! - [`once`] and [`at_most`]: a caller's override for one call, fewer
//!   attempts than the policy allows (`retry/per_call.rs`).
//!
//! ```
//! use resilience::retry::{HttpStatus, Policy};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let mut responses = [502, 502, 200].into_iter();
//! let status = Policy::http()
//!     .retry(|| {
//!         let status = responses.next().unwrap_or(200);
//!         async move {
//!             match status {
//!                 200 => Ok(status),
//!                 failed => Err(Failed(HttpStatus(failed))),
//!             }
//!         }
//!     })
//!     .await;
//! assert_eq!(status.unwrap(), 200);
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
//! # A loop of your own
//!
//! When the call cannot be a closure handed to [`Policy::retry`] (say, a
//! state machine that retries one step), drive the loop yourself from the
//! policy's pauses, [`Backoff::delays`], and the error's [`Classify`]
//! verdict. Such a loop makes at most [`Policy::max_attempts`] attempts
//! and honours [`Verdict::RetryAfter`]; what it does not get is what
//! [`Retry`] adds: `max_elapsed`, the caller's [deadline](crate::deadline),
//! the attempt timeout, a [`Budget`], and the one-layer rule for nested
//! chains.
//!
//! ```
//! use resilience::retry::{Classify, DefaultRng, HttpStatus, Policy, Verdict};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let policy = Policy::http();
//! let mut pauses = policy.backoff().delays(DefaultRng);
//! let mut responses = [503, 429, 200].into_iter();
//! let mut attempt = 1;
//! let status = loop {
//!     let status = HttpStatus(responses.next().unwrap_or(200));
//!     if status.0 < 400 {
//!         break Ok(status.0);
//!     }
//!     let pause = pauses.next().unwrap_or_default();
//!     let pause = match status.classify() {
//!         _ if attempt == policy.max_attempts() => break Err(status),
//!         Verdict::RetryAfter(after) => after.max(pause),
//!         Verdict::Transient => pause,
//!         _ => break Err(status),
//!     };
//!     tokio::time::sleep(pause).await;
//!     attempt += 1;
//! };
//! assert_eq!(status, Ok(200));
//! assert_eq!(attempt, 3);
//! # }
//! ```

pub(crate) mod attempts;
mod backoff;
mod blocking;
mod budget;
pub(crate) mod chain;
mod classify;
mod events;
pub(crate) mod executor;
mod hedge;
pub(crate) mod layer;
#[cfg(feature = "sqlx-postgres")]
pub(crate) mod no_retry;
mod per_call;
mod policy;
mod retry_after;
mod rng;
mod turn;

pub(crate) use attempts::{Attempts, NotKept};
pub use backoff::{Backoff, Delays, Growth, Jitter, MIN_JITTER};
pub use blocking::{BlockingRetry, Sleeper, ThreadSleep};
pub use budget::{Budget, BudgetConfig};
pub use classify::{
    AsHttpStatus, Classify, FromRuntimeError, HttpStatus, Outcome, Reason, SqlState, Verdict,
};
pub use events::{Event, GiveUp};
pub(crate) use executor::{ByClassify, Classifier, KeepLast};
pub use executor::{Notify, Retry};
pub use hedge::{Hedge, MAX_HEDGED_ATTEMPTS};
#[cfg(any(feature = "reqwest-middleware", feature = "tower"))]
pub use per_call::RetryOverride;
pub use per_call::{AtMost, at_most, once};
pub use policy::{Policy, PolicyBuilder};
pub use retry_after::{AsRetryAfter, parse_retry_after, parse_retry_after_bytes};
pub(crate) use rng::thread_rng;
pub use rng::{DefaultRng, SeededJitter, seed_jitter};
