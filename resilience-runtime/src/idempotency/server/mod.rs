//! The server's side of idempotency (SPEC §3): a tower layer that runs a
//! handler at most once per `Idempotency-Key` and replays its response.
//!
//! Enabled by the `idempotency-server` feature; `idempotency-redis` adds
//! `RedisStore`. It works with axum and with any tower-based server whose
//! request body can be rebuilt from [`Bytes`](bytes::Bytes) (axum's `Body`,
//! `http_body_util::Full`).
//!
//! # What the layer answers
//!
//! For the guarded methods (`POST` and `PATCH` by default; every other
//! method passes through untouched, its body streamed):
//!
//! | request | answer | handler runs? |
//! |---|---|---|
//! | no `Idempotency-Key` | `400 missing_idempotency_key` | no |
//! | key not 1–255 visible ASCII characters, or sent twice | `400 invalid_idempotency_key` | no |
//! | body over `max_request_body` | `413 request_body_too_large` | no |
//! | new key | the handler's response, stored unless retryable | once |
//! | key seen, same request, completed | the stored response + `X-Idempotency-Replay: true` | no |
//! | key seen, same request, still running | `409 idempotency_key_in_use` + `Retry-After: 1` | no |
//! | key seen with another method, path, query, body or [fingerprint header](IdempotencyConfigBuilder::with_fingerprint_headers) | `422 idempotency_key_reused` | no |
//! | key seen, response was over `max_stored_body` or its body failed | `409 idempotency_response_not_stored` | no |
//! | store unreachable or full | `503 idempotency_store_unavailable` + `Retry-After: 1` | no |
//!
//! The layer's own answers are JSON: `{"error": "<code>", "message": "…"}`.
//!
//! - **Concurrent requests with one key are refused, not queued**: the
//!   second gets `409` at once, as in Stripe's API and the IETF
//!   `Idempotency-Key` draft. Waiting would hold a connection and a task
//!   per duplicate for as long as the handler runs; the client already
//!   knows how to retry after `Retry-After`.
//! - **Failures are not stored**: a status the client is expected to retry
//!   (5xx, 408, 429; SPEC §2), an error of the inner service, or a request
//!   cancelled (its future dropped) before the handler answers frees the
//!   key, so the client's retry runs the handler again. Other 4xx are stored: the same request
//!   would fail the same way.
//! - **A body that fails after a storable status** (2xx, 3xx, other 4xx),
//!   or a request cancelled while the layer reads that body, means the work
//!   is done but the response lost: the key is kept, and later requests get
//!   `409 idempotency_response_not_stored` instead of a second execution.
//! - **A response over `max_stored_body`** is still delivered in full to
//!   its client, but only its status is recorded: later requests with the
//!   key get `409 idempotency_response_not_stored` rather than a second
//!   execution.
//! - Only the [configured headers](IdempotencyConfig::stored_headers) are
//!   replayed (never `set-cookie` by default); trailers are not stored.
//! - A handler running longer than the lock ttl may lose its key to a
//!   retry, which then runs the handler again: keep the lock ttl above the
//!   handler's deadline.
//!
//! # Example
//!
//! ```
//! use axum::{Router, routing::post};
//! use resilience_runtime::idempotency::server::{IdempotencyLayer, MemoryStore};
//!
//! async fn create_payment() -> (axum::http::StatusCode, &'static str) {
//!     (axum::http::StatusCode::CREATED, r#"{"id":"pay_1"}"#)
//! }
//!
//! let app: Router = Router::new()
//!     .route("/payments", post(create_payment))
//!     .layer(IdempotencyLayer::new(MemoryStore::default()));
//! # drop(app);
//! ```
//!
//! In production, share the keys between instances with
//! `RedisStore::connect("redis://…").await?` (feature `idempotency-redis`).

mod body;
mod config;
mod effect;
mod layer;
mod memory;
#[cfg(feature = "idempotency-redis")]
mod redis;
mod reject;
mod store;

pub use body::{BoxError, ResponseBody};
pub use config::{IdempotencyConfig, IdempotencyConfigBuilder};
pub use effect::EffectNotApplied;
pub use layer::{Idempotency, IdempotencyLayer, ResponseFuture};
pub use memory::MemoryStore;
#[cfg(feature = "idempotency-redis")]
pub use redis::RedisStore;
pub use store::{
    Begin, Entry, Fingerprint, IdempotencyStore, Lease, Outcome, StoreError, StoredResponse,
};
