#![doc = include_str!("../telemetry.md")]

pub(crate) mod call;
pub(crate) mod emit;
mod hedge;
mod labels;
mod retries;
#[cfg(all(test, feature = "metrics"))]
mod tests;

pub(crate) use call::{CallScope, Entered};
pub use call::{Observed, observe};
pub use emit::{describe, fallback, recorder_installed};
pub use labels::{AttemptResult, Fallback, Labels, Status, attempt_label};
pub(crate) use labels::{UNKNOWN_SERVICE, publish_service};
pub use retries::RetryMetrics;

/// `http_client_retries_total{service,target,attempt,result}`: a counter, one
/// sample per attempt.
pub const RETRIES_TOTAL: &str = "http_client_retries_total";
/// `http_client_request_duration_seconds{service,target,status}`: a
/// histogram of the wall time of a whole logical call, from the start of
/// its first attempt to its outcome, pauses included.
pub const REQUEST_DURATION_SECONDS: &str = "http_client_request_duration_seconds";
/// `circuit_breaker_state{service,target}`: a gauge, 0 closed, 1 half-open,
/// 2 open.
pub const BREAKER_STATE: &str = "circuit_breaker_state";
/// `circuit_breaker_trips_total{service,target}`: a counter of closed → open
/// transitions.
pub const BREAKER_TRIPS_TOTAL: &str = "circuit_breaker_trips_total";
/// `circuit_breaker_shared_fallback{service,target}`: a gauge, 1 while a
/// breaker shared through Redis decides alone (Redis does not answer, or
/// has not yet), 0 while it follows its fleet.
pub const BREAKER_SHARED_FALLBACK: &str = "circuit_breaker_shared_fallback";
/// `dependency_errors_total{service,target,reason}`: a counter of failed
/// attempts and rejected calls that are the dependency's fault.
pub const DEPENDENCY_ERRORS_TOTAL: &str = "dependency_errors_total";
/// `http_client_fallbacks_total{service,target,kind}`: a counter of calls
/// answered by one of the guide's [fallbacks](crate::guide#fallbacks).
pub const FALLBACKS_TOTAL: &str = "http_client_fallbacks_total";
/// `http_client_retry_budget_exhausted_total{service,target}`: a counter of
/// retries not made because the chain's retry
/// [`Budget`](crate::retry::Budget) was empty; each such chain also records
/// its last attempt as `exhausted` in [`RETRIES_TOTAL`].
pub const RETRY_BUDGET_EXHAUSTED_TOTAL: &str = "http_client_retry_budget_exhausted_total";
/// `http_client_hedges_total{service,target}`: a counter of the attempts
/// that hedged calls ([`Hedge`](crate::retry::Hedge)) started beside an
/// attempt still in flight or after a transient failure, not counting each
/// call's first.
pub const HEDGES_TOTAL: &str = "http_client_hedges_total";

/// `http_client_concurrency_limit{service,target}`: a gauge, the limit of
/// a [`Bulkhead`](crate::limit::Bulkhead) (its `max`) or of an
/// [`AdaptiveLimit`](crate::limit::AdaptiveLimit) (set when it changes).
pub const CONCURRENCY_LIMIT: &str = "http_client_concurrency_limit";
/// `http_client_in_flight{service,target}`: a gauge, the calls holding a
/// slot of a bulkhead or an adaptive limit.
pub const IN_FLIGHT: &str = "http_client_in_flight";
/// `http_client_shed_total{service,target,by,priority}`: a counter of the
/// calls a load limiter shed before they were sent.
pub const SHED_TOTAL: &str = "http_client_shed_total";
/// `http_client_throttle_probability{service,target}`: a gauge, the
/// probability with which a client-side [`Throttle`](crate::limit::Throttle)
/// rejects a default call, set at each admission.
pub const THROTTLE_PROBABILITY: &str = "http_client_throttle_probability";
/// `http_client_rate_limit_admitted_total{service,target}`: a counter of
/// the calls a [`RateLimit`](crate::limit::RateLimit) admitted; the calls
/// it refused are in [`SHED_TOTAL`] with `by="rate_limit"`.
pub const RATE_LIMIT_ADMITTED_TOTAL: &str = "http_client_rate_limit_admitted_total";
/// `http_client_rate_limit_wait_seconds{service,target}`: a histogram of
/// how long calls waited for their place in a rate limit's schedule (only
/// the calls that waited).
pub const RATE_LIMIT_WAIT_SECONDS: &str = "http_client_rate_limit_wait_seconds";
/// `http_client_rate_limit_lease_tokens{service,target}`: a gauge, the
/// tokens of the last lease a replica of a
/// [`FleetRateLimit`](crate::limit) took from the fleet's quota in Redis.
pub const RATE_LIMIT_LEASE_TOKENS: &str = "http_client_rate_limit_lease_tokens";
/// `http_client_rate_limit_redis_round_trips_total{service,target}`: a
/// counter of the lease requests a fleet rate limit sent to Redis,
/// answered or not.
pub const RATE_LIMIT_REDIS_ROUND_TRIPS_TOTAL: &str =
    "http_client_rate_limit_redis_round_trips_total";
/// `http_client_rate_limit_shared_fallback{service,target}`: a gauge, 1
/// while a fleet rate limit admits its share of the quota alone (Redis
/// does not answer, or has not yet), 0 while it leases from the fleet.
pub const RATE_LIMIT_SHARED_FALLBACK: &str = "http_client_rate_limit_shared_fallback";

/// Every metric of this module, by name: the ones [`describe`] describes
/// and the guide's [table](crate::guide#metrics-and-alerts) lists (a test
/// holds all three to one set).
///
/// ```
/// use resilience::telemetry;
///
/// assert!(telemetry::METRICS.contains(&telemetry::RETRIES_TOTAL));
/// assert_eq!(telemetry::METRICS.len(), 18);
/// ```
pub const METRICS: &[&str] = &[
    RETRIES_TOTAL,
    REQUEST_DURATION_SECONDS,
    BREAKER_STATE,
    BREAKER_TRIPS_TOTAL,
    DEPENDENCY_ERRORS_TOTAL,
    BREAKER_SHARED_FALLBACK,
    FALLBACKS_TOTAL,
    RETRY_BUDGET_EXHAUSTED_TOTAL,
    HEDGES_TOTAL,
    CONCURRENCY_LIMIT,
    IN_FLIGHT,
    SHED_TOTAL,
    THROTTLE_PROBABILITY,
    RATE_LIMIT_ADMITTED_TOTAL,
    RATE_LIMIT_WAIT_SECONDS,
    RATE_LIMIT_LEASE_TOKENS,
    RATE_LIMIT_REDIS_ROUND_TRIPS_TOTAL,
    RATE_LIMIT_SHARED_FALLBACK,
];

/// Histogram buckets for [`REQUEST_DURATION_SECONDS`] and
/// [`RATE_LIMIT_WAIT_SECONDS`], in seconds: from a
/// fast local answer (5 ms) to a whole retry chain (at most 5 s under the
/// guide's [HTTP defaults](crate::guide#retry), up to 6 s with the last
/// attempt) and beyond.
pub const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
