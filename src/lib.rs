//! Retries with exponential backoff and jitter, circuit breakers, deadlines
//! and idempotency for async Rust.
//!
//! The attributes put the layers around an `async fn`, in the order the
//! [guide](guide#circuit-breaker) asks for (caller → breaker → retry →
//! transport), and refuse the known mistakes at compile time (a retried POST without an idempotency
//! key, jitter below 10 %, an unbounded chain, the layers in the wrong
//! order, …):
//!
//! ```
//! use resilience::{IdempotencyKey, circuit_breaker, retry};
//!
//! #[circuit_breaker(name = "orders", preset = "critical")]
//! #[retry(max = 3, initial = "100ms")]
//! async fn create_order(key: IdempotencyKey, cents: u64) -> Result<u64, std::io::Error> {
//!     // every attempt sends the same `key` in its `Idempotency-Key` header
//!     orders_api::post(&key, cents).await
//! }
//! # mod orders_api {
//! #     pub async fn post(_: &resilience::IdempotencyKey, cents: u64) -> Result<u64, std::io::Error> {
//! #         Ok(cents)
//! #     }
//! # }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! assert_eq!(create_order(IdempotencyKey::new(), 4200).await.unwrap(), 4200);
//! # }
//! ```
//!
//! See [`retry`](macro@retry) and [`circuit_breaker`] for every argument
//! and rule; everything they call is also usable by hand ([`retry::Policy`],
//! [`breaker::CircuitBreaker`], [`registry`], [`deadline`]). Your own error
//! types get their verdicts from [`derive(Classify)`](derive@Classify), and
//! [`guide`] states every rule the library enforces, and why.
//!
//! # Tokio
//!
//! The pauses between attempts, the per-attempt timeouts, the deadlines and
//! the breakers' probe timeouts run on Tokio's timer: call protected fns
//! from a Tokio runtime with the timer enabled (`#[tokio::main]`,
//! `#[tokio::test]`, or a `Runtime` built with `enable_time()` or
//! `enable_all()`). Any Tokio flavor works, current-thread or multi-thread.
//! A call that needs the timer outside one (say, under
//! `futures::executor::block_on`) panics with a message that says so; a
//! call whose first attempt succeeds without a timeout needs no timer.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub use resilience_macros::{Classify, circuit_breaker, hedge, retry};
pub use resilience_runtime::*;

/// A fault-injecting TCP proxy for tests (the `chaos` feature).
#[cfg(feature = "chaos")]
pub use resilience_chaos as chaos;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
