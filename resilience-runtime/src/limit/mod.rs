//! Load limiting: send an overloaded dependency fewer calls before it
//! falls over, and a rate-limited one no more than its quota.
//!
//! The [breaker](crate::breaker) protects callers from a dependency that is
//! *down*. A dependency that is *slow because it is overloaded* needs its
//! callers to send less — and retries against it make it worse. A
//! dependency with a quota (a partner API allowing 100 requests a second)
//! needs its callers to stay under it. Four mechanisms, usable alone or
//! together, all shedding with the runtime's [`Overloaded`](crate::Overloaded) error:
//!
//! - [`Bulkhead`]: at most `max` calls in flight, an optional bounded wait
//!   for a slot. Reads no clock.
//! - [`AdaptiveLimit`]: calls in flight bounded by a limit learnt from
//!   their latency by TCP Vegas, as Netflix's `concurrency-limits`
//!   (`VegasLimit`) does it, with its defaults ([`VegasConfig`]): no need
//!   to know the dependency's capacity in advance.
//! - [`Throttle`]: the SRE book's client-side adaptive throttling, which
//!   rejects locally with probability
//!   `max(0, (requests − K × accepts) / (requests + 1))`.
//! - [`RateLimit`]: at most a [`Rate`] of calls, a burst at once (GCRA, as
//!   `governor` and `redis-cell`), waiting a bounded time for a place or
//!   refusing with [when to come back](crate::Overloaded::retry_after),
//!   on tokio's clock or the CPU's counter ([`RateClock`]);
//!   [`KeyedRateLimit`], the same per key (per tenant, per host) in a
//!   bounded table; `FleetRateLimit` (feature `limit-redis`), one quota
//!   shared by every replica of a service through Redis with no Redis
//!   round trip on the call path (`shared = "redis://host:port/"` beside
//!   `rate` in a `[limits.<name>]` section).
//!
//! Every call carries a [`Priority`]: sheddable calls are shed first,
//! critical ones last; [`with_priority`] sets it for one call. A [`Limiter`] combines a throttle and a rate limit
//! with a bulkhead or an adaptive limit, as the HTTP layers apply it (`with_limit` on the
//! reqwest middleware and the tower layer; a request's priority is a
//! `Priority` in its extensions).
//!
//! # Where limiting sits
//!
//! ```text
//! caller → breaker → retry → [throttle → rate limit → concurrency limit or bulkhead] → transport
//! ```
//!
//! - **A slot is held per attempt**, not per logical call: a chain pausing
//!   between attempts holds no slot, so the pauses of the retry policy do
//!   not fill the limit, and every attempt's latency is a sample of the
//!   dependency (a per-call slot would measure the backoff pauses). A
//!   retry needs a slot like any call, which is what keeps a retry storm
//!   from multiplying the load on an overloaded dependency.
//! - **A shed attempt is not retried** ([`Verdict::Ignored`]):
//!   retrying into a full limit is the storm the limit exists to stop; the
//!   chain ends with [`Error::Overloaded`](crate::Error::Overloaded).
//! - **For the breaker, a shed call is no failure** of the dependency (it
//!   never saw the call), nor a success: it counts for nothing. The breaker
//!   judges the dependency by the calls that reached it; a dependency that
//!   is slow enough to time out still opens it.
//! - **For a `fallback =`**, a shed call is no answer: the fallback
//!   answers it, as it answers an open breaker.
//! - **Metrics**: see [`telemetry`](crate::telemetry) (`limit`, in
//!   flight, shed calls, the throttle's probability), and a WARN when a
//!   limiter first sheds, then at most once a minute while it keeps
//!   shedding.

mod adaptive;
mod bulkhead;
mod config;
#[cfg(feature = "limit-redis")]
mod fleet;
mod keyed;
mod limiter;
mod priority;
mod rate;
mod report;
#[cfg(feature = "limit-server")]
pub mod server;
mod throttle;
mod vegas;

pub use adaptive::{AdaptiveLimit, LimitPermit};
pub use bulkhead::{Bulkhead, BulkheadPermit};
pub use config::LimitConfig;
#[cfg(feature = "limit-redis")]
pub use fleet::FleetRateLimit;
pub use keyed::KeyedRateLimit;
pub use limiter::Limiter;
pub(crate) use priority::scoped as scoped_priority;
pub use priority::{Priority, WithPriority, with_priority};
pub use rate::{Rate, RateClock, RateLimit};
pub use throttle::{Throttle, ThrottleConfig, ThrottleTicket};
pub use vegas::VegasConfig;

pub use crate::error::ShedBy;

use crate::retry::Verdict;

/// What a call's verdict (`None`: a success) is to a limiter: `None` when
/// it is no sample at all (cancelled, shed, never sent), else whether it
/// was a *drop* (a timeout or a transient failure) rather than an answer.
pub(crate) const fn sample_of(verdict: Option<Verdict>) -> Option<bool> {
    match verdict {
        None | Some(Verdict::Permanent) => Some(false),
        Some(Verdict::Transient | Verdict::RetryAfter(_) | Verdict::Fatal) => Some(true),
        Some(Verdict::Ignored) => None,
    }
}
