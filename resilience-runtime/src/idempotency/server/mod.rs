//! The server's side of
//! [idempotency](crate::guide#idempotency-first-retry-second): a tower
//! layer that runs a handler at most once per `Idempotency-Key` and
//! replays its response.
//!
//! Enabled by the `idempotency-server` feature; `idempotency-redis` adds
//! `RedisStore`. It works with axum and with any tower-based server whose
//! request body can be rebuilt from [`Bytes`](bytes::Bytes) (axum's `Body`,
//! `http_body_util::Full`).
//!
//! # The promise: never applied twice
//!
//! Once a handler has begun for a key, its outcome is recorded for that
//! key, whatever the client, the handler or the store does next:
//!
//! - **The handler runs detached from the connection.** After `begin` the
//!   layer moves the inner service's future, with the store's `complete`,
//!   onto a task of its own (`tokio::spawn`), as Stripe records every
//!   request once its execution began. A client that goes away (hyper drops
//!   the request's future when the connection resets) only stops waiting:
//!   the handler finishes, its response is stored, and the client's retry
//!   gets it replayed (`409` while it is still running). Hence the layer's
//!   bounds: the inner service, its future, its error and its response body
//!   must be `Send + 'static`, and the layer must run on a tokio runtime
//!   with the time driver (as axum and hyper servers do).
//! - **A response is final for its key**, `5xx` included: the layer cannot
//!   tell a `500` raised before the charge from one raised after the
//!   commit. A handler that knows nothing was applied says so with the
//!   [`EffectNotApplied`] response extension; that, and only that, frees
//!   the key on a `5xx` so that the retry runs the handler again. A `5xx`
//!   without the marker is final for that key.
//! - `408` and `429` free the key without the marker: by their definition
//!   the request was not processed (RFC 9110 §15.5.9, RFC 6585 §4). Put
//!   rate limiting and load shedding outside the layer anyway.
//! - **A handler that panics, or an inner service that returns `Err`,
//!   after it began** may have applied its effect: the key is completed
//!   with a `500 idempotency_handler_failed`, replayed to later requests,
//!   and the handler does not run again for that key.
//! - **Store calls are bounded** by
//!   [`store_timeout`](IdempotencyConfig::store_timeout) (1 s by default). A
//!   store that is down or hung on `begin` fails closed and fast: `503
//!   idempotency_store_unavailable` naming the store and what failed, the
//!   handler not run; since that `begin` may have taken the key all the
//!   same, the layer releases its lease in the background. A `complete` (or
//!   `release`) that fails or times out does not hold the response back: it
//!   is delivered, a warning is logged, and the layer retries the call in
//!   the background (backoff from 50 ms to 1 s) until the store answers or
//!   the lock ttl ends.
//! - **A running request keeps its key** however long its handler takes:
//!   the layer renews the lock every third of the
//!   [lock ttl](IdempotencyConfig::lock_ttl), and a request that ends, or
//!   whose task is dropped, frees or completes its key at once.
//! - **A crashed holder** (the process died between `begin` and
//!   `complete`) stops renewing, and its key stays locked for at most one
//!   lock ttl (10 s by default): later requests get `409` until then, and
//!   the first one after runs the handler. A store that stays down for a
//!   whole lock ttl while a request runs loses that request's lock the
//!   same way (logged at ERROR).
//!
//! # Keys belong to their caller
//!
//! A key is unique per client, not per server (the IETF draft; Stripe
//! scopes keys per account): every layer is built with the [`Scope`] that
//! tells its callers apart, the authenticated principal
//! ([`Scope::from_fn`]) or a header such as `Authorization`
//! ([`Scope::header`], hashed, never stored as sent). Two callers sending
//! the same key, path and body each get their own handler run and their
//! own response; only the same caller's retry is replayed. A layer without
//! a scope is written [`Scope::unscoped()`], whose documentation says what
//! it allows.
//!
//! # What the layer answers
//!
//! For the guarded methods (`POST` and `PATCH` by default; every other
//! method passes through untouched, its body streamed), with the semantics
//! of the IETF `Idempotency-Key` header draft for `400`, `409` and `422`.
//! The key is read in the draft's form, a Structured Field String
//! (`Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`), or bare as
//! clients sent it before the draft: both are the same key
//! ([`IdempotencyKey::from_header`](crate::IdempotencyKey::from_header)).
//!
//! | request | answer | handler runs? |
//! |---|---|---|
//! | no `Idempotency-Key` | `400 missing_idempotency_key` | no |
//! | no caller [scope](Scope) (e.g. the `Authorization` header the layer is scoped by is absent) | `400 missing_idempotency_scope` | no |
//! | key not 1–255 visible ASCII characters, or sent twice, or a malformed quoted form | `400 invalid_idempotency_key` | no |
//! | body over `max_request_body` | `413 request_body_too_large` | no |
//! | new key | the handler's response, stored (see above) | once |
//! | key seen, same request, completed | the stored response + `X-Idempotency-Replay: true` | no |
//! | key seen, same request, still running | `409 idempotency_key_in_use` + `Retry-After: 1`: retry later with the same key | no |
//! | key seen with another method, path, query, body or [fingerprint header](IdempotencyConfigBuilder::with_fingerprint_headers) | `422 idempotency_key_reused`: a new request needs a new key | no |
//! | key seen, response was over `max_stored_body` or its body failed | `409 idempotency_response_not_stored` | no |
//! | store unreachable, hung past `store_timeout`, or full | `503 idempotency_store_unavailable` + `Retry-After: 1` | no |
//!
//! The layer's own answers are JSON: `{"error": "<code>", "message": "…"}`.
//!
//! - **Concurrent requests with one key are refused, not queued**: the
//!   second gets `409` at once, as in Stripe's API and the IETF
//!   `Idempotency-Key` draft. Waiting would hold a connection and a task
//!   per duplicate for as long as the handler runs; the client already
//!   knows how to retry after `Retry-After`.
//! - **A body that fails after the handler answered** means the work is
//!   done but the response lost: the key is kept, and later requests get
//!   `409 idempotency_response_not_stored` instead of a second execution.
//! - **A response over `max_stored_body`** is still delivered in full to
//!   its client, but only its status is recorded: later requests with the
//!   key get `409 idempotency_response_not_stored` rather than a second
//!   execution.
//! - Only the [configured headers](IdempotencyConfig::stored_headers) are
//!   replayed (never `set-cookie` by default); trailers are not stored.
//!
//! # Example
//!
//! ```
//! use axum::{Router, routing::post};
//! use http::header::AUTHORIZATION;
//! use resilience::idempotency::server::{IdempotencyLayer, MemoryStore, Scope};
//!
//! async fn create_payment() -> (axum::http::StatusCode, &'static str) {
//!     (axum::http::StatusCode::CREATED, r#"{"id":"pay_1"}"#)
//! }
//!
//! let app: Router = Router::new()
//!     .route("/payments", post(create_payment))
//!     // Each caller's keys are its own: scoped by its (hashed) credential.
//!     .layer(IdempotencyLayer::new(MemoryStore::default(), Scope::header(AUTHORIZATION)));
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
mod scope;
mod store;

pub use body::ResponseBody;
pub use config::{IdempotencyConfig, IdempotencyConfigBuilder};
pub use effect::EffectNotApplied;
pub use layer::{Idempotency, IdempotencyLayer, ResponseFuture};
pub use memory::MemoryStore;
#[cfg(feature = "idempotency-redis")]
pub use redis::RedisStore;
pub use scope::Scope;
pub use store::{
    Claim, Completion, Entry, Fingerprint, IdempotencyStore, KeyLease, StoreError, StoredResponse,
};
