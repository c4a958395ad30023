//! Retries with exponential backoff and jitter, circuit breakers, deadlines
//! and idempotency for async Rust.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub use resilience_macros::{circuit_breaker, retry};
pub use resilience_runtime::*;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
