//! A rate limit: at most so many calls per period, with a burst, by the
//! generic cell rate algorithm in one atomic word.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::Priority;
use super::report::{self, Report};
use crate::clock::duration_nanos;
use crate::error::{ConfigError, Overloaded, ShedBy};
use crate::telemetry::Labels;

/// A rate: `count` calls per `period`, written `"100/s"` in the config file
/// and in attributes.
///
/// The text is a whole number, a `/`, and either a unit (`s`, `m`, `h`,
/// `ms`: one of that unit) or a duration (`"10/100ms"`, `"6000/10m"`).
///
/// ```
/// use resilience::limit::Rate;
/// use std::time::Duration;
///
/// let rate: Rate = "100/s".parse()?;
/// assert_eq!(rate, Rate::per_second(100));
/// assert_eq!(rate.interval(), Duration::from_millis(10));
/// assert_eq!("25/100ms".parse::<Rate>()?, Rate::new(25, Duration::from_millis(100)));
/// assert_eq!(Rate::per_minute(6).to_string(), "6/m");
/// let err = "100 per second".parse::<Rate>().unwrap_err();
/// assert!(err.to_string().contains("\"100 per second\""), "{err}");
/// # Ok::<(), resilience::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u32,
    period: Duration,
}

impl Rate {
    /// `count` calls per `period`. [`RateLimit::new`] refuses a count of 0,
    /// a period of 0 and a rate faster than one call per nanosecond.
    pub const fn new(count: u32, period: Duration) -> Self {
        Self { count, period }
    }

    /// `count` calls a second.
    pub const fn per_second(count: u32) -> Self {
        Self::new(count, Duration::from_secs(1))
    }

    /// `count` calls a minute.
    pub const fn per_minute(count: u32) -> Self {
        Self::new(count, Duration::from_secs(60))
    }

    /// `count` calls an hour.
    pub const fn per_hour(count: u32) -> Self {
        Self::new(count, Duration::from_secs(3600))
    }

    /// How many calls per [`period`](Self::period).
    pub const fn count(&self) -> u32 {
        self.count
    }

    /// The period.
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// The time between two calls at exactly this rate (the GCRA's
    /// emission interval): the period divided by the count, rounded down
    /// to the nanosecond, so the limit never runs slower than configured.
    pub const fn interval(&self) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(duration_nanos(self.period) / self.count as u64)
    }

    /// Checks the rate: at least one call, a period, at most one call per
    /// nanosecond.
    pub fn validate(&self) -> Result<(), ConfigError> {
        resilience_rules::rate::check(self.count, self.period)
            .map_err(|reason| ConfigError::new("rate limit", "rate", self.to_string(), reason))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per = match duration_nanos(self.period) {
            1_000_000 => "ms".to_owned(),
            1_000_000_000 => "s".to_owned(),
            60_000_000_000 => "m".to_owned(),
            3_600_000_000_000 => "h".to_owned(),
            _ => resilience_rules::duration::display(self.period),
        };
        write!(f, "{}/{per}", self.count)
    }
}

impl FromStr for Rate {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Self, ConfigError> {
        // The attributes' `rate = "…"` is read by the same rule at compile
        // time: a text refused here is refused there, for the same reason.
        resilience_rules::rate::parse(text)
            .map(|(count, period)| Rate::new(count, period))
            .map_err(|reason| ConfigError::new("rate limit", "rate", format!("{text:?}"), reason))
    }
}

/// At most [`Rate`] calls, and [`burst`](Self::with_burst) of them at once:
/// the quota of a partner API (100 requests a second per account), kept
/// by the caller so that the dependency never has to answer `429`.
///
/// The generic cell rate algorithm (GCRA), as `governor` and `redis-cell`
/// keep it: one word, the *theoretical arrival time* of the next call, in
/// an `AtomicU64`; a call is admitted when that time is at most `burst −
/// 1` intervals ahead of now, and moves it one interval on. No timer, no
/// task, no lock; in any span of time `t`, at most `burst + t × rate`
/// calls are admitted.
///
/// **Priorities** keep a reserve, as for the concurrency limits: a
/// [`Priority`] may use [its share](Priority::share) of the burst, so the
/// last tenth of a burst of 20 is kept for critical calls and sheddable
/// calls use at most half of it.
///
/// **Waiting**: a call over the rate is refused at once with
/// [`Overloaded`], carrying [when to come back](Overloaded::retry_after);
/// with [`with_max_wait`](Self::with_max_wait), [`acquire`](Self::acquire)
/// instead takes the next free place in the schedule and sleeps until it,
/// if that is within `max_wait` and the caller's
/// [deadline](crate::deadline). Sheddable calls never wait. A waiting
/// call that is cancelled keeps its place: the rate counts it, so the
/// dependency never sees more than the rate, whatever the callers do.
///
/// ```
/// use resilience::limit::{Priority, Rate, RateLimit};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let payments = RateLimit::new("payments", Rate::per_second(25))?.with_burst(5)?;
/// for _ in 0..5 {
///     payments.try_acquire(Priority::Critical)?;
/// }
/// let refused = payments.try_acquire(Priority::Critical).unwrap_err();
/// assert_eq!(refused.retry_after(), Some(Duration::from_millis(40)));
///
/// // Waiting: the call takes the next place in the schedule.
/// let payments = payments.with_max_wait(Duration::from_millis(100));
/// let start = tokio::time::Instant::now();
/// payments.acquire(Priority::Critical).await?;
/// assert_eq!(start.elapsed(), Duration::from_millis(40));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RateLimit {
    /// The theoretical arrival time of the next call, in nanoseconds
    /// after the clock's origin.
    tat: AtomicU64,
    clock: Clock,
    schedule: Schedule,
    rate: Rate,
    burst: u32,
    max_wait: Duration,
    report: Report,
}

