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
//! - [`Attempts`]: the same rules for code that drives its own loop, as
//!   the attributes' expansion does (its loop is `chain.rs`);
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

mod attempts;
mod backoff;
mod blocking;
mod budget;
pub(crate) mod chain;
mod classify;
mod events;
mod executor;
mod hedge;
pub mod layer;
#[cfg(feature = "sqlx-postgres")]
pub(crate) mod no_retry;
mod per_call;
mod policy;
mod retry_after;
mod rng;

pub use attempts::{AttemptTimer, Attempts, Cut, Driver, Kept, Next, NotKept, Pause, Slot};
pub use backoff::{Backoff, Delays, Growth, Jitter, MIN_JITTER};
pub use blocking::{BlockingRetry, Sleeper, ThreadSleep};
pub use budget::{Budget, BudgetConfig};
pub use classify::{
    AsHttpStatus, Classify, FromRuntimeError, HttpStatus, Outcome, Reason, SqlState, Verdict,
};
pub use events::{Event, GiveUp};
pub use executor::{ByClassify, KeepLast, Notify, Quiet, Retry, When};
pub use hedge::{Hedge, MAX_HEDGED_ATTEMPTS};
pub use per_call::{AtMost, at_most, once};
pub use policy::{Policy, PolicyBuilder};
pub use retry_after::{AsRetryAfter, parse_retry_after, parse_retry_after_bytes};
pub(crate) use rng::thread_rng;
pub use rng::{DefaultRng, SeededJitter, seed_jitter};
