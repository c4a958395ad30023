//! What a breaker counts and when it trips: [`BreakerConfig`].

use std::time::Duration;

use crate::error::ConfigError;

/// How much history the breaker looks at when it decides to trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Window {
    /// The calls of the last `Duration`, in ten buckets: a failure leaves
    /// the window one bucket (a tenth of the window) at a time, so old
    /// failures age out smoothly rather than all at once.
    Time(Duration),
    /// Exactly the last `n` calls: a failure leaves the window `n` calls
    /// after it was made.
    Count(u32),
}

/// Slow calls: a call that succeeds but takes `threshold` or longer counts
/// as slow, and the breaker trips when slow calls reach `ratio` of the
/// window (with at least `min` calls), as in resilience4j.
///
/// A breaker with a slow-call rule reads the clock twice per call to time
/// it; one without never reads the clock on its closed path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlowCall {
    /// From this duration on, a call is slow.
    pub threshold: Duration,
    /// The share of slow calls, in `(0, 1]`, that trips the breaker.
    pub ratio: f64,
}

/// How a breaker is shared with the other replicas of the service: the
/// Redis it exchanges its counts and state through, and how often.
///
/// Every replica whose breaker of the same name (in the same `service`)
/// shares through the same Redis counts against the fleet's window and
/// follows the fleet's state; see [`shared`](super#sharing-a-breaker-across-replicas)
/// for what is exchanged and what happens when Redis is down. The call
/// path never touches Redis: admission, rejection and counting stay in
/// the process's memory, and a background task syncs every
/// `sync_interval`.
///
/// It needs the `breaker-redis` cargo feature; without it, a breaker
/// configured with sharing is refused by [`BreakerConfig::validate`].
///
/// # Default
///
/// A sync interval of 1 s.
///
/// # Example
///
/// ```
/// use resilience::breaker::{BreakerConfig, Sharing};
/// use std::time::Duration;
///
/// const USER: BreakerConfig = BreakerConfig::critical().with_sharing(
///     Sharing::redis("redis://127.0.0.1:6379/").with_sync_interval(Duration::from_millis(500)),
/// );
/// assert_eq!(USER.sharing().map(|s| s.url()), Some("redis://127.0.0.1:6379/"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sharing {
    url: &'static str,
    sync_interval: Duration,
}

impl Sharing {
    /// The default interval between two syncs with the fleet: 1 s.
    pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_secs(1);

    /// Shares through the Redis at `url` (`redis://host:port/db`), syncing
    /// every second (`shared`).
    pub const fn redis(url: &'static str) -> Self {
        Self {
            url,
            sync_interval: Self::DEFAULT_SYNC_INTERVAL,
        }
    }

    /// Syncs with the fleet every `interval` (`sync_interval`): an opening
    /// published by one replica is followed by every other within one
    /// interval; each sync costs each replica one Redis round trip.
    pub const fn with_sync_interval(mut self, interval: Duration) -> Self {
        self.sync_interval = interval;
        self
    }

    /// The Redis URL.
    pub const fn url(&self) -> &'static str {
        self.url
    }

    /// The interval between two syncs.
    pub const fn sync_interval(&self) -> Duration {
        self.sync_interval
    }
}

/// When a [`CircuitBreaker`](super::CircuitBreaker) trips, how long it
/// stays open and how it probes; the defaults are the
/// [guide's](crate::guide#circuit-breaker).
///
/// The breaker trips (closed → open) when, inside the window, there were
/// at least `min` calls AND failures are at least `ratio` of them. It
/// stays open for `cooldown`, rejecting every call at once, then lets
/// `half_open` probes through: all of them succeed → closed, one fails →
/// open for another cooldown.
///
/// The rule is checked when a call fails (or is slow), as gobreaker's
/// `ReadyToTrip`: a success never trips the breaker, even the one that
/// brings the window up to `min` calls; the next failure does.
///
/// # Default
///
/// [`BreakerConfig::new`]: min 20 calls, ratio 0.5, a 60 s time window,
/// 30 s cooldown, 1 probe, no slow-call rule. Presets
/// [`critical`](Self::critical) (0.3 / 10) and [`relaxed`](Self::relaxed)
/// (0.7 / 30) change only the ratio and the minimum.
///
/// # Example
///
/// ```
/// use resilience::breaker::BreakerConfig;
/// use std::time::Duration;
///
/// const PAYMENTS: BreakerConfig = BreakerConfig::critical()
///     .with_cooldown(Duration::from_secs(10))
///     .with_slow_call(Duration::from_secs(2), 0.8);
/// PAYMENTS.validate()?;
/// assert_eq!(PAYMENTS.failure_ratio(), 0.3);
/// assert_eq!(PAYMENTS.min_requests(), 10);
/// # Ok::<(), resilience::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[must_use]
pub struct BreakerConfig {
    min_requests: u32,
    failure_ratio: f64,
    window: Window,
    cooldown: Duration,
    half_open: u32,
    slow_call: Option<SlowCall>,
    probe_timeout: Duration,
    call_timeout: Duration,
    sharing: Option<Sharing>,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self::new()
    }
}