impl RateLimit {
    /// A rate limit named `name` (the `target` label of its metrics) of
    /// `rate`, with a burst of one period's worth of calls (the rate's
    /// count, as `governor`'s `Quota::per_second(n)` admits `n` at once),
    /// refusing a call over it at once.
    ///
    /// # Errors
    ///
    /// A rate that [does not validate](Rate::validate).
    pub fn new(name: &'static str, rate: Rate) -> Result<Self, ConfigError> {
        Self::new_in(crate::telemetry::UNKNOWN_SERVICE, name, rate)
    }

    pub(crate) fn new_in(
        service: &'static str,
        name: &'static str,
        rate: Rate,
    ) -> Result<Self, ConfigError> {
        rate.validate()
            .map_err(|err| err.with_subject(format!("rate limit `{name}`")))?;
        Ok(Self {
            tat: AtomicU64::new(0),
            clock: Clock::new(),
            schedule: Schedule::new(rate, rate.count()),
            rate,
            burst: rate.count(),
            max_wait: Duration::ZERO,
            report: Report::new(Labels::new(service, name), ShedBy::RateLimit),
        })
    }

    /// The same limit, admitting up to `burst` calls at once (after a
    /// quiet spell) before it spaces them by the rate's interval.
    ///
    /// # Errors
    ///
    /// A burst of 0, which would refuse every call, or above 1,000,000,
    /// which would limit nothing.
    pub fn with_burst(mut self, burst: u32) -> Result<Self, ConfigError> {
        check_burst(self.name(), burst)?;
        self.burst = burst;
        self.schedule = Schedule::new(self.rate, burst);
        Ok(self)
    }

    /// The same limit, whose [`acquire`](Self::acquire) waits at most
    /// `max_wait` for its place in the schedule (default: no wait).
    ///
    /// The wait counts against the caller's time: keep it well below the
    /// retry chain's `max_elapsed` and the caller's deadline.
    #[must_use]
    pub fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// The limit's name.
    pub fn name(&self) -> &'static str {
        self.report.name()
    }

    /// The rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// The most calls admitted at once.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// The longest [`acquire`](Self::acquire) waits.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// Admits a call of `priority` now, or refuses it with [`Overloaded`]
    /// and the time until a call of its priority would be admitted
    /// ([`Overloaded::retry_after`]). Never waits.
    #[inline]
    pub fn try_acquire(&self, priority: Priority) -> Result<(), Overloaded> {
        self.schedule
            .try_take(&self.tat, self.clock.now(), priority, &self.report)
    }

    /// Admits a call of `priority`, waiting for its place in the schedule
    /// when that is at most [`max_wait`](Self::max_wait) away and before
    /// the caller's [deadline](crate::deadline); otherwise refuses it at
    /// once, as [`try_acquire`](Self::try_acquire) does. Sheddable calls
    /// never wait.
    pub async fn acquire(&self, priority: Priority) -> Result<(), Overloaded> {
        let now = self.clock.now();
        let place = self
            .schedule
            .place(&self.tat, now, priority, self.max_wait, &self.report)?;
        self.clock.wait(now, place, &self.report).await;
        Ok(())
    }

    /// How many calls of `priority` would be admitted now, one after the
    /// other, and how long until one more would be (zero when the whole
    /// share of the burst is free): what the server's `RateLimit` field
    /// says.
    pub fn remaining(&self, priority: Priority) -> (u32, Duration) {
        self.schedule
            .remaining(self.tat.load(Ordering::Relaxed), self.clock.now(), priority)
    }
}

/// Refuses a burst of 0 or above [`MAX_BURST`](resilience_rules::limits::MAX_BURST),
/// naming the limit.
pub(super) fn check_burst(name: &str, burst: u32) -> Result<(), ConfigError> {
    resilience_rules::rate::burst(burst)
        .map_err(|reason| ConfigError::new(format!("rate limit `{name}`"), "burst", burst, reason))
}

