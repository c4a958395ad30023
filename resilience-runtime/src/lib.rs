//! The runtime behind the [`resilience`](https://docs.rs/resilience) macros:
//! everything that runs when a protected call runs.
//!
//! - [`retry`]: backoff with jitter, the classifier, the retry executor;
//! - [`deadline`]: the caller's deadline, scoped to a task;
//! - [`idempotency`]: keys that make a retried POST safe;
//! - `http` (feature `reqwest`): the reqwest integration.
//!
//! Applications normally depend on the `resilience` facade crate, which
//! re-exports this one together with the `#[retry]` and
//! `#[circuit_breaker]` macros.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod deadline;
mod error;
#[cfg(feature = "reqwest")]
pub mod http;
pub mod idempotency;
pub mod retry;

pub use error::{ConfigError, DependencyDown, Error};
pub use idempotency::IdempotencyKey;
pub use retry::{Classify, Policy, Verdict};
