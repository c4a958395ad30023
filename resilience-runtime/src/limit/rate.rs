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
/// **The clock**: tokio's by default, so that tokio's paused clock drives
/// the limit in tests; [`with_clock`](Self::with_clock) puts it on the
/// CPU's counter instead ([`RateClock`], feature `limit-tsc`), for an
/// admission without a system call.
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

    /// The same limit, reading `clock` (default: tokio's; see
    /// [`RateClock`]). The schedule starts over from now, as if new.
    #[must_use]
    pub fn with_clock(mut self, clock: RateClock) -> Self {
        self.clock = Clock::of(clock);
        self.tat = AtomicU64::new(0);
        self
    }

    /// The clock the limit reads.
    pub fn clock(&self) -> RateClock {
        self.clock.kind()
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

/// The clock a local rate limit reads on every admission.
///
/// The default is tokio's: tokio's paused clock (`start_paused`,
/// `tokio::time::advance`) drives the limit in tests, and outside a test
/// build of tokio it is the system's monotonic clock, a `clock_gettime`
/// per admission — most of an admission's cost where that call is slow,
/// as on many virtual machines. `Tsc` (feature `limit-tsc`) reads the
/// CPU's counter through `quanta` instead, as `governor` does: no system
/// call, and a limit whose admission costs what governor's does.
///
/// ```
/// use resilience::limit::{Priority, Rate, RateClock, RateLimit};
///
/// let limit = RateLimit::new("partner", Rate::per_second(100))?;
/// assert_eq!(limit.clock(), RateClock::Tokio);
/// # #[cfg(feature = "limit-tsc")] {
/// let hot = RateLimit::new("partner", Rate::per_second(100))?.with_clock(RateClock::Tsc);
/// assert_eq!(hot.clock(), RateClock::Tsc);
/// hot.try_acquire(Priority::Default)?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum RateClock {
    /// tokio's clock (the default), which tokio's paused clock drives.
    #[default]
    Tokio,
    /// The CPU's counter (the TSC on x86-64, `cntvct_el0` on AArch64),
    /// calibrated against the system's monotonic clock once per process
    /// (up to 200 ms, the first time a limit on it is built), through
    /// `quanta`; the system's clock where the CPU has no counter that
    /// ticks at a constant rate. tokio's paused clock does **not** drive
    /// it: a test that advances tokio's time keeps the default.
    #[cfg(feature = "limit-tsc")]
    Tsc,
}

impl RateClock {
    /// The name the config file gives the clock (`clock = "tsc"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Tokio => "tokio",
            #[cfg(feature = "limit-tsc")]
            Self::Tsc => "tsc",
        }
    }
}

impl fmt::Display for RateClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RateClock {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Self, ConfigError> {
        match text {
            "tokio" => Ok(Self::Tokio),
            #[cfg(feature = "limit-tsc")]
            "tsc" => Ok(Self::Tsc),
            #[cfg(not(feature = "limit-tsc"))]
            "tsc" => Err(ConfigError::new(
                "rate limit",
                "clock",
                "\"tsc\"",
                "the CPU's counter needs the `limit-tsc` cargo feature of resilience; turn it on, or keep `clock = \"tokio\"`",
            )),
            other => Err(ConfigError::new(
                "rate limit",
                "clock",
                format!("{other:?}"),
                "the clock is \"tokio\" (the default, which tokio's paused clock drives in tests) or \"tsc\" (the CPU's counter, feature `limit-tsc`)",
            )),
        }
    }
}

/// The limit's clock, read as nanoseconds after an origin: tokio's unless
/// the limit asked for the CPU's counter. The tokio origin is kept in
/// both cases, since a waiting call sleeps on tokio's timer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    origin: Instant,
    #[cfg(feature = "limit-tsc")]
    tsc: Option<Tsc>,
}

/// The CPU's counter, its reading at the origin, and how to turn ticks
/// into nanoseconds.
#[cfg(feature = "limit-tsc")]
#[derive(Debug, Clone, Copy)]
struct Tsc {
    /// The TSC at the origin, when the limit reads it itself.
    origin: u64,
    /// Nanoseconds per tick in units of 2⁻⁶⁴ ns, from `quanta`'s
    /// calibration, when the limit reads the TSC itself (0: it reads
    /// `quanta`'s clock).
    scale: u64,
    /// `quanta`'s clock at the origin.
    quanta: quanta::Instant,
}

