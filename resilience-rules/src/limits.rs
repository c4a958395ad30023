//! The bounds on every number a policy, a hedge, a breaker or a family of
//! breakers is given: the macros refuse a value outside them at compile
//! time, the runtime's `validate` and `build` at startup.
//!
//! ```
//! use resilience_rules::limits;
//!
//! assert_eq!(limits::MAX_ATTEMPTS, 100);
//! assert!((limits::MIN_JITTER..=limits::MAX_JITTER).contains(&0.25));
//! ```

use std::time::Duration;

/// The most attempts a retry chain may make, the first included: each one
/// is another request to a dependency that is failing; retrying for
/// longer is `max_elapsed`'s job.
pub const MAX_ATTEMPTS: u32 = 100;

/// The smallest jitter factor: below 10 % clients that failed together
/// retry together (thundering herd).
pub const MIN_JITTER: f64 = 0.1;

/// The largest jitter factor: the jitter is a fraction of the pause.
pub const MAX_JITTER: f64 = 1.0;

/// The largest growth factor of the pauses: a larger one jumps from
/// `initial` to the cap in a step or two, a fixed wait rather than a
/// backoff.
pub const MAX_MULTIPLIER: f64 = 10.0;

/// The most attempts a hedged call may make: each is one more request to
/// the dependency, all of them in flight at once.
pub const MAX_HEDGED_ATTEMPTS: u32 = 10;

/// The shortest hedge delay: a shorter one sends every call twice at once.
pub const MIN_HEDGE_DELAY: Duration = Duration::from_millis(1);

/// The most calls a breaker's `min` and its count window (`window_calls`)
/// may name.
pub const MAX_CALLS: u32 = 1_000_000;

/// The most half-open probes: what the breaker's 16-bit probe counter
/// holds.
pub const MAX_PROBES: u32 = u16::MAX as u32;

/// The shortest time window: ten buckets of 1 ms, the timer's resolution.
pub const MIN_WINDOW: Duration = Duration::from_millis(10);

/// The shortest `cooldown`, `probe_timeout` and `call_timeout` of a breaker.
pub const MIN_BREAKER_TIMEOUT: Duration = Duration::from_millis(1);

/// The shortest `sync_interval` of a breaker shared through Redis: each
/// sync is a round trip per replica.
pub const MIN_SYNC_INTERVAL: Duration = Duration::from_millis(10);

/// The most members a family of breakers may be given (250 MB of breakers
/// at rest, at most 1 GiB).
pub const MAX_MEMBERS: u32 = 1_000_000;

/// The shortest `idle` of a family's member.
pub const MIN_IDLE: Duration = Duration::from_secs(1);

/// The longest `idle` of a family's member: one day.
pub const MAX_IDLE: Duration = Duration::from_secs(24 * 3600);

/// The largest burst of a rate limit: the most calls it admits at once
/// after a quiet spell. A larger one lets through at once whatever a
/// process can send, which limits no dependency.
pub const MAX_BURST: u32 = 1_000_000;
