//! The TOML config file: parsing, checking, and laying it over the code's
//! values (the `config-file` feature).

use std::collections::HashMap;

use serde::Deserialize;

use super::duration::duration;

use crate::breaker::{BreakerConfig, FamilyConfig, Sharing};
use crate::error::ConfigError;
use crate::limit::{LimitConfig, ThrottleConfig, VegasConfig};
use crate::retry::{BudgetConfig, Jitter, MIN_JITTER, PolicyBuilder};
use resilience_rules::limits::MAX_JITTER;

/// A parsed and checked config file.
#[derive(Debug, Default)]
pub(super) struct FileConfig {
    origin: Option<String>,
    service: Option<String>,
    defaults: BreakerSection,
    breakers: HashMap<String, BreakerSection>,
    retry: HashMap<String, RetrySection>,
    budgets: HashMap<String, BudgetSection>,
    limits: HashMap<String, LimitConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    service: Option<String>,
    #[serde(default)]
    defaults: toml::Table,
    // Tables first, each section read on its own after: one bad section
    // must not hide the errors of the others.
    #[serde(default)]
    breakers: toml::Table,
    #[serde(default)]
    retry: toml::Table,
    #[serde(default)]
    budgets: toml::Table,
    #[serde(default)]
    limits: toml::Table,
}

/// The keys of a `[limits.<name>]` section (see `resilience::limit`): a
/// section names its kind and replaces whatever the code configured for
/// that name.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitSection {
    max_concurrent: Option<u32>,
    max_wait: Option<String>,
    adaptive: Option<bool>,
    initial_limit: Option<u32>,
    min_limit: Option<u32>,
    max_limit: Option<u32>,
    throttle: Option<bool>,
    k: Option<f64>,
    window: Option<String>,
    /// `"100/s"`: a rate limit ([`Rate`](crate::limit::Rate)'s grammar).
    rate: Option<String>,
    burst: Option<u32>,
    /// `"redis://host:port/"`: the rate limit's quota is shared by every
    /// replica through this Redis.
    shared: Option<String>,
    /// `"tokio"` or `"tsc"`: the clock a local rate limit reads.
    clock: Option<String>,
}