/// The limit's clock: tokio's, so that its paused clock drives the limit
/// in tests, read as nanoseconds after an origin.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    origin: Instant,
}

impl Clock {
    pub(super) fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub(super) fn now(&self) -> u64 {
        duration_nanos(Instant::now().saturating_duration_since(self.origin))
    }

    /// Sleeps from `now` until `at` (both after the origin), if that is
    /// later, and reports the wait.
    pub(super) async fn wait(&self, now: u64, at: u64, report: &Report) {
        report::rate_admitted(report.labels());
        if at > now {
            crate::clock::sleep_until(self.origin + Duration::from_nanos(at)).await;
            report::rate_waited(report.labels(), Duration::from_nanos(at - now));
        }
    }
}

/// The GCRA of one rate and burst: the emission interval `T` and, for each
/// priority, how far ahead of now the arrival time may be for a call to be
/// admitted, `(share(burst) − 1) × T`. It works on any word holding an
/// arrival time: a limit's own, or a key's.
#[derive(Debug, Clone, Copy)]
pub(super) struct Schedule {
    interval: u64,
    tolerance: [u64; 3],
}

impl Schedule {
    pub(super) fn new(rate: Rate, burst: u32) -> Self {
        let interval = duration_nanos(rate.interval());
        Self {
            interval,
            tolerance: Priority::ALL
                .map(|p| u64::from(p.share(burst).max(1) - 1).saturating_mul(interval)),
        }
    }

    /// Admits a call now or refuses it, on the word `tat`.
    #[inline]
    pub(super) fn try_take(
        &self,
        tat: &AtomicU64,
        now: u64,
        priority: Priority,
        report: &Report,
    ) -> Result<(), Overloaded> {
        let tolerance = self.tolerance[priority.index()];
        match self.take(tat, now, tolerance) {
            Ok(_) => {
                report::rate_admitted(report.labels());
                Ok(())
            }
            Err(ahead) => Err(refuse(report, priority, ahead - tolerance)),
        }
    }

    /// Takes the call's place in the schedule if it is at most `max_wait`
    /// (and the caller's deadline) beyond what `priority` admits at once:
    /// the instant it is admitted at, after the origin; or refuses it.
    pub(super) fn place(
        &self,
        tat: &AtomicU64,
        now: u64,
        priority: Priority,
        max_wait: Duration,
        report: &Report,
    ) -> Result<u64, Overloaded> {
        let tolerance = self.tolerance[priority.index()];
        let mut wait = if priority == Priority::Sheddable {
            Duration::ZERO
        } else {
            max_wait
        };
        if let Some(left) = crate::deadline::remaining() {
            wait = wait.min(left);
        }
        match self.take(tat, now, tolerance.saturating_add(duration_nanos(wait))) {
            // Admitted at `place − tolerance`: the first instant the call
            // conforms (now, when that is past).
            Ok(place) => Ok(place.saturating_sub(tolerance).max(now)),
            Err(ahead) => Err(refuse(report, priority, ahead - tolerance)),
        }
    }

    /// Takes the next place in the schedule if it is at most `allowance`
    /// ahead of `now`: `Ok(place)`, the arrival time the call was given,
    /// or `Err(how far ahead)` the next place is, beyond the allowance.
    #[inline]
    fn take(&self, word: &AtomicU64, now: u64, allowance: u64) -> Result<u64, u64> {
        let mut tat = word.load(Ordering::Relaxed);
        loop {
            // A limit that was idle starts from now: the unused past is
            // not saved up beyond the burst.
            let place = tat.max(now);
            let ahead = place - now;
            if ahead > allowance {
                return Err(ahead);
            }
            // Relaxed: the word publishes nothing but itself.
            match word.compare_exchange_weak(
                tat,
                place + self.interval,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(place),
                Err(current) => tat = current,
            }
        }
    }

    /// [`RateLimit::remaining`] for the arrival time `tat`.
    pub(super) fn remaining(&self, tat: u64, now: u64, priority: Priority) -> (u32, Duration) {
        let ahead = tat.saturating_sub(now);
        let tolerance = self.tolerance[priority.index()];
        if ahead > tolerance {
            return (0, Duration::from_nanos(ahead - tolerance));
        }
        let slack = tolerance - ahead;
        let left = (slack / self.interval + 1).min(u64::from(u32::MAX)) as u32;
        let next = if ahead == 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos(self.interval - slack % self.interval)
        };
        (left, next)
    }
}

/// A refused call, `retry_after` nanoseconds before a call of its
/// priority would be admitted.
#[cold]
fn refuse(report: &Report, priority: Priority, retry_after: u64) -> Overloaded {
    report
        .shed(priority, 0)
        .with_retry_after(Duration::from_nanos(retry_after))
}

#[cfg(test)]
mod tests;