pub(crate) use crate::striped::BUCKETS;

// The most calls `min` and `window_calls` may ask for (a breaker that needs
// more calls than that to judge a dependency reacts after it has sent them
// all), the most probes, and the floors of the window and the timeouts: one
// definition, shared with the attributes' checks.
use resilience_rules::duration::display;
use resilience_rules::limits::{
    MAX_CALLS, MAX_PROBES, MIN_BREAKER_TIMEOUT, MIN_SYNC_INTERVAL, MIN_WINDOW,
};
use resilience_rules::presets::{self, BreakerPreset};

impl BreakerConfig {
    /// The [guide's](crate::guide#circuit-breaker) defaults: min 20, ratio 0.5, window 60 s, cooldown 30 s,
    /// 1 half-open probe.
    pub const fn new() -> Self {
        Self::of(&presets::BREAKER)
    }

    /// A preset's settings: the one place its values become a config.
    const fn of(preset: &BreakerPreset) -> Self {
        Self {
            min_requests: preset.min_requests,
            failure_ratio: preset.failure_ratio,
            window: Window::Time(preset.window),
            cooldown: preset.cooldown,
            half_open: preset.half_open,
            slow_call: None,
            probe_timeout: preset.probe_timeout,
            call_timeout: preset.call_timeout,
            sharing: None,
        }
    }

    /// A critical dependency (user, auth): trips sooner, at 30 % failures
    /// out of at least 10 calls.
    pub const fn critical() -> Self {
        Self::of(&presets::CRITICAL)
    }

    /// A dependency the service can live without (thumbnails): trips at
    /// 70 % failures out of at least 30 calls.
    pub const fn relaxed() -> Self {
        Self::of(&presets::RELAXED)
    }

    /// The least number of calls in the window before the breaker may trip
    /// (`min`): five failures out of five calls say little.
    pub const fn with_min_requests(mut self, min_requests: u32) -> Self {
        self.min_requests = min_requests;
        self
    }

    /// The share of failed calls, in `(0, 1]`, that trips the breaker
    /// (`ratio`).
    pub const fn with_failure_ratio(mut self, failure_ratio: f64) -> Self {
        self.failure_ratio = failure_ratio;
        self
    }

    /// A sliding time window of `window` (`window`), made of ten buckets.
    pub const fn with_window(mut self, window: Duration) -> Self {
        self.window = Window::Time(window);
        self
    }

    /// A sliding window of the last `calls` calls (`window_calls`) instead
    /// of a time window.
    pub const fn with_count_window(mut self, calls: u32) -> Self {
        self.window = Window::Count(calls);
        self
    }

    /// How long the breaker stays open before it probes (`cooldown`).
    pub const fn with_cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// How many probes half-open admits at once, and how many must succeed
    /// in a row to close again (`half_open`).
    pub const fn with_half_open(mut self, probes: u32) -> Self {
        self.half_open = probes;
        self
    }

    /// How long a half-open probe may run before it is cut and counted as
    /// a failure (`probe_timeout`), so that a probe that hangs re-opens the
    /// breaker instead of holding it half-open.
    ///
    /// It applies to [`CircuitBreaker::call`](super::CircuitBreaker::call)
    /// (and so to `#[circuit_breaker]` without `#[retry]`); with `#[retry]`
    /// inside, the chain's `max_elapsed` bounds the probe as it bounds
    /// every call. The default, 5 s, is the retry budget [the guide](crate::guide#deadlines-and-budgets) gives one
    /// downstream call.
    pub const fn with_probe_timeout(mut self, timeout: Duration) -> Self {
        self.probe_timeout = timeout;
        self
    }