impl LimitSection {
    fn config(&self) -> Result<LimitConfig, ConfigError> {
        let subject = "load limit";
        let tuned =
            self.initial_limit.is_some() || self.min_limit.is_some() || self.max_limit.is_some();
        let adaptive = self.adaptive == Some(true);
        if tuned && !adaptive {
            return Err(ConfigError::new(
                subject,
                "adaptive",
                self.adaptive.unwrap_or(false),
                "`initial_limit`, `min_limit` and `max_limit` tune an adaptive limit: add `adaptive = true`",
            ));
        }
        let config = match (self.max_concurrent, adaptive) {
            (Some(max), true) => {
                return Err(ConfigError::new(
                    subject,
                    "max_concurrent",
                    max,
                    "a bulkhead (`max_concurrent`) and an adaptive limit (`adaptive = true`) exclude each other: keep one",
                ));
            }
            (Some(max), false) => Some(LimitConfig::bulkhead(max)),
            (None, true) => {
                let mut vegas = VegasConfig::new();
                if let Some(limit) = self.initial_limit {
                    vegas = vegas.with_initial_limit(limit);
                }
                if let Some(limit) = self.min_limit {
                    vegas = vegas.with_min_limit(limit);
                }
                if let Some(limit) = self.max_limit {
                    vegas = vegas.with_max_limit(limit);
                }
                Some(LimitConfig::adaptive(vegas))
            }
            (None, false) => None,
        };
        let rate = match &self.rate {
            Some(text) => Some(text.parse::<crate::limit::Rate>()?),
            None => None,
        };
        if let (Some(burst), None) = (self.burst, rate) {
            return Err(ConfigError::new(
                subject,
                "burst",
                burst,
                "`burst` tunes a rate limit: add `rate = \"<calls>/<period>\"`, e.g. `rate = \"100/s\"`",
            ));
        }
        let config = match (config, rate) {
            (Some(config), Some(rate)) => Some(config.with_rate(rate)),
            (None, Some(rate)) => Some(LimitConfig::rate(rate)),
            (config, None) => config,
        };
        let config = match (config, self.burst) {
            (Some(config), Some(burst)) => Some(config.with_burst(burst)),
            (config, _) => config,
        };
        let config = match (config, &self.shared) {
            (Some(config), Some(url)) if rate.is_some() => {
                if !url.starts_with("redis://")
                    && !url.starts_with("rediss://")
                    && !url.starts_with("unix://")
                {
                    return Err(ConfigError::new(
                        subject,
                        "shared",
                        format!("{url:?}"),
                        "`shared` is the URL of the Redis the quota is shared through: `redis://host:port/`, `rediss://…` or `unix://…`",
                    ));
                }
                // Leaked once per file load: the limit keeps a `&'static str`.
                let url: &'static str = Box::leak(url.clone().into_boxed_str());
                Some(config.with_shared(url))
            }
            (_, Some(url)) => {
                return Err(ConfigError::new(
                    subject,
                    "shared",
                    format!("{url:?}"),
                    "`shared` shares a rate limit's quota through Redis: add `rate = \"<calls>/<period>\"`, e.g. `rate = \"1000/s\"`",
                ));
            }
            (config, None) => config,
        };
        let config = match (config, &self.clock) {
            (Some(config), Some(text)) if rate.is_some() => {
                Some(config.with_clock(text.parse::<crate::limit::RateClock>()?))
            }
            (_, Some(text)) => {
                return Err(ConfigError::new(
                    subject,
                    "clock",
                    format!("{text:?}"),
                    "`clock` is the clock a rate limit reads: add `rate = \"<calls>/<period>\"`, e.g. `rate = \"100/s\"`",
                ));
            }
            (config, None) => config,
        };
        let config = match &self.max_wait {
            Some(text) if self.max_concurrent.is_none() && self.rate.is_none() => {
                return Err(ConfigError::new(
                    subject,
                    "max_wait",
                    format!("{text:?}"),
                    "`max_wait` is how long a call may wait for a bulkhead's slot (`max_concurrent`) or its place in a rate limit (`rate`); an adaptive limit never waits",
                ));
            }
            Some(text) => {
                let wait = duration("max_wait", text)?;
                config.map(|c| c.with_max_wait(wait))
            }
            None => config,
        };
        let throttled = self.throttle == Some(true);
        if (self.k.is_some() || self.window.is_some()) && !throttled {
            return Err(ConfigError::new(
                subject,
                "throttle",
                self.throttle.unwrap_or(false),
                "`k` and `window` tune the client-side throttle: add `throttle = true`",
            ));
        }
        let throttle = if throttled {
            let mut throttle = ThrottleConfig::new();
            if let Some(k) = self.k {
                throttle = throttle.with_k(k);
            }
            if let Some(window) = &self.window {
                throttle = throttle.with_window(duration("window", window)?);
            }
            Some(throttle)
        } else {
            None
        };
        let config = match (config, throttle) {
            (Some(config), Some(throttle)) => config.with_throttle(throttle),
            (Some(config), None) => config,
            (None, Some(throttle)) => LimitConfig::throttle(throttle),
            (None, None) => {
                return Err(ConfigError::new(
                    subject,
                    "max_concurrent",
                    "(none)",
                    "a `[limits.<name>]` section needs `max_concurrent = N` (a bulkhead), `adaptive = true` (a limit that follows the latency), `rate = \"100/s\"` (a rate limit) or `throttle = true`",
                ));
            }
        };
        config.validate()?;
        Ok(config)
    }
}

/// The keys of a `[budgets.<name>]` section.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetSection {
    ratio: Option<f64>,
    min_per_second: Option<u32>,
    ttl: Option<String>,
}

