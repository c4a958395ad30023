//! HTTP clients: the [`reqwest`] integration (cargo feature `reqwest`).
//!
//! - [`Classify`](crate::retry::Classify) for [`reqwest::Error`], and
//!   [`classify_response`] for a [`reqwest::Response`], both by the one
//!   table of [what may be retried](crate::guide#what-may-be-retried) ([`HttpStatus`](crate::retry::HttpStatus) and
//!   `Retry-After`);
//! - [`StatusError`]: a non-success response turned into an error carrying
//!   the status and `Retry-After`, its body drained so that nothing leaks
//!   into the next attempt ([`ResponseExt::check`]);
//! - [`ReplayableRequest`]: a request whose body is sent again, byte for
//!   byte, on every attempt; a streaming body is refused before the first
//!   attempt, never sent empty the second time;
//! - [`RequestBuilderExt`]: `.idempotency_key(&key)` in one line, and
//!   `.with_policy(policy)` to send a request under a retry policy;
//! - [`HttpError`]: all of the above in one error type that a `#[retry]`
//!   fn can return as is.
//!
//! ```no_run
//! use resilience::http::{HttpError, RequestBuilderExt};
//! use resilience::{IdempotencyKey, Policy};
//!
//! # async fn demo(client: reqwest::Client) -> Result<(), HttpError> {
//! // GET: retried on 5xx, 429 (after its Retry-After), resets and timeouts.
//! let user = client
//!     .get("http://127.0.0.1:8080/users/42")
//!     .with_policy(Policy::http())
//!     .text()
//!     .await?;
//!
//! // POST: one key for the whole logical call, the body sent on every attempt.
//! let key = IdempotencyKey::new();
//! let receipt = client
//!     .post("http://127.0.0.1:8080/payments")
//!     .idempotency_key(&key)
//!     .body("amount=10")
//!     .with_policy(Policy::http())
//!     .send()
//!     .await?;
//! # Ok(()) }
//! ```

mod classify;
mod error;
#[cfg(feature = "reqwest-middleware")]
mod middleware;
mod request;

pub use classify::{classify_response, retry_after};

pub use error::{HttpError, StatusError};
#[cfg(feature = "reqwest-middleware")]
pub use middleware::ResilienceMiddleware;
pub use request::{ReplayableRequest, RequestBuilderExt, ResponseExt, RetriedRequest};
/// The HTTP client (0.13), re-exported so that code building the client and
/// naming its types uses the version these integrations are built for: a
/// `reqwest::Response` of another major version is another type, and
/// [`ResponseExt`] and the error's classification would not apply to it.
pub use reqwest;
/// The middleware crate (0.5) [`ResilienceMiddleware`] plugs into,
/// re-exported for the same reason.
#[cfg(feature = "reqwest-middleware")]
pub use reqwest_middleware;
