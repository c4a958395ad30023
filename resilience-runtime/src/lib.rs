//! The runtime behind the [`resilience`](https://docs.rs/resilience) macros:
//! everything that runs when a protected call runs.
//!
//! - [`retry`]: backoff with jitter, the classifier, the retry executor;
//! - [`guide`]: the rules all of this enforces, and why;
//! - [`clients_that_retry`]: clients with a retry loop of their own (the
//!   AWS SDKs, `redis`), and how not to retry twice;
//! - [`breaker`]: circuit breakers that stop calling a dependency that is
//!   down;
//! - [`registry`]: named breakers and retry policies, configured at startup
//!   from code and from a TOML file;
//! - [`limit`]: load limiting: a bulkhead, an adaptive concurrency limit
//!   (Vegas) and client-side throttling, with per-call priorities;
//! - [`deadline`]: the caller's deadline, scoped to a task;
//! - [`consumer`]: background consumers that retry a message under the
//!   `background` preset and hand a poison one to a dead-letter queue;
//! - [`fallback`]: the guide's fallbacks as types: a value marked stale,
//!   a part marked unavailable, a fail-fast 503 (feature `axum`);
//! - [`idempotency`]: keys that make a retried POST safe;
//! - [`telemetry`]: the metrics, spans and events of the [guide](crate::guide#metrics-and-alerts);
//! - `http` (feature `reqwest`): the reqwest integration;
//! - `tower` (feature `tower`): a tower `Layer` applying a policy and a
//!   breaker to any HTTP client `Service` with a cloneable body (hyper);
//! - `aws` (feature `aws`): the AWS SDK's errors classified, and a retry
//!   policy run as an SDK client's retry;
//! - `redis_commands` (feature `redis-commands`): Redis errors classified,
//!   and commands retried only when repeating them is safe;
//! - `db` (feature `sqlx-postgres`): PostgreSQL transactions retried as a
//!   whole on serialization failures and deadlocks.
//!
//! Applications normally depend on the `resilience` facade crate, which
//! re-exports this one together with the `#[retry]` and
//! `#[circuit_breaker]` macros. What those macros' expansion calls is here
//! too, in the hidden `callsite` module (the facade's `__private`).
//!
//! # Layers
//!
//! A module imports only from its own layer or below, and no two
//! top-level modules import each other, directly or through others
//! (`tests/layering.rs` reads this table and checks every `crate::` path
//! of `src/` against it; test-only code may reach up):
//!
//! | layer | modules |
//! |---|---|
//! | 6 call sites: what the attributes' expansion calls, above every module it drives | `callsite` |
//! | 5 integrations: drive the rest for one kind of client or server | `aws`, `consumer`, `db`, `fallback`, `http`, `http_rules`, `idempotency`, `redis_commands`, `tower` |
//! | 4 configuration: named breakers, policies and limiters, built from code and files | `registry` |
//! | 3 mechanisms that report through telemetry | `breaker`, `limit` |
//! | 2 observation of calls: metrics, spans, events | `telemetry` |
//! | 1 the retry core: backoff, classification, the attempt loop, budgets, hedging | `retry` |
//! | 0 ground: errors, the caller's deadline, durations and timers, striped counters and tickers, the Redis link; the tests' event counter | `clock`, `deadline`, `error`, `redis_link`, `striped`, `test_events` |
//!
//! What a lower layer needs from a higher one is passed down when it is
//! known, never looked up: a breaker's service label is given to it by the
//! registry that builds it, and [`Labels::of`](telemetry::Labels::of) reads
//! the service the global registry published as it was installed; a
//! rejection carries the end of its cooldown; the retry core refuses to
//! start inside a `retry::no_retry` region, which the database transaction
//! opens; it reports each hedge through a hook, counted by
//! [`Policy::hedge`](retry::Policy::hedge) on telemetry's side; and the
//! attributes' retry chain reports its attempts to a scope its call site
//! hands it.
// `deny`, not `forbid`: linkme's distributed slice (`registry::SITES`,
// with the `site-list` feature) is the one place allowed to declare the
// linker sections it needs.
#![deny(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

#[cfg(feature = "aws")]
pub mod aws;
pub mod breaker;
#[doc(hidden)]
pub mod callsite;
mod clock;
pub mod consumer;
#[cfg(feature = "sqlx-postgres")]
pub mod db;
pub mod deadline;
mod error;
pub mod fallback;
#[cfg(feature = "reqwest")]
pub mod http;
#[cfg(any(feature = "reqwest", feature = "tower"))]
mod http_rules;
#[doc = include_str!("guide.md")]
pub mod guide {}
#[doc = include_str!("clients_that_retry.md")]
pub mod clients_that_retry {}
pub mod idempotency;
pub mod limit;
#[cfg(feature = "redis-commands")]
pub mod redis_commands;
#[cfg(any(
    feature = "idempotency-redis",
    feature = "breaker-redis",
    feature = "consumer-redis",
    feature = "limit-redis"
))]
mod redis_link;
pub mod registry;
pub mod retry;
mod striped;
pub mod telemetry;
// The tests that count log events are those of these features.
#[cfg(all(test, any(feature = "metrics", feature = "config-file")))]
mod test_events;
#[cfg(feature = "tower")]
pub mod tower;

pub use breaker::{BreakerConfig, CircuitBreaker};
pub use error::{Cause, ConfigError, DependencyDown, Error, Overloaded};
pub use idempotency::IdempotencyKey;
pub use registry::Registry;
pub use retry::{Classify, Outcome, Policy, Verdict};