impl BudgetSection {
    fn apply(&self, mut c: BudgetConfig) -> Result<BudgetConfig, ConfigError> {
        if let Some(ratio) = self.ratio {
            c = c.with_ratio(ratio);
        }
        if let Some(min) = self.min_per_second {
            c = c.with_min_per_second(min);
        }
        if let Some(ttl) = &self.ttl {
            c = c.with_ttl(duration("ttl", ttl)?);
        }
        Ok(c)
    }
}

/// The keys of a `[breakers.<name>]` or `[defaults]` section: the names of
/// the `#[circuit_breaker]` arguments.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct BreakerSection {
    min: Option<u32>,
    ratio: Option<f64>,
    window: Option<String>,
    window_calls: Option<u32>,
    cooldown: Option<String>,
    half_open: Option<u32>,
    probe_timeout: Option<String>,
    call_timeout: Option<String>,
    /// `"2s"` (with `slow_ratio`), or the attribute's form
    /// `{ threshold = "2s", ratio = 0.8 }`.
    slow_call: Option<SlowCall>,
    slow_ratio: Option<f64>,
    shared: Option<String>,
    sync_interval: Option<String>,
    /// The cap of a [breaker family](crate::breaker::BreakerFamily) of
    /// this name; read only when the name is a family's.
    max_members: Option<u32>,
    /// When a family member counts as idle; read as `max_members`.
    idle: Option<String>,
    /// `shared`, leaked once when the file is loaded: [`Sharing`] keeps a
    /// `&'static str`.
    #[serde(skip)]
    shared_url: Option<&'static str>,
}

/// The two spellings of `slow_call`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum SlowCall {
    Threshold(String),
    Table(SlowCallTable),
}

/// `slow_call = { threshold = "2s", ratio = 0.8 }`, as in the attribute.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SlowCallTable {
    threshold: String,
    ratio: f64,
}

impl BreakerSection {
    fn leak_url(&mut self) {
        self.shared_url = self
            .shared
            .as_ref()
            .map(|url| &*Box::leak(url.clone().into_boxed_str()));
    }
}

/// The keys of a `[retry.<name>]` section.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RetrySection {
    #[serde(alias = "max")]
    max_attempts: Option<u32>,
    initial: Option<String>,
    multiplier: Option<f64>,
    max_interval: Option<String>,
    /// A number or a string, read by [`jitter`].
    jitter: Option<toml::Value>,
    max_elapsed: Option<String>,
    attempt_timeout: Option<String>,
    max_retry_after: Option<String>,
}