    /// How long a call through [`CircuitBreaker::call`](super::CircuitBreaker::call)
    /// may run before it is cut, handed [`Error::AttemptTimeout`](crate::Error::AttemptTimeout)
    /// and counted as a failure (`call_timeout`): a dependency that hangs
    /// for good must open the breaker and free its caller, even where no
    /// deadline is in scope.
    ///
    /// It applies to `#[circuit_breaker]` without `#[retry]` too; with
    /// `#[retry]` inside, the chain's `max_elapsed` bounds the call
    /// instead. Around a retry chain of your own, make it longer than the
    /// chain's `max_elapsed`. The default, 30 s, is the handler deadline of
    /// [the guide](crate::guide#deadlines-and-budgets): no downstream call
    /// is worth waiting for longer than the request that needs it.
    ///
    /// ```
    /// use resilience::breaker::BreakerConfig;
    /// use std::time::Duration;
    ///
    /// let config = BreakerConfig::new().with_call_timeout(Duration::from_secs(2));
    /// assert_eq!(config.call_timeout(), Duration::from_secs(2));
    /// assert_eq!(BreakerConfig::new().call_timeout(), Duration::from_secs(30));
    /// ```
    pub const fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Counts calls taking `threshold` or longer as slow, and trips when
    /// slow calls reach `ratio` of the window (`slow_call`, `slow_ratio`).
    pub const fn with_slow_call(mut self, threshold: Duration, ratio: f64) -> Self {
        self.slow_call = Some(SlowCall { threshold, ratio });
        self
    }

    /// Shares the breaker with the service's other replicas (`shared`,
    /// `sync_interval`): the fleet trips on its total counts and sends
    /// `half_open` probes in all; see [`Sharing`]. Needs a time window and
    /// the `breaker-redis` cargo feature.
    pub const fn with_sharing(mut self, sharing: Sharing) -> Self {
        self.sharing = Some(sharing);
        self
    }

    /// Keeps the breaker to this process.
    pub const fn without_sharing(mut self) -> Self {
        self.sharing = None;
        self
    }

    /// How the breaker is shared with other replicas, if it is.
    pub const fn sharing(&self) -> Option<Sharing> {
        self.sharing
    }

    /// Removes the slow-call rule.
    pub const fn without_slow_call(mut self) -> Self {
        self.slow_call = None;
        self
    }

    /// The least number of calls in the window before the breaker may trip.
    pub const fn min_requests(&self) -> u32 {
        self.min_requests
    }

    /// The share of failures that trips the breaker.
    pub const fn failure_ratio(&self) -> f64 {
        self.failure_ratio
    }

    /// The sliding window.
    pub const fn window(&self) -> Window {
        self.window
    }

    /// How long the breaker stays open.
    pub const fn cooldown(&self) -> Duration {
        self.cooldown
    }

    /// Concurrent probes in half-open, and successes needed to close.
    pub const fn half_open(&self) -> u32 {
        self.half_open
    }

    /// The slow-call rule, if any.
    pub const fn slow_call(&self) -> Option<SlowCall> {
        self.slow_call
    }

    /// How long a half-open probe may run.
    pub const fn probe_timeout(&self) -> Duration {
        self.probe_timeout
    }

