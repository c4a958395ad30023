//! A limiter's configuration, as the registry and its file give it.

use std::time::Duration;

use super::limiter::RatePart;
use super::{
    AdaptiveLimit, Bulkhead, Limiter, Rate, RateClock, RateLimit, Throttle, ThrottleConfig,
    VegasConfig,
};
use crate::error::ConfigError;

/// What a [`Limiter`] is made of: at most one of a bulkhead and an adaptive
/// limit, an optional rate limit and an optional throttle in front. The registry builds one per
/// name from it ([`Registry::limiter`](crate::registry::Registry::limiter)),
/// the `[limits.<name>]` section of its file laid over the code's.
///
/// ```
/// use resilience::limit::{LimitConfig, Rate, ThrottleConfig, VegasConfig};
/// use std::time::Duration;
///
/// let limiter = LimitConfig::adaptive(VegasConfig::new())
///     .with_throttle(ThrottleConfig::new())
///     .build("users")?;
/// assert_eq!(limiter.as_adaptive().unwrap().limit(), 20);
/// assert!(limiter.as_throttle().is_some());
/// assert!(LimitConfig::bulkhead(0).build("users").is_err());
///
/// // A partner's quota: 25 calls a second, 5 at once, waiting up to 50 ms.
/// let payments = LimitConfig::rate(Rate::per_second(25))
///     .with_burst(5)
///     .with_max_wait(Duration::from_millis(50))
///     .build("payments")?;
/// assert_eq!(payments.as_rate().unwrap().burst(), 5);
/// # Ok::<(), resilience::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct LimitConfig {
    slots: SlotsConfig,
    rate: Option<RateConfig>,
    throttle: Option<ThrottleConfig>,
}

#[derive(Debug, Clone, Copy)]
struct RateConfig {
    rate: Rate,
    /// `None`: the rate's count.
    burst: Option<u32>,
    max_wait: Duration,
    /// The Redis URL the quota is shared through.
    shared: Option<&'static str>,
    clock: RateClock,
}

#[derive(Debug, Clone, Copy)]
enum SlotsConfig {
    None,
    Bulkhead { max: u32, max_wait: Duration },
    Adaptive(VegasConfig),
}

impl LimitConfig {
    /// A bulkhead of `max` calls in flight, shedding at once.
    pub const fn bulkhead(max: u32) -> Self {
        Self {
            slots: SlotsConfig::Bulkhead {
                max,
                max_wait: Duration::ZERO,
            },
            rate: None,
            throttle: None,
        }
    }

    /// An adaptive limit (Vegas) with `config`.
    pub const fn adaptive(config: VegasConfig) -> Self {
        Self {
            slots: SlotsConfig::Adaptive(config),
            rate: None,
            throttle: None,
        }
    }

    /// A throttle alone, with `config`.
    pub const fn throttle(config: ThrottleConfig) -> Self {
        Self {
            slots: SlotsConfig::None,
            rate: None,
            throttle: Some(config),
        }
    }

    /// A rate limit alone: at most `rate` calls, a burst of the rate's
    /// count at once ([`RateLimit`]).
    pub const fn rate(rate: Rate) -> Self {
        Self {
            slots: SlotsConfig::None,
            rate: None,
            throttle: None,
        }
        .with_rate(rate)
    }

    /// The same, with a rate limit of `rate` before the slots (replacing
    /// any, its burst and wait with it).
    pub const fn with_rate(mut self, rate: Rate) -> Self {
        self.rate = Some(RateConfig {
            rate,
            burst: None,
            max_wait: Duration::ZERO,
            shared: None,
            clock: RateClock::Tokio,
        });
        self
    }

    /// The same, whose rate limit admits `burst` calls at once (no effect
    /// without a rate limit).
    pub const fn with_burst(mut self, burst: u32) -> Self {
        if let Some(rate) = &mut self.rate {
            rate.burst = Some(burst);
        }
        self
    }

    /// The same, whose rate limit is one quota shared by every replica
    /// through the Redis at `url` (`shared = "redis://host:port/"`, a
    /// `FleetRateLimit`, feature `limit-redis`); no
    /// effect without a rate limit.
    pub const fn with_shared(mut self, url: &'static str) -> Self {
        if let Some(rate) = &mut self.rate {
            rate.shared = Some(url);
        }
        self
    }