impl FileConfig {
    pub(super) fn parse(text: &str, origin: &str) -> Result<FileConfig, ConfigError> {
        let raw: Raw = toml::from_str(text).map_err(|err| syntax_error(text, origin, &err))?;
        let mut errors = Vec::new();
        let section = |name: String| format!("`{name}` in `{origin}`");
        // A schema error names its key: the subject gets the key's line.
        let at_line = |err: Option<ConfigError>, header: &str, table: &str, name: &str| {
            err.into_iter()
                .flat_map(ConfigError::into_all)
                .map(|err| {
                    let subject = match key_line(text, table, name, err.field()) {
                        Some(line) => format!("`{header}` in `{origin}` line {line}"),
                        None => section(header.to_owned()),
                    };
                    err.with_subject(subject)
                })
                .collect::<Vec<_>>()
        };
        // Check every section now, so that a broken file fails at startup,
        // with all of its mistakes.
        let (mut defaults, bad) = read_section::<BreakerSection>(raw.defaults);
        errors.extend(at_line(bad, "[defaults]", "defaults", ""));
        defaults.leak_url();
        let base = match defaults
            .apply(BreakerConfig::new())
            .and_then(|c| c.validate().map(|()| c))
        {
            Ok(base) => base,
            Err(err) => {
                errors.extend(at_line(Some(err), "[defaults]", "defaults", ""));
                BreakerConfig::new()
            }
        };
        let mut breakers = HashMap::new();
        for (name, value) in raw.breakers {
            let header = format!("[breakers.{}]", super::toml_key(&name));
            let (mut breaker, bad) = read_table::<BreakerSection>(value);
            errors.extend(at_line(bad, &header, "breakers", &name));
            breaker.leak_url();
            if let Err(err) = breaker.apply(base).and_then(|c| c.validate()) {
                errors.extend(at_line(Some(err), &header, "breakers", &name));
            }
            if let Err(err) = breaker
                .apply_family(FamilyConfig::new())
                .and_then(|c| c.validate())
            {
                errors.extend(at_line(Some(err), &header, "breakers", &name));
            }
            breakers.insert(name, breaker);
        }
        let mut retry = HashMap::new();
        for (name, value) in raw.retry {
            let header = format!("[retry.{}]", super::toml_key(&name));
            let (policy, bad) = read_table::<RetrySection>(value);
            errors.extend(at_line(bad, &header, "retry", &name));
            if let Err(err) = policy
                .apply(PolicyBuilder::http())
                .and_then(PolicyBuilder::build)
            {
                errors.extend(at_line(Some(err), &header, "retry", &name));
            }
            retry.insert(name, policy);
        }
        let mut budgets = HashMap::new();
        for (name, value) in raw.budgets {
            let header = format!("[budgets.{}]", super::toml_key(&name));
            let (budget, bad) = read_table::<BudgetSection>(value);
            errors.extend(at_line(bad, &header, "budgets", &name));
            if let Err(err) = budget.apply(BudgetConfig::new()).and_then(|c| c.validate()) {
                errors.extend(at_line(Some(err), &header, "budgets", &name));
            }
            budgets.insert(name, budget);
        }
        let mut limits = HashMap::new();
        for (name, value) in raw.limits {
            let header = format!("[limits.{}]", super::toml_key(&name));
            let (section, bad) = read_table::<LimitSection>(value);
            errors.extend(at_line(bad, &header, "limits", &name));
            match section.config() {
                Ok(config) => {
                    limits.insert(name, config);
                }
                Err(err) => errors.extend(at_line(Some(err), &header, "limits", &name)),
            }
        }
        if let Some(service) = &raw.service
            && service.trim().is_empty()
        {
            errors.push(ConfigError::new(
                format!("`{origin}`"),
                "service",
                "\"\"",
                "the service name labels every metric; give it a value or remove the key",
            ));
        }
        if let Some(err) = ConfigError::combine(errors) {
            return Err(err);
        }
        Ok(FileConfig {
            origin: Some(origin.to_owned()),
            service: raw.service,
            defaults,
            breakers,
            retry,
            budgets,
            limits,
        })
    }

    /// `[limits.<name>]`, checked at load time.
    pub(super) fn limit(&self, name: &str) -> Option<LimitConfig> {
        self.limits.get(name).copied()
    }

    /// The names of the `[breakers.*]` sections.
    pub(super) fn breaker_names(&self) -> impl Iterator<Item = &str> {
        self.breakers.keys().map(String::as_str)
    }

    /// The names of the `[retry.*]` sections.
    pub(super) fn retry_names(&self) -> impl Iterator<Item = &str> {
        self.retry.keys().map(String::as_str)
    }

    /// The names of the `[budgets.*]` sections.
    pub(super) fn budget_names(&self) -> impl Iterator<Item = &str> {
        self.budgets.keys().map(String::as_str)
    }

    /// The names of the `[limits.*]` sections.
    pub(super) fn limit_names(&self) -> impl Iterator<Item = &str> {
        self.limits.keys().map(String::as_str)
    }

    pub(super) fn origin(&self) -> Option<&str> {
        self.origin.as_deref()
    }

    pub(super) fn service(&self) -> Option<&str> {
        self.service.as_deref()
    }

    /// `[breakers.<name>]` over `[defaults]` over `base`. The sections were
    /// checked at load time, so only their durations could fail here, and
    /// they did not.
    pub(super) fn breaker(&self, name: &str, base: BreakerConfig) -> BreakerConfig {
        let with_defaults = self.defaults.apply(base).unwrap_or(base);
        match self.breakers.get(name) {
            Some(section) => section.apply(with_defaults).unwrap_or(with_defaults),
            None => with_defaults,
        }
    }