#[cfg(feature = "limit-tsc")]
impl Tsc {
    fn new() -> Self {
        let scale = direct::scale(&quanta::Clock::new());
        Self {
            origin: if scale != 0 { direct::ticks() } else { 0 },
            scale,
            quanta: quanta::Instant::now(),
        }
    }

    /// Nanoseconds since the origin; a reading behind the origin (another
    /// core's counter a few ticks back) is the origin.
    #[inline]
    fn now(&self) -> u64 {
        if self.scale != 0 {
            // The TSC read inline and scaled by the high half of one
            // multiplication (no shift): `quanta` would add a call, two
            // checks of which clock it is on and a variable shift.
            let ticks = direct::ticks().saturating_sub(self.origin);
            return ((u128::from(ticks) * u128::from(self.scale)) >> 64) as u64;
        }
        duration_nanos(quanta::Instant::now().saturating_duration_since(self.quanta))
    }
}

/// Reading the TSC without `quanta`'s call, where `quanta` reads it too.
#[cfg(all(feature = "limit-tsc", target_arch = "x86_64"))]
mod direct {
    /// The TSC.
    #[inline(always)]
    pub(super) fn ticks() -> u64 {
        // Safety: `rdtsc` exists on every x86-64 CPU and reads a register.
        #[allow(unsafe_code)]
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
    }

    /// Nanoseconds per tick in units of 2⁻⁶⁴ ns by `clock`'s calibration,
    /// or 0 where that does not fit (a TSC of 1 GHz or slower), or when
    /// `clock` does not read the TSC (no invariant TSC: it then reads the
    /// system's clock, in nanoseconds), which shows as a raw reading
    /// outside two TSC readings around it.
    pub(super) fn scale(clock: &quanta::Clock) -> u64 {
        let before = ticks();
        let raw = clock.raw();
        let after = ticks();
        if !(before <= raw && raw <= after) {
            return 0;
        }
        // Over 2⁴⁰ ticks (minutes), rounding to the nanosecond is an error
        // of a few parts in 10¹².
        let per_2_40 = clock.delta_as_nanos(1, 1 + (1 << 40));
        if per_2_40 >= 1 << 40 {
            return 0;
        }
        per_2_40 << 24
    }
}

#[cfg(all(feature = "limit-tsc", not(target_arch = "x86_64")))]
mod direct {
    pub(super) fn ticks() -> u64 {
        0
    }

    /// Elsewhere the counter is read through `quanta`.
    pub(super) fn scale(_: &quanta::Clock) -> u64 {
        0
    }
}

impl Clock {
    pub(super) fn new() -> Self {
        Self {
            origin: Instant::now(),
            #[cfg(feature = "limit-tsc")]
            tsc: None,
        }
    }

    /// A clock of `kind`, its origin now.
    pub(super) fn of(kind: RateClock) -> Self {
        match kind {
            RateClock::Tokio => Self::new(),
            #[cfg(feature = "limit-tsc")]
            RateClock::Tsc => Self {
                origin: Instant::now(),
                tsc: Some(Tsc::new()),
            },
        }
    }

    /// Which clock this is.
    pub(super) fn kind(&self) -> RateClock {
        #[cfg(feature = "limit-tsc")]
        if self.tsc.is_some() {
            return RateClock::Tsc;
        }
        RateClock::Tokio
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub(super) fn now(&self) -> u64 {
        #[cfg(feature = "limit-tsc")]
        if let Some(tsc) = &self.tsc {
            return tsc.now();
        }
        duration_nanos(Instant::now().saturating_duration_since(self.origin))
    }

    /// Sleeps from `now` until `at` (both after the origin), if that is
    /// later, and reports the wait.
    pub(super) async fn wait(&self, now: u64, at: u64, report: &Report) {
        report::rate_admitted(report);
        if at > now {
            // On the counter, `at` is not an instant of tokio's clock:
            // sleep the distance from now instead.
            let until = match self.kind() {
                RateClock::Tokio => self.origin + Duration::from_nanos(at),
                #[cfg(feature = "limit-tsc")]
                RateClock::Tsc => Instant::now() + Duration::from_nanos(at - now),
            };
            crate::clock::sleep_until(until).await;
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
                report::rate_admitted(report);
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