    /// The same, whose rate limit reads `clock` ([`RateClock`]; no effect
    /// without a rate limit). A quota shared through Redis keeps tokio's
    /// clock: [`validate`](Self::validate) refuses the counter beside
    /// [`with_shared`](Self::with_shared).
    pub const fn with_clock(mut self, clock: RateClock) -> Self {
        if let Some(rate) = &mut self.rate {
            rate.clock = clock;
        }
        self
    }

    /// The clock the rate limit reads, if there is one.
    pub const fn clock(&self) -> Option<RateClock> {
        match self.rate {
            Some(rate) => Some(rate.clock),
            None => None,
        }
    }

    /// The Redis URL the rate limit's quota is shared through, if any.
    pub const fn shared(&self) -> Option<&'static str> {
        match self.rate {
            Some(RateConfig {
                shared: Some(url), ..
            }) => Some(url),
            _ => None,
        }
    }

    /// The same, with a throttle in front.
    pub const fn with_throttle(mut self, config: ThrottleConfig) -> Self {
        self.throttle = Some(config);
        self
    }

    /// The same, whose bulkhead waits at most `max_wait` for a slot and
    /// whose rate limit at most `max_wait` for a call's place in its
    /// schedule (no effect on an adaptive limit, which never waits).
    pub const fn with_max_wait(mut self, max_wait: Duration) -> Self {
        if let SlotsConfig::Bulkhead { max, .. } = self.slots {
            self.slots = SlotsConfig::Bulkhead { max, max_wait };
        }
        if let Some(rate) = &mut self.rate {
            rate.max_wait = max_wait;
        }
        self
    }

    /// The rate limit's rate, if it has one.
    pub const fn rate_limit(&self) -> Option<Rate> {
        match self.rate {
            Some(rate) => Some(rate.rate),
            None => None,
        }
    }

    /// The bulkhead's `max`, if this is a bulkhead.
    pub const fn max_concurrent(&self) -> Option<u32> {
        match self.slots {
            SlotsConfig::Bulkhead { max, .. } => Some(max),
            _ => None,
        }
    }

    /// The adaptive limit's settings, if this is one.
    pub const fn vegas(&self) -> Option<VegasConfig> {
        match self.slots {
            SlotsConfig::Adaptive(config) => Some(config),
            _ => None,
        }
    }

    /// The throttle's settings, if it has one.
    pub const fn throttle_config(&self) -> Option<ThrottleConfig> {
        self.throttle
    }

    /// Checks every part: a bulkhead of at least 1, the Vegas and the
    /// throttle settings, a rate and a burst from 1 to 1,000,000, and a
    /// quota shared through Redis only with the `limit-redis` feature.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut errors = Vec::new();
        if let Some(rate) = self.rate {
            errors.extend(rate.rate.validate().err());
            if let Some(burst) = rate.burst
                && let Err(reason) = resilience_rules::rate::burst(burst)
            {
                errors.push(ConfigError::new("rate limit", "burst", burst, reason));
            }
            if let (Some(url), false) = (rate.shared, cfg!(feature = "limit-redis")) {
                errors.push(ConfigError::new(
                    "rate limit",
                    "shared",
                    format!("{url:?}"),
                    "a quota shared through Redis needs the `limit-redis` cargo feature",
                ));
            }
            errors.extend(rate.shared_clock().err());
        }
        match self.slots {
            SlotsConfig::None => {}
            SlotsConfig::Bulkhead { max: 0, .. } => errors.push(ConfigError::new(
                "bulkhead",
                "max_concurrent",
                0,
                "a bulkhead of 0 would shed every call; use at least 1",
            )),
            SlotsConfig::Bulkhead { .. } => {}
            SlotsConfig::Adaptive(config) => errors.extend(config.validate().err()),
        }
        if let Some(throttle) = self.throttle {
            errors.extend(throttle.validate().err());
        }
        ConfigError::combine(errors).map_or(Ok(()), Err)
    }

    /// The limiter `name` (the `target` of its metrics), after checking
    /// every part.
    pub fn build(&self, name: &'static str) -> Result<Limiter, ConfigError> {
        self.build_in(crate::telemetry::UNKNOWN_SERVICE, name)
    }

    pub(crate) fn build_in(
        &self,
        service: &'static str,
        name: &'static str,
    ) -> Result<Limiter, ConfigError> {
        let mut errors = Vec::new();
        let throttle = match self.throttle.map(|c| Throttle::new_in(service, name, c)) {
            Some(Ok(throttle)) => Some(throttle),
            Some(Err(err)) => {
                errors.push(err);
                None
            }
            None => None,
        };
        let slots = match self.slots {
            SlotsConfig::None => None,
            SlotsConfig::Bulkhead { max, max_wait } => match Bulkhead::new_in(service, name, max) {
                Ok(bulkhead) => Some(Limiter::bulkhead(bulkhead.with_max_wait(max_wait))),
                Err(err) => {
                    errors.push(err);
                    None
                }
            },
            SlotsConfig::Adaptive(config) => match AdaptiveLimit::new_in(service, name, config) {
                Ok(limit) => Some(Limiter::adaptive(limit)),
                Err(err) => {
                    errors.push(err);
                    None
                }
            },
        };
        let rate = match self.rate.map(|c| c.build(service, name)) {
            Some(Ok(rate)) => Some(rate),
            Some(Err(err)) => {
                errors.push(err);
                None
            }
            None => None,
        };
        if let Some(err) = ConfigError::combine(errors) {
            return Err(err);
        }
        let limiter = match (slots, rate) {
            (Some(slots), Some(rate)) => slots.with_rate_part(rate),
            (Some(slots), None) => slots,
            (None, Some(rate)) => Limiter::rate_part(rate),
            (None, None) => match throttle {
                Some(throttle) => return Ok(Limiter::throttle(throttle)),
                // Every constructor sets a part.
                None => unreachable!("a limit config without a part"),
            },
        };
        Ok(match throttle {
            Some(throttle) => limiter.with_throttle(throttle),
            None => limiter,
        })
    }
}