    /// The family `name`: its members' breaker as [`breaker`](Self::breaker),
    /// `max_members` and `idle` of `[breakers.<name>]` over `base`.
    pub(super) fn family(&self, name: &str, base: FamilyConfig) -> FamilyConfig {
        let base = base.with_breaker(self.breaker(name, *base.breaker()));
        match self.breakers.get(name) {
            Some(section) => section.apply_family(base).unwrap_or(base),
            None => base,
        }
    }

    /// `[budgets.<name>]` over `base`, checked at load time.
    pub(super) fn budget(&self, name: &str, base: BudgetConfig) -> BudgetConfig {
        match self.budgets.get(name) {
            Some(section) => section.apply(base).unwrap_or(base),
            None => base,
        }
    }

    /// `[retry.<name>]` over `base`, or why a value of the section does
    /// not apply to it (a bare `jitter = 0.3` over a `Full` jitter).
    pub(super) fn try_policy(
        &self,
        name: &str,
        base: PolicyBuilder,
    ) -> Result<PolicyBuilder, ConfigError> {
        match self.retry.get(name) {
            Some(section) => section.apply(base),
            None => Ok(base),
        }
    }
}

impl BreakerSection {
    fn apply_family(&self, mut c: FamilyConfig) -> Result<FamilyConfig, ConfigError> {
        if let Some(max) = self.max_members {
            c = c.with_max_members(max);
        }
        if let Some(idle) = &self.idle {
            c = c.with_idle(duration("idle", idle)?);
        }
        Ok(c)
    }

    fn apply(&self, mut c: BreakerConfig) -> Result<BreakerConfig, ConfigError> {
        if let Some(min) = self.min {
            c = c.with_min_requests(min);
        }
        if let Some(ratio) = self.ratio {
            c = c.with_failure_ratio(ratio);
        }
        if let (Some(_), Some(_)) = (&self.window, self.window_calls) {
            return Err(ConfigError::new(
                "",
                "window_calls",
                self.window_calls.unwrap_or_default(),
                "`window` (a time window) and `window_calls` (a count window) exclude each other; keep one",
            ));
        }
        if let Some(window) = &self.window {
            c = c.with_window(duration("window", window)?);
        }
        if let Some(calls) = self.window_calls {
            c = c.with_count_window(calls);
        }
        if let Some(cooldown) = &self.cooldown {
            c = c.with_cooldown(duration("cooldown", cooldown)?);
        }
        if let Some(half_open) = self.half_open {
            c = c.with_half_open(half_open);
        }
        if let Some(timeout) = &self.probe_timeout {
            c = c.with_probe_timeout(duration("probe_timeout", timeout)?);
        }
        if let Some(timeout) = &self.call_timeout {
            c = c.with_call_timeout(duration("call_timeout", timeout)?);
        }
        match (self.shared_url, &self.sync_interval) {
            (Some(url), interval) => {
                let mut sharing = Sharing::redis(url);
                if let Some(previous) = c.sharing() {
                    sharing = sharing.with_sync_interval(previous.sync_interval());
                }
                if let Some(interval) = interval {
                    sharing = sharing.with_sync_interval(duration("sync_interval", interval)?);
                }
                c = c.with_sharing(sharing);
            }
            (None, Some(interval)) => match c.sharing() {
                Some(sharing) => {
                    c = c.with_sharing(
                        sharing.with_sync_interval(duration("sync_interval", interval)?),
                    )
                }
                None => {
                    return Err(ConfigError::new(
                        "",
                        "sync_interval",
                        format!("{interval:?}"),
                        "a sync interval needs `shared`, the Redis URL the breaker is shared through",
                    ));
                }
            },
            (None, None) => {}
        }
        match (&self.slow_call, self.slow_ratio) {
            (Some(SlowCall::Table(table)), Some(ratio)) => {
                return Err(ConfigError::new(
                    "",
                    "slow_ratio",
                    ratio,
                    format!(
                        "`slow_call` already gives the ratio ({}); keep one of them",
                        table.ratio
                    ),
                ));
            }
            (Some(SlowCall::Table(table)), None) => {
                c = c.with_slow_call(duration("slow_call", &table.threshold)?, table.ratio);
            }
            (Some(SlowCall::Threshold(threshold)), ratio) => {
                let ratio = ratio.or(c.slow_call().map(|s| s.ratio)).unwrap_or(1.0);
                c = c.with_slow_call(duration("slow_call", threshold)?, ratio);
            }
            (None, Some(ratio)) => match c.slow_call() {
                Some(slow) => c = c.with_slow_call(slow.threshold, ratio),
                None => {
                    return Err(ConfigError::new(
                        "",
                        "slow_ratio",
                        ratio,
                        "a slow-call ratio needs `slow_call`, the duration from which a call is slow",
                    ));
                }
            },
            (None, None) => {}
        }
        Ok(c)
    }
}

