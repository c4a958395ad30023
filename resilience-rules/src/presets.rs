//! The values each preset starts from: the retry policies `http`,
//! `background` and `db_tx`, and the breaker's default, `critical` and
//! `relaxed` settings, and a family's bounds. The runtime builds its `Policy` and `BreakerConfig`
//! presets from these, and the macros check an attribute's arguments
//! against them, so a preset has one set of values wherever it is read.
//!
//! ```
//! use std::time::Duration;
//! use resilience_rules::presets;
//!
//! assert_eq!(presets::HTTP.max_attempts, 3);
//! assert_eq!(presets::BACKGROUND.initial, Duration::from_millis(500));
//! assert_eq!(presets::CRITICAL.min_requests, 10);
//! ```

use std::time::Duration;

/// How a retry preset's pauses grow between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Growth {
    /// `initial · multiplier^n`: 100, 200, 400 ms.
    Exponential,
    /// `initial · attempt²`: 10, 40, 90 ms, for transactions that
    /// conflicted and should try again soon.
    Quadratic,
}

/// How a retry preset spreads its pauses (amounts are fractions of the
/// pause).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PresetJitter {
    /// Each pause times a factor drawn from `1 ± amount`.
    Symmetric(f64),
    /// Each pause plus up to `amount` of itself.
    Additive(f64),
}

/// The values a retry policy preset starts from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPreset {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// The first pause, before jitter.
    pub initial: Duration,
    /// The growth factor of an exponential schedule.
    pub multiplier: f64,
    /// The cap on one pause.
    pub max_interval: Duration,
    /// How the pauses grow.
    pub growth: Growth,
    /// How the pauses are spread.
    pub jitter: PresetJitter,
    /// The cap on the whole chain, pauses included.
    pub max_elapsed: Duration,
}

/// Calls to another service over HTTP: 3 attempts, 100 ms ×2 up to 2 s,
/// ±25 %, 5 s in all. 100 ms covers a TCP retransmission, a leader
/// election and a dependency's p99; the three attempts fit in about 6 s.
pub const HTTP: RetryPreset = RetryPreset {
    max_attempts: 3,
    initial: Duration::from_millis(100),
    multiplier: 2.0,
    max_interval: Duration::from_secs(2),
    growth: Growth::Exponential,
    jitter: PresetJitter::Symmetric(0.25),
    max_elapsed: Duration::from_secs(5),
};

/// Background consumers, with no caller waiting: 5 retries after the
/// first attempt (6 attempts), 500 ms ×2 up to 30 s, ±25 %, 2 min in all;
/// what still fails goes to a dead-letter queue.
pub const BACKGROUND: RetryPreset = RetryPreset {
    max_attempts: 6,
    initial: Duration::from_millis(500),
    max_interval: Duration::from_secs(30),
    max_elapsed: Duration::from_secs(120),
    ..HTTP
};

/// A whole database transaction that met a serialization failure or a
/// deadlock: 3 attempts, `10 ms · attempt²` plus up to 25 %, at most 1 s
/// a pause, 5 s in all.
pub const DB_TX: RetryPreset = RetryPreset {
    max_attempts: 3,
    initial: Duration::from_millis(10),
    max_interval: Duration::from_secs(1),
    growth: Growth::Quadratic,
    jitter: PresetJitter::Additive(0.25),
    ..HTTP
};

/// The values a circuit breaker preset starts from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerPreset {
    /// The least number of calls in the window before the breaker may trip.
    pub min_requests: u32,
    /// The share of failed calls that trips it.
    pub failure_ratio: f64,
    /// The time window the calls are counted in.
    pub window: Duration,
    /// How long an open breaker refuses calls before it probes.
    pub cooldown: Duration,
    /// How many probes a half-open breaker lets through.
    pub half_open: u32,
    /// How long a probe may take before it counts as failed.
    pub probe_timeout: Duration,
    /// How long a call may take before it counts as failed.
    pub call_timeout: Duration,
}

/// A breaker's default: trips at 50 % failures out of at least 20 calls
/// in the last 60 s, refuses for 30 s, then sends one probe.
pub const BREAKER: BreakerPreset = BreakerPreset {
    min_requests: 20,
    failure_ratio: 0.5,
    window: Duration::from_secs(60),
    cooldown: Duration::from_secs(30),
    half_open: 1,
    probe_timeout: Duration::from_secs(5),
    call_timeout: Duration::from_secs(30),
};

/// A critical dependency (users, auth): trips sooner, at 30 % failures out
/// of at least 10 calls.
pub const CRITICAL: BreakerPreset = BreakerPreset {
    min_requests: 10,
    failure_ratio: 0.3,
    ..BREAKER
};

/// A dependency the service can live without (thumbnails): trips at 70 %
/// failures out of at least 30 calls.
pub const RELAXED: BreakerPreset = BreakerPreset {
    min_requests: 30,
    failure_ratio: 0.7,
    ..BREAKER
};

/// The bounds of a family of breakers (one per host, per tenant) when an
/// application gives none: how many members it holds at once and how long
/// a member may go unused before it may be removed to make room.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FamilyPreset {
    /// The most members held at once.
    pub max_members: u32,
    /// How long a member, closed and without failures, may go unused.
    pub idle: Duration,
}

/// A family's default: 1,000 members (at most about 1 MiB of breakers),
/// a member idle after 5 minutes unused. Not a value of the guide, which
/// speaks of one breaker per dependency: a bound chosen so that a family
/// keyed by something unbounded (a tenant id) cannot grow without limit.
pub const FAMILY: FamilyPreset = FamilyPreset {
    max_members: 1_000,
    idle: Duration::from_secs(300),
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The engineering guide's tables, written out: a preset that drifts
    /// from them fails here, before the attributes or the runtime, which
    /// both read these values, can disagree with the guide.
    #[test]
    fn the_presets_are_the_guides() {
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        // HTTP: 3 attempts, 100 ms ×2 up to 2 s, ±25 %, 5 s in all.
        assert_eq!(
            (
                HTTP.max_attempts,
                HTTP.initial,
                HTTP.multiplier,
                HTTP.max_interval
            ),
            (3, ms(100), 2.0, s(2))
        );
        assert_eq!(
            (HTTP.jitter, HTTP.max_elapsed),
            (PresetJitter::Symmetric(0.25), s(5))
        );
        // Background consumers: 5 retries, 500 ms ×2, 30 s max interval.
        assert_eq!(
            (
                BACKGROUND.max_attempts - 1,
                BACKGROUND.initial,
                BACKGROUND.multiplier
            ),
            (5, ms(500), 2.0)
        );
        assert_eq!(BACKGROUND.max_interval, s(30));
        // Database transactions: 3 attempts, 10 ms · attempt² plus up to 25 %.
        assert_eq!(
            (
                DB_TX.max_attempts,
                DB_TX.initial,
                DB_TX.growth,
                DB_TX.jitter
            ),
            (3, ms(10), Growth::Quadratic, PresetJitter::Additive(0.25))
        );
        // Breakers: min 20 / 10 / 30, ratio 0.5 / 0.3 / 0.7, a 60 s
        // window, 30 s open, one probe.
        let breakers = [BREAKER, CRITICAL, RELAXED];
        assert_eq!(breakers.map(|b| b.min_requests), [20, 10, 30]);
        assert_eq!(breakers.map(|b| b.failure_ratio), [0.5, 0.3, 0.7]);
        for b in breakers {
            assert_eq!((b.window, b.cooldown, b.half_open), (s(60), s(30), 1));
        }
    }
}