impl RateConfig {
    /// Refuses the CPU's counter beside a shared quota, whose leases are
    /// timed on tokio's clock.
    fn shared_clock(&self) -> Result<(), ConfigError> {
        if self.shared.is_none() || self.clock == RateClock::Tokio {
            return Ok(());
        }
        Err(ConfigError::new(
            "rate limit",
            "clock",
            format!("{:?}", self.clock.as_str()),
            "a quota shared through Redis times its leases on tokio's clock; keep `clock = \"tokio\"` beside `shared`",
        ))
    }

    fn build(self, service: &'static str, name: &'static str) -> Result<RatePart, ConfigError> {
        self.shared_clock()
            .map_err(|err| err.with_subject(format!("rate limit `{name}`")))?;
        if let Some(url) = self.shared {
            return self.build_fleet(service, name, url);
        }
        let limit = RateLimit::new_in(service, name, self.rate)?;
        let limit = match self.burst {
            Some(burst) => limit.with_burst(burst)?,
            None => limit,
        };
        Ok(RatePart::Local(
            limit.with_clock(self.clock).with_max_wait(self.max_wait),
        ))
    }

    #[cfg(feature = "limit-redis")]
    fn build_fleet(
        self,
        service: &'static str,
        name: &'static str,
        url: &'static str,
    ) -> Result<RatePart, ConfigError> {
        let limit = super::FleetRateLimit::new_in(service, name, self.rate, url)?;
        let limit = match self.burst {
            Some(burst) => limit.with_burst(burst)?,
            None => limit,
        };
        Ok(RatePart::Fleet(limit.with_max_wait(self.max_wait)))
    }

    #[cfg(not(feature = "limit-redis"))]
    fn build_fleet(
        self,
        _service: &'static str,
        name: &'static str,
        url: &'static str,
    ) -> Result<RatePart, ConfigError> {
        Err(ConfigError::new(
            format!("rate limit `{name}`"),
            "shared",
            format!("{url:?}"),
            "a quota shared through Redis needs the `limit-redis` cargo feature",
        ))
    }
}

#[cfg(test)]
mod tests {
    #[cfg(feature = "config-file")]
    use std::time::Duration;

    use crate::limit::LimitConfig;
    #[cfg(feature = "config-file")]
    use crate::limit::VegasConfig;
    use crate::registry::Registry;

    #[cfg(feature = "config-file")]
    fn registry(toml: &str) -> Result<Registry, crate::ConfigError> {
        Registry::builder().config_str(toml, "limits.toml")?.build()
    }