impl RetrySection {
    fn apply(&self, mut b: PolicyBuilder) -> Result<PolicyBuilder, ConfigError> {
        if let Some(max) = self.max_attempts {
            b = b.with_max_attempts(max);
        }
        if let Some(initial) = &self.initial {
            b = b.with_initial(duration("initial", initial)?);
        }
        if let Some(multiplier) = self.multiplier {
            b = b.with_multiplier(multiplier);
        }
        if let Some(max_interval) = &self.max_interval {
            b = b.with_max_interval(duration("max_interval", max_interval)?);
        }
        if let Some(value) = &self.jitter {
            b = b.with_jitter(jitter(value, b.jitter())?);
        }
        if let Some(max_elapsed) = &self.max_elapsed {
            b = b.with_max_elapsed(duration("max_elapsed", max_elapsed)?);
        }
        if let Some(timeout) = &self.attempt_timeout {
            b = b.with_attempt_timeout(duration("attempt_timeout", timeout)?);
        }
        if let Some(max) = &self.max_retry_after {
            b = b.with_max_retry_after(duration("max_retry_after", max)?);
        }
        Ok(b)
    }
}

/// Reads `jitter = …` over a site whose jitter is `site`, by the
/// attribute's vocabulary (`resilience_rules::jitter`): a bare number sets
/// the amount of the site's own kind (±30 % for a proportional jitter, up
/// to +30 % for `db_tx`'s additive one), never its kind, and is refused
/// over `Full` and `Decorrelated`, which have none; a string names the
/// kind: `"symmetric"`, `"additive"` (each with an optional amount,
/// `"additive 0.3"`), `"full"`, `"decorrelated"`.
fn jitter(value: &toml::Value, site: Jitter) -> Result<Jitter, ConfigError> {
    use resilience_rules::jitter::{self as rules, JitterError, Kind};
    let site_kind = match site {
        Jitter::Symmetric(_) => Kind::Symmetric,
        Jitter::Additive(_) => Kind::Additive,
        Jitter::Full => Kind::Full,
        Jitter::Decorrelated => Kind::Decorrelated,
    };
    const KINDS: &str = "\"symmetric\", \"additive\", \"full\" or \"decorrelated\"";
    let read = match value {
        toml::Value::Float(f) => rules::amount_of(site_kind, *f),
        // `jitter = 0` or `1`: TOML integers are numbers too.
        #[allow(clippy::cast_precision_loss)]
        toml::Value::Integer(i) => rules::amount_of(site_kind, *i as f64),
        toml::Value::String(text) => rules::parse(text),
        other => {
            return Err(ConfigError::new(
                "",
                "jitter",
                show(other),
                format!("a jitter is an amount such as 0.3 (±30 %) or a kind as a string: {KINDS}"),
            ));
        }
    };
    let reason = match read {
        Ok((kind, amount)) => {
            let amount = amount.unwrap_or(rules::DEFAULT_AMOUNT);
            return Ok(match kind {
                Kind::Symmetric => Jitter::Symmetric(amount),
                Kind::Additive => Jitter::Additive(amount),
                Kind::Full => Jitter::Full,
                Kind::Decorrelated => Jitter::Decorrelated,
            });
        }
        Err(JitterError::BelowMin) => format!(
            "jitter must be between {MIN_JITTER:?} and {MAX_JITTER:?}: below 10 % clients that failed together retry together (thundering herd); 0.25 is the default"
        ),
        Err(JitterError::AboveMax) => format!(
            "jitter must be between {MIN_JITTER:?} and {MAX_JITTER:?}: it is a fraction of the pause (0.25 means ±25 %)"
        ),
        Err(JitterError::Disabled) => format!(
            "a retry without jitter is refused: clients that failed together retry together (thundering herd); remove the key (the default is ±25 %) or name a kind: {KINDS}"
        ),
        Err(JitterError::Unknown { near }) => {
            let hint = near.map_or(String::new(), |near| format!("; did you mean \"{near}\"?"));
            format!(
                "unknown jitter: write an amount such as 0.3, or a kind: {KINDS}; \"symmetric\" and \"additive\" take an optional amount after a space, e.g. \"additive 0.3\"{hint}"
            )
        }
        Err(JitterError::NoAmount(kind)) if !matches!(value, toml::Value::String(_)) => format!(
            "a bare number sets the amount of the site's jitter and never its kind, and this site's jitter is \"{0}\", which has no amount; write `jitter = \"{0}\"`, or name the kind to change it, e.g. `jitter = \"symmetric {1}\"`",
            kind.as_str(),
            show(value)
        ),
        Err(JitterError::NoAmount(kind)) => format!(
            "a \"{0}\" jitter has no amount, it draws the whole pause at random; write `jitter = \"{0}\"`, or `jitter = \"symmetric 0.3\"` for ±30 %",
            kind.as_str()
        ),
        Err(JitterError::NotANumber) => format!(
            "the amount after the kind is not a number; write one between {MIN_JITTER:?} and {MAX_JITTER:?}, e.g. \"additive 0.3\""
        ),
    };
    Err(ConfigError::new("", "jitter", show(value), reason))
}