    /// How long a call through [`CircuitBreaker::call`](super::CircuitBreaker::call)
    /// may run.
    pub const fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// Checks every value; the error names the field (as written in the
    /// attribute and the config file) and the value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        const WHAT: &str = "circuit breaker";
        let ratio_ok = |r: f64| r > 0.0 && r <= 1.0;
        if self.min_requests == 0 {
            return Err(ConfigError::new(
                WHAT,
                "min",
                0,
                format!(
                    "at least one call is needed before the breaker may trip; the default is {}",
                    presets::BREAKER.min_requests
                ),
            ));
        }
        if self.min_requests > MAX_CALLS {
            return Err(ConfigError::new(
                WHAT,
                "min",
                self.min_requests,
                format!(
                    "the limit is {MAX_CALLS} calls: a breaker that needs more to judge a dependency reacts only after it has sent them all; the default is {}",
                    presets::BREAKER.min_requests
                ),
            ));
        }
        if !ratio_ok(self.failure_ratio) {
            return Err(ConfigError::new(
                WHAT,
                "ratio",
                self.failure_ratio,
                "the failure ratio is a fraction in (0, 1], e.g. 0.5",
            ));
        }
        match self.window {
            Window::Time(window) if window < MIN_WINDOW => {
                return Err(ConfigError::new(
                    WHAT,
                    "window",
                    format!("{window:?}"),
                    format!(
                        "a time window is at least {} (ten buckets of {}, the timer's resolution); the default is {}",
                        display(MIN_WINDOW),
                        display(MIN_WINDOW / 10),
                        display(presets::BREAKER.window)
                    ),
                ));
            }
            Window::Count(calls) if calls > MAX_CALLS => {
                return Err(ConfigError::new(
                    WHAT,
                    "window_calls",
                    calls,
                    format!(
                        "the limit is {MAX_CALLS} calls: a window that long remembers failures long after the dependency recovered"
                    ),
                ));
            }
            Window::Count(calls) if calls < self.min_requests => {
                return Err(ConfigError::new(
                    WHAT,
                    "window_calls",
                    calls,
                    format!(
                        "a window of fewer calls than `min = {}` can never trip the breaker",
                        self.min_requests
                    ),
                ));
            }
            _ => {}
        }
        if self.cooldown < MIN_BREAKER_TIMEOUT {
            return Err(ConfigError::new(
                WHAT,
                "cooldown",
                format!("{:?}", self.cooldown),
                format!(
                    "an open breaker needs a cooldown of at least {} before it probes; the default is {}",
                    display(MIN_BREAKER_TIMEOUT),
                    display(presets::BREAKER.cooldown)
                ),
            ));
        }
        if self.probe_timeout < MIN_BREAKER_TIMEOUT {
            return Err(ConfigError::new(
                WHAT,
                "probe_timeout",
                format!("{:?}", self.probe_timeout),
                format!(
                    "a probe needs at least {} to answer; the default is {}",
                    display(MIN_BREAKER_TIMEOUT),
                    display(presets::BREAKER.probe_timeout)
                ),
            ));
        }
        if self.call_timeout < MIN_BREAKER_TIMEOUT {
            return Err(ConfigError::new(
                WHAT,
                "call_timeout",
                format!("{:?}", self.call_timeout),
                format!(
                    "a call needs at least {} to answer; the default is {}",
                    display(MIN_BREAKER_TIMEOUT),
                    display(presets::BREAKER.call_timeout)
                ),
            ));
        }
        if self.half_open == 0 {
            return Err(ConfigError::new(
                WHAT,
                "half_open",
                0,
                "half-open needs at least one probe, or the breaker could never close again",
            ));
        }
        if self.half_open > MAX_PROBES {
            // The probe counter is 16 bits: more probes could never all
            // succeed and the breaker would stay half-open for good.
            return Err(ConfigError::new(
                WHAT,
                "half_open",
                self.half_open,
                format!(
                    "the limit is {MAX_PROBES} probes (what the probe counter holds); the default is {}",
                    presets::BREAKER.half_open
                ),
            ));
        }
        if let Some(slow) = self.slow_call {
            if slow.threshold.is_zero() {
                return Err(ConfigError::new(
                    WHAT,
                    "slow_call",
                    "0s",
                    "every call would be slow; give the duration from which a call is slow, e.g. \"2s\"",
                ));
            }
            if !ratio_ok(slow.ratio) {
                return Err(ConfigError::new(
                    WHAT,
                    "slow_ratio",
                    slow.ratio,
                    "the slow-call ratio is a fraction in (0, 1], e.g. 0.8",
                ));
            }
        }
        if let Some(sharing) = self.sharing {
            self.validate_sharing(sharing)?;
        }
        Ok(())
    }

    fn validate_sharing(&self, sharing: Sharing) -> Result<(), ConfigError> {
        const WHAT: &str = "circuit breaker";
        let url = sharing.url();
        if !cfg!(feature = "breaker-redis") {
            return Err(ConfigError::new(
                WHAT,
                "shared",
                format!("{url:?}"),
                "sharing a breaker through Redis needs the `breaker-redis` cargo feature of `resilience`; enable it, or remove `shared`",
            ));
        }
        #[cfg(feature = "breaker-redis")]
        if let Err(err) = redis::Client::open(url) {
            return Err(ConfigError::new(
                WHAT,
                "shared",
                format!("{url:?}"),
                format!(
                    "not a Redis URL the client accepts ({err}); write it as \"redis://host:port/db\", e.g. \"redis://127.0.0.1:6379/\""
                ),
            ));
        }
        if let Window::Count(calls) = self.window {
            return Err(ConfigError::new(
                WHAT,
                "window_calls",
                calls,
                "a shared breaker needs a time window: replicas add up the calls of the same seconds, and the last n calls of five processes are no one window; use `window = \"60s\"`",
            ));
        }
        let interval = sharing.sync_interval();
        if interval < MIN_SYNC_INTERVAL {
            return Err(ConfigError::new(
                WHAT,
                "sync_interval",
                format!("{interval:?}"),
                format!(
                    "a sync costs a Redis round trip per replica; sync at least {} apart (the default is {})",
                    display(MIN_SYNC_INTERVAL),
                    display(Sharing::DEFAULT_SYNC_INTERVAL)
                ),
            ));
        }
        if interval > self.cooldown {
            return Err(ConfigError::new(
                WHAT,
                "sync_interval",
                format!("{interval:?}"),
                format!(
                    "a sync interval longer than the cooldown ({:?}) lets replicas miss a whole opening of the fleet; sync more often (the default is {})",
                    self.cooldown,
                    display(Sharing::DEFAULT_SYNC_INTERVAL)
                ),
            ));
        }
        Ok(())
    }

    /// The width of one bucket: in nanoseconds for a time window, in calls
    /// for a count window.
    pub(crate) fn bucket_width(&self) -> u64 {
        match self.window {
            Window::Time(window) => {
                (window.as_nanos() / BUCKETS as u128).clamp(1, u64::MAX as u128) as u64
            }
            // A count window has no buckets (see `window::LastCalls`).
            Window::Count(calls) => u64::from(calls).max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_the_spec() {
        let d = BreakerConfig::new();
        assert_eq!(d.min_requests(), 20);
        assert_eq!(d.failure_ratio(), 0.5);
        assert_eq!(d.window(), Window::Time(Duration::from_secs(60)));
        assert_eq!(d.cooldown(), Duration::from_secs(30));
        assert_eq!(d.half_open(), 1);
        assert_eq!(d.probe_timeout(), Duration::from_secs(5));
        assert_eq!(d.slow_call(), None);
        assert_eq!(
            (
                BreakerConfig::critical().failure_ratio(),
                BreakerConfig::critical().min_requests()
            ),
            (0.3, 10)
        );
        assert_eq!(
            (
                BreakerConfig::relaxed().failure_ratio(),
                BreakerConfig::relaxed().min_requests()
            ),
            (0.7, 30)
        );
        for preset in [
            BreakerConfig::new(),
            BreakerConfig::critical(),
            BreakerConfig::relaxed(),
        ] {
            preset.validate().unwrap();
        }
        assert_eq!(BreakerConfig::new().bucket_width(), 6_000_000_000);
        assert_eq!(
            BreakerConfig::new().with_count_window(25).bucket_width(),
            25
        );
    }

    #[test]
    fn bad_values_are_named() {
        let cases = [
            (BreakerConfig::new().with_min_requests(0), "min", "0"),
            (BreakerConfig::new().with_failure_ratio(0.0), "ratio", "0"),
            (BreakerConfig::new().with_failure_ratio(1.5), "ratio", "1.5"),
            (
                BreakerConfig::new().with_failure_ratio(f64::NAN),
                "ratio",
                "NaN",
            ),
            (
                BreakerConfig::new().with_window(Duration::from_millis(5)),
                "window",
                "5ms",
            ),
            (
                BreakerConfig::new().with_count_window(10),
                "window_calls",
                "10",
            ),
            (
                BreakerConfig::new().with_cooldown(Duration::ZERO),
                "cooldown",
                "0ns",
            ),
            (BreakerConfig::new().with_half_open(0), "half_open", "0"),
            (
                BreakerConfig::new().with_probe_timeout(Duration::ZERO),
                "probe_timeout",
                "0ns",
            ),
            (
                BreakerConfig::new().with_call_timeout(Duration::ZERO),
                "call_timeout",
                "0ns",
            ),
            (
                BreakerConfig::new().with_slow_call(Duration::ZERO, 0.5),
                "slow_call",
                "0s",
            ),
            (
                BreakerConfig::new().with_slow_call(Duration::from_secs(1), 2.0),
                "slow_ratio",
                "2",
            ),
        ];
        for (config, field, value) in cases {
            let err = config.validate().unwrap_err();
            assert_eq!((err.field(), err.value()), (field, value), "{err}");
            assert_eq!(err.subject(), "circuit breaker");
        }
    }

    /// Each refusal states the bound it broke and the default to go back
    /// to, as the guide gives them (20 calls, a 60 s window, a 30 s
    /// cooldown, a 5 s probe, one probe) and as the attributes word them
    /// (a duration in the configuration file's words: 60 s is `1m`).
    #[test]
    fn refusals_state_the_bound_and_the_guides_default() {
        let ms = Duration::from_millis;
        let cases = [
            (
                BreakerConfig::new().with_min_requests(0),
                "the default is 20",
            ),
            (
                BreakerConfig::new().with_min_requests(1_000_001),
                "the limit is 1000000 calls",
            ),
            (
                BreakerConfig::new().with_window(ms(9)),
                "at least 10ms (ten buckets of 1ms, the timer's resolution); the default is 1m",
            ),
            (
                BreakerConfig::new().with_count_window(1_000_001),
                "the limit is 1000000 calls",
            ),
            (
                BreakerConfig::new().with_cooldown(Duration::ZERO),
                "at least 1ms before it probes; the default is 30s",
            ),
            (
                BreakerConfig::new().with_probe_timeout(Duration::ZERO),
                "at least 1ms to answer; the default is 5s",
            ),
            (
                BreakerConfig::new().with_call_timeout(Duration::ZERO),
                "at least 1ms to answer; the default is 30s",
            ),
            (
                BreakerConfig::new().with_half_open(70_000),
                "the limit is 65535 probes (what the probe counter holds); the default is 1",
            ),
        ];
        for (config, reason) in cases {
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains(reason), "{err:?} should say {reason:?}");
        }
    }

    #[test]
    fn bad_sharing_is_named() {
        let shared = |interval: u64| {
            Sharing::redis("redis://127.0.0.1:6379/")
                .with_sync_interval(Duration::from_millis(interval))
        };
        let mut cases = vec![
            (
                BreakerConfig::new().with_sharing(shared(5)),
                "sync_interval",
                "5ms",
            ),
            (
                BreakerConfig::new()
                    .with_cooldown(Duration::from_secs(1))
                    .with_sharing(shared(2000)),
                "sync_interval",
                "2s",
            ),
            (
                BreakerConfig::new()
                    .with_count_window(100)
                    .with_sharing(shared(1000)),
                "window_calls",
                "100",
            ),
            (
                BreakerConfig::new().with_sharing(Sharing::redis("http://cache:6379")),
                "shared",
                "\"http://cache:6379\"",
            ),
        ];
        if !cfg!(feature = "breaker-redis") {
            cases.truncate(0);
            cases.push((
                BreakerConfig::new().with_sharing(shared(1000)),
                "shared",
                "\"redis://127.0.0.1:6379/\"",
            ));
        }
        for (config, field, value) in cases {
            let err = config.validate().unwrap_err();
            assert_eq!((err.field(), err.value()), (field, value), "{err}");
        }
        let ok = BreakerConfig::new().with_sharing(shared(1000));
        assert_eq!(ok.validate().is_ok(), cfg!(feature = "breaker-redis"));
        assert_eq!(
            Sharing::redis("redis://x/").sync_interval(),
            Duration::from_secs(1)
        );
    }
}