    #[cfg(feature = "config-file")]
    #[test]
    fn a_file_section_of_each_kind() {
        let registry = registry(
            "[limits.stock]\nmax_concurrent = 8\nmax_wait = \"20ms\"\n\
             [limits.users]\nadaptive = true\ninitial_limit = 10\nmax_limit = 50\nthrottle = true\nk = 1.5\n\
             [limits.search]\nthrottle = true\nwindow = \"60s\"\n",
        )
        .unwrap();
        let stock = registry.limiter("stock").unwrap();
        let bulkhead = stock.as_bulkhead().unwrap();
        assert_eq!(
            (bulkhead.max(), bulkhead.max_wait()),
            (8, Duration::from_millis(20))
        );
        assert!(stock.as_throttle().is_none());
        let users = registry.limiter("users").unwrap();
        assert_eq!(users.as_adaptive().unwrap().limit(), 10);
        assert!(users.as_throttle().is_some());
        let search = registry.limiter("search").unwrap();
        assert!(search.as_bulkhead().is_none() && search.as_adaptive().is_none());
        assert!(search.as_throttle().is_some());
        assert!(registry.limiter("orders").is_none());
    }

    #[cfg(feature = "config-file")]
    #[tokio::test(start_paused = true)]
    async fn a_rate_limit_from_the_file_alone_or_before_the_slots() {
        use crate::limit::Rate;

        let registry = registry(
            "[limits.partner]\nrate = \"100/s\"\nburst = 10\nmax_wait = \"20ms\"\n\
             [limits.search]\nrate = \"6000/m\"\nmax_concurrent = 4\nthrottle = true\n",
        )
        .unwrap();
        let partner = registry.limiter("partner").unwrap();
        let rate = partner.as_rate().unwrap();
        assert_eq!(
            (rate.rate(), rate.burst(), rate.max_wait()),
            (Rate::per_second(100), 10, Duration::from_millis(20))
        );
        assert!(partner.as_bulkhead().is_none() && partner.as_throttle().is_none());
        let search = registry.limiter("search").unwrap();
        assert_eq!(
            search.as_rate().unwrap().burst(),
            6000,
            "the rate's count by default"
        );
        assert_eq!(search.as_bulkhead().unwrap().max(), 4);
        assert!(search.as_throttle().is_some());
    }

    #[cfg(feature = "config-file")]
    #[test]
    fn rate_settings_that_make_no_sense_are_refused_with_the_fix() {
        let cases = [
            ("rate = \"100 per second\"", "rate", "`<calls>/<period>`"),
            ("rate = \"0/s\"", "rate", "at least 1"),
            ("rate = \"100/s\"\nburst = 0", "burst", "at least 1"),
            ("burst = 10", "burst", "add `rate ="),
            (
                "adaptive = true\nmax_wait = \"10ms\"",
                "max_wait",
                "rate limit",
            ),
        ];
        for (section, field, reason) in cases {
            let err = registry(&format!("[limits.partner]\n{section}\n")).unwrap_err();
            assert_eq!(err.field(), field, "{section}: {err}");
            assert!(err.reason().contains(reason), "{section}: {err}");
            assert!(
                err.subject().contains("[limits.partner]"),
                "{section}: {err}"
            );
        }
    }

    /// `shared = "redis://…"` makes the rate limit one quota of the fleet;
    /// a value that is no Redis URL, or `shared` without a rate, is
    /// refused naming it.
    #[cfg(feature = "config-file")]
    #[tokio::test(start_paused = true)]
    async fn a_shared_rate_limit_from_the_file() {
        let section = "[limits.partner]\nrate = \"1000/s\"\nburst = 500\nshared = \"redis://127.0.0.1:6379/\"\n";
        #[cfg(feature = "limit-redis")]
        {
            let registry = registry(section).unwrap();
            let partner = registry.limiter("partner").unwrap();
            assert!(partner.as_rate().is_none());
            let fleet = partner.as_fleet_rate().unwrap();
            assert_eq!(
                (fleet.burst(), fleet.url()),
                (500, "redis://127.0.0.1:6379/")
            );
        }
        #[cfg(not(feature = "limit-redis"))]
        {
            let err = registry(section).unwrap_err();
            assert_eq!(err.field(), "shared", "{err}");
            assert!(err.reason().contains("limit-redis"), "{err}");
        }
        let cases = [
            (
                "rate = \"1000/s\"\nshared = \"http://cache:6379\"",
                "\"http://cache:6379\"",
                "redis://",
            ),
            (
                "max_concurrent = 4\nshared = \"redis://x/\"",
                "\"redis://x/\"",
                "add `rate =",
            ),
            ("shared = true", "", "invalid type"),
        ];
        for (body, value, reason) in cases {
            let err = registry(&format!("[limits.partner]\n{body}\n")).unwrap_err();
            assert!(err.to_string().contains(reason), "{body}: {err}");
            if !value.is_empty() {
                assert_eq!(err.field(), "shared", "{body}: {err}");
                assert_eq!(err.value(), value, "{body}: {err}");
            }
        }
    }