/// The keys whose value is a duration (read by [`duration`]).
const DURATION_KEYS: &[&str] = &[
    "attempt_timeout",
    "call_timeout",
    "cooldown",
    "idle",
    "initial",
    "max_elapsed",
    "max_interval",
    "max_retry_after",
    "max_wait",
    "probe_timeout",
    "slow_call",
    "sync_interval",
    "ttl",
    "window",
];

/// A section's table read key by key: the section made of its good keys,
/// and an error for each bad one (an unknown key, with the known key it
/// was likely meant to be; a value of the wrong type; a duration that does
/// not parse), so that a file's every mistake is named at once, each with
/// its value.
fn read_section<T: serde::de::DeserializeOwned + Default>(
    mut table: toml::Table,
) -> (T, Option<ConfigError>) {
    let mut errors = Vec::new();
    table.retain(|key, value| match check_key::<T>(key, value) {
        Ok(()) => true,
        Err(err) => {
            errors.push(err);
            false
        }
    });
    let section = match table.clone().try_into() {
        Ok(section) => section,
        Err(err) => {
            errors.push(schema_error(&err, &table));
            T::default()
        }
    };
    (section, ConfigError::combine(errors))
}

/// One key of a section, read on its own.
fn check_key<T: serde::de::DeserializeOwned>(
    key: &str,
    value: &toml::Value,
) -> Result<(), ConfigError> {
    let mut alone = toml::Table::new();
    alone.insert(key.to_owned(), value.clone());
    let duration_key = DURATION_KEYS.iter().find(|known| **known == key);
    let err = match alone.try_into::<T>() {
        Ok(_) => {
            return match (duration_key, value) {
                (Some(key), toml::Value::String(text)) => duration(key, text).map(drop),
                _ => Ok(()),
            };
        }
        Err(err) => err,
    };
    let mut reason = err.message().trim().to_owned();
    if let Some(known) = reason.strip_prefix("unknown field `") {
        // serde lists the keys it expected: `expected one of `a`, `b``.
        let known = known.split('`').skip(2).step_by(2);
        if let Some(meant) = resilience_rules::suggest::did_you_mean(key, known) {
            reason = format!("unknown key; did you mean `{meant}`? ({reason})");
        }
    }
    if duration_key.is_some() && matches!(value, toml::Value::Integer(_) | toml::Value::Float(_)) {
        // `cooldown = 2`: serde says only "expected a string".
        reason.push_str(&format!(
            "; a duration is a string with its unit, such as \"{}s\"",
            show(value)
        ));
    }
    Err(ConfigError::new("", key.to_owned(), show(value), reason))
}

/// Like [`read_section`], for a value that must be a table.
fn read_table<T: serde::de::DeserializeOwned + Default>(
    value: toml::Value,
) -> (T, Option<ConfigError>) {
    match value {
        toml::Value::Table(table) => read_section(table),
        other => (
            T::default(),
            Some(ConfigError::new(
                "",
                "section",
                show(&other),
                "a section is a table of keys, e.g. `[breakers.user]` then `min = 10`",
            )),
        ),
    }
}

/// The line of `key` in the section `[table.name]` (`[table]` when `name`
/// is empty), for an error found after parsing.
fn key_line(text: &str, table: &str, name: &str, key: &str) -> Option<usize> {
    let mut inside = false;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
            let header: String = header
                .chars()
                .filter(|c| *c != '"' && *c != '\'' && !c.is_whitespace())
                .collect();
            inside = if name.is_empty() {
                header == table
            } else {
                header == format!("{table}.{name}")
            };
        } else if inside
            && line
                .strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        {
            return Some(i + 1);
        }
    }
    None
}

/// A schema error inside one section: the key named by the message, when
/// it names one.
fn schema_error(err: &toml::de::Error, table: &toml::Table) -> ConfigError {
    let message = err.message().trim().to_owned();
    let key = message.split('`').nth(1).unwrap_or("key").to_owned();
    let value = table.get(&key).map(show).unwrap_or_default();
    ConfigError::new("", key, value, message)
}

/// A TOML value as written in the file, near enough to find it.
fn show(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => format!("{s:?}"),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Array(_) => "[…]".to_owned(),
        toml::Value::Table(_) => "{…}".to_owned(),
    }
}

/// A TOML or schema error, naming the file, the line's key and its value.
fn syntax_error(text: &str, origin: &str, err: &toml::de::Error) -> ConfigError {
    let (line_no, line) = match err.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
            let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
            (
                text[..start].matches('\n').count() + 1,
                text[line_start..line_end].trim(),
            )
        }
        None => (0, ""),
    };
    let (key, value) = match line.split_once('=') {
        Some((key, value)) => (key.trim().to_owned(), value.trim().to_owned()),
        None => (line.to_owned(), String::new()),
    };
    let subject = if line_no > 0 {
        format!("`{origin}` line {line_no}")
    } else {
        format!("`{origin}`")
    };
    ConfigError::new(subject, key, value, err.message().trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_written_as_a_number_is_shown_how_to_write_it() {
        let err = FileConfig::parse("[breakers.user]\ncooldown = 2\n", "app.toml").unwrap_err();
        assert_eq!((err.field(), err.value()), ("cooldown", "2"));
        assert!(
            err.to_string()
                .contains("a duration is a string with its unit, such as \"2s\""),
            "{err}"
        );
        // A number where a number belongs is no duration's business.
        let err = FileConfig::parse("[breakers.user]\nmin = \"2\"\n", "app.toml").unwrap_err();
        assert!(!err.to_string().contains("duration"), "{err}");
    }
}