    /// `clock = "tsc"` puts a local rate limit on the CPU's counter; a
    /// clock that is neither, a clock without a rate, and the counter
    /// beside a shared quota are refused naming the value.
    #[cfg(feature = "config-file")]
    #[test]
    fn a_rate_limits_clock_from_the_file() {
        use crate::limit::RateClock;

        let section = "[limits.partner]\nrate = \"100/s\"\nclock = \"tsc\"\n";
        #[cfg(feature = "limit-tsc")]
        {
            let registry = registry(section).unwrap();
            let partner = registry.limiter("partner").unwrap();
            assert_eq!(partner.as_rate().unwrap().clock(), RateClock::Tsc);
        }
        #[cfg(not(feature = "limit-tsc"))]
        {
            let err = registry(section).unwrap_err();
            assert_eq!(err.field(), "clock", "{err}");
            assert!(err.reason().contains("limit-tsc"), "{err}");
        }
        let registry = registry("[limits.partner]\nrate = \"100/s\"\n").unwrap();
        let partner = registry.limiter("partner").unwrap();
        assert_eq!(partner.as_rate().unwrap().clock(), RateClock::Tokio);
        let mut cases = vec![
            (
                "rate = \"100/s\"\nclock = \"wall\"",
                "\"wall\"",
                "\"tokio\"",
            ),
            (
                "max_concurrent = 4\nclock = \"tokio\"",
                "\"tokio\"",
                "add `rate =",
            ),
        ];
        if cfg!(all(feature = "limit-tsc", feature = "limit-redis")) {
            cases.push((
                "rate = \"100/s\"\nclock = \"tsc\"\nshared = \"redis://127.0.0.1:6379/\"",
                "\"tsc\"",
                "tokio's clock",
            ));
        }
        for (body, value, reason) in cases {
            let err = registry_err(body);
            assert_eq!(
                (err.field(), err.value()),
                ("clock", value),
                "{body}: {err}"
            );
            assert!(err.reason().contains(reason), "{body}: {err}");
        }
    }

    #[cfg(feature = "config-file")]
    fn registry_err(body: &str) -> crate::ConfigError {
        registry(&format!("[limits.partner]\n{body}\n")).unwrap_err()
    }

    #[cfg(feature = "config-file")]
    #[test]
    fn the_file_replaces_the_code() {
        let registry = Registry::builder()
            .limit("stock", LimitConfig::adaptive(VegasConfig::new()))
            .limit("users", LimitConfig::bulkhead(4))
            .config_str("[limits.stock]\nmax_concurrent = 2\n", "limits.toml")
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(
            registry
                .limiter("stock")
                .unwrap()
                .as_bulkhead()
                .unwrap()
                .max(),
            2
        );
        assert_eq!(
            registry
                .limiter("users")
                .unwrap()
                .as_bulkhead()
                .unwrap()
                .max(),
            4
        );
    }

    #[cfg(feature = "config-file")]
    #[test]
    fn sections_that_make_no_sense_are_refused_with_the_fix() {
        let cases = [
            (
                "max_concurrent = 4\nadaptive = true",
                "max_concurrent",
                "exclude each other",
            ),
            ("max_limit = 40", "adaptive", "add `adaptive = true`"),
            (
                "adaptive = true\nmax_wait = \"10ms\"",
                "max_wait",
                "an adaptive limit never waits",
            ),
            (
                "max_concurrent = 4\nk = 3.0",
                "throttle",
                "add `throttle = true`",
            ),
            ("", "max_concurrent", "needs `max_concurrent = N`"),
            ("max_concurrent = 0", "max_concurrent", "at least 1"),
            (
                "adaptive = true\ninitial_limit = 5000",
                "initial_limit",
                "between `min_limit`",
            ),
            ("throttle = true\nk = 0.5", "k", "at least 1"),
            ("max_concurent = 4", "max_concurent", ""),
        ];
        for (section, field, reason) in cases {
            let err = registry(&format!("[limits.stock]\n{section}\n")).unwrap_err();
            assert_eq!(err.field(), field, "{section}: {err}");
            assert!(err.reason().contains(reason), "{section}: {err}");
            assert!(err.subject().contains("[limits.stock]"), "{section}: {err}");
        }
    }

    #[test]
    fn the_code_is_checked_when_the_registry_is_built() {
        let err = Registry::builder()
            .limit("stock", LimitConfig::bulkhead(0))
            .build()
            .unwrap_err();
        assert_eq!(err.subject(), "load limit `stock`");
    }
}
