//! A consumer's validated configuration, with the partition-blocking check.

use std::time::Duration;

use rand::RngCore;

use crate::error::ConfigError;
use crate::retry::Policy;
use crate::telemetry::Labels;

/// How one consumer runs its handler: the retry policy, the broker's ack
/// deadline, and the names its metrics carry.
///
/// Built by [`ConsumerConfig::new`], which refuses a retry chain that can
/// outlast the ack deadline (see [`ConsumerConfig::chain_bound`]): while a
/// handler retries, the message stays unacknowledged, and once the broker's
/// deadline passes it hands the message to another consumer (RabbitMQ's
/// `consumer_timeout`, Kafka's `max.poll.interval.ms` and the rebalance that
/// follows), so the same message runs twice at once.
///
/// # Default
///
/// There is none: the ack deadline is the broker's and must be given.
/// [`ConsumerConfig::background`] takes the `background` preset (6 attempts,
/// 500 ms ×2 up to 30 s, ±25 %, 2 min in all); the lock a deduplicator
/// takes lasts the ack deadline, a record of a settled message 24 h.
///
/// # Example
///
/// ```
/// use resilience::consumer::ConsumerConfig;
/// use resilience::retry::Policy;
/// use resilience::telemetry::Labels;
/// use std::time::Duration;
///
/// const ORDERS: Labels = Labels::new("billing", "orders");
/// // RabbitMQ's default `consumer_timeout` is 30 min: the preset fits.
/// let config = ConsumerConfig::background(ORDERS, Duration::from_secs(1800))?;
/// assert_eq!(config.policy().max_attempts(), 6);
///
/// // A 10 s deadline does not: the preset's chain may run for 2 min.
/// let err = ConsumerConfig::background(ORDERS, Duration::from_secs(10)).unwrap_err();
/// assert_eq!((err.field(), err.value()), ("ack_deadline", "10s"));
/// assert!(err.reason().contains("120s"), "{err}");
/// # Ok::<(), resilience::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConsumerConfig {
    labels: Labels,
    policy: Policy,
    ack_deadline: Duration,
    settled_ttl: Duration,
    requeue_delay: Duration,
    /// "the consumer `<target>`": the name a chain nested in the handler
    /// gives its outer chain in its WARN.
    chain: &'static &'static str,
}

/// The worst-case length of a retry chain, and what it is made of: see
/// [`ConsumerConfig::chain_bound`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainBound {
    /// The longest time one message can be held by the chain.
    pub total: Duration,
    /// Every pause of the chain at its longest, jitter included.
    pub pauses: Duration,
    /// The rule of thumb `initial · 2^retries`.
    pub rule_of_thumb: Duration,
}

/// A random source that always draws the top of the range, so that
/// [`Backoff::delay`](crate::retry::Backoff::delay) gives each pause at its
/// longest: the schedule's own arithmetic, not a copy of it.
struct Highest;

impl RngCore for Highest {
    fn next_u32(&mut self) -> u32 {
        u32::MAX
    }
    fn next_u64(&mut self) -> u64 {
        u64::MAX
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        dst.fill(u8::MAX)
    }
}

impl ConsumerConfig {
    /// The lifetime of a settled message's record: 24 h, as for
    /// idempotency keys.
    pub const SETTLED_TTL: Duration = Duration::from_secs(24 * 60 * 60);

    /// A consumer named by `labels` (`target` is the queue or the
    /// consumer), retrying under `policy`, whose broker redelivers an
    /// unacknowledged message after `ack_deadline`.
    ///
    /// Refused, with an error naming both values, when the chain can hold a
    /// message longer than `ack_deadline` (see
    /// [`chain_bound`](Self::chain_bound)), or when `ack_deadline` is zero.
    ///
    /// ```
    /// use resilience::consumer::ConsumerConfig;
    /// use resilience::retry::Policy;
    /// use resilience::telemetry::Labels;
    /// use std::time::Duration;
    ///
    /// // The preset's shape with shorter pauses: 10 ms ×2, 2 s in all.
    /// let policy = Policy::background()
    ///     .to_builder()
    ///     .with_initial(Duration::from_millis(10))
    ///     .with_max_elapsed(Duration::from_secs(2))
    ///     .build()?;
    /// let config = ConsumerConfig::new(Labels::new("billing", "orders"), policy, Duration::from_secs(5))?;
    /// assert_eq!(config.ack_deadline(), Duration::from_secs(5));
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn new(
        labels: Labels,
        policy: Policy,
        ack_deadline: Duration,
    ) -> Result<Self, ConfigError> {
        let subject = format!("consumer `{}`", labels.target());
        if ack_deadline.is_zero() {
            return Err(ConfigError::new(
                subject,
                "ack_deadline",
                "0s",
                "the broker's deadline for an acknowledgement (RabbitMQ's `consumer_timeout`, Kafka's `max.poll.interval.ms`) cannot be zero",
            ));
        }
        let bound = Self::chain_bound(&policy);
        if bound.total > ack_deadline {
            let attempts = policy.max_attempts();
            let attempt = match policy.attempt_timeout() {
                Some(timeout) => format!("{attempts} attempts of at most {timeout:?}"),
                None => format!("{attempts} attempts with no `attempt_timeout`"),
            };
            let backoff = policy.backoff();
            return Err(ConfigError::new(
                subject,
                "ack_deadline",
                format!("{ack_deadline:?}"),
                format!(
                    "the retry chain can hold one message for up to {total:?} ({attempt}, pauses of {initial:?} ×{multiplier} up to {max:?} adding up to {pauses:?} with jitter, the rule of thumb `initial · 2^retries` = {thumb:?}, `max_elapsed = {elapsed:?}`), longer than the ack deadline: the broker would hand the message to another consumer while this one still retries it (a rebalance, in Kafka terms); lower `max_attempts`, `initial` or `max_elapsed`, set an `attempt_timeout`, or raise the ack deadline",
                    total = bound.total,
                    initial = backoff.initial(),
                    multiplier = backoff.multiplier(),
                    max = backoff.max_interval(),
                    pauses = bound.pauses,
                    thumb = bound.rule_of_thumb,
                    elapsed = policy.max_elapsed(),
                ),
            ));
        }
        Ok(Self {
            labels,
            policy,
            ack_deadline,
            settled_ttl: Self::SETTLED_TTL,
            requeue_delay: policy.backoff().initial(),
            chain: chain_name(labels),
        })
    }

    /// [`ConsumerConfig::new`] with [`Policy::background`].
    ///
    /// ```
    /// use resilience::consumer::ConsumerConfig;
    /// use resilience::telemetry::Labels;
    /// use std::time::Duration;
    ///
    /// let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
    /// assert_eq!(config.policy().backoff().initial(), Duration::from_millis(500));
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn background(labels: Labels, ack_deadline: Duration) -> Result<Self, ConfigError> {
        Self::new(labels, Policy::background(), ack_deadline)
    }

    /// The longest a retry chain under `policy` can hold one message,
    /// which [`new`](Self::new) compares with the ack deadline.
    ///
    /// It is the larger of
    ///
    /// - the schedule's worst case: every attempt running for its whole
    ///   `attempt_timeout` plus every pause at its longest (jitter
    ///   included), capped by `max_elapsed`; without an `attempt_timeout`
    ///   one hung attempt can use the whole `max_elapsed`, so it is
    ///   `max_elapsed`;
    /// - the rule of thumb `initial · 2^retries` ("if
    ///   `InitialInterval · 2^MaxRetries` > `max.poll.interval.ms`,
    ///   rebalance"), capped by `max_elapsed` too.
    ///
    /// ```
    /// use resilience::consumer::ConsumerConfig;
    /// use resilience::retry::Policy;
    /// use std::time::Duration;
    ///
    /// let policy = Policy::background()
    ///     .to_builder()
    ///     .with_attempt_timeout(Duration::from_secs(1))
    ///     .build()?;
    /// let bound = ConsumerConfig::chain_bound(&policy);
    /// // 500 ms + 1 s + 2 s + 4 s + 8 s, each +25 %.
    /// assert_eq!(bound.pauses, Duration::from_millis(19_375));
    /// assert_eq!(bound.rule_of_thumb, Duration::from_secs(16));
    /// assert_eq!(bound.total, Duration::from_millis(25_375));
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn chain_bound(policy: &Policy) -> ChainBound {
        let retries = policy.max_attempts().saturating_sub(1);
        let backoff = policy.backoff();
        let mut pauses = Duration::ZERO;
        let mut previous = Duration::ZERO;
        for retry in 0..retries {
            let pause = backoff.delay(retry, previous, &mut Highest);
            // Whole milliseconds: the f64 arithmetic of the top of a range
            // lands a few nanoseconds short of it.
            let pause = round_to_millis(pause);
            pauses = pauses.saturating_add(pause);
            previous = pause;
            if pauses >= policy.max_elapsed() {
                break;
            }
        }
        let elapsed = policy.max_elapsed();
        let schedule = match policy.attempt_timeout() {
            Some(timeout) => timeout
                .saturating_mul(policy.max_attempts())
                .saturating_add(pauses)
                .min(elapsed),
            None => elapsed,
        };
        let rule_of_thumb = backoff
            .initial()
            .saturating_mul(2u32.saturating_pow(retries))
            .min(elapsed);
        ChainBound {
            total: schedule.max(rule_of_thumb),
            pauses,
            rule_of_thumb,
        }
    }

    /// The same configuration, keeping the record of a settled (applied or
    /// dead-lettered) message for `ttl` instead of 24 h: a redelivery after
    /// that is applied again. Zero is refused.
    ///
    /// ```
    /// use resilience::consumer::ConsumerConfig;
    /// use resilience::telemetry::Labels;
    /// use std::time::Duration;
    ///
    /// let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?
    ///     .with_settled_ttl(Duration::from_secs(7 * 24 * 3600))?;
    /// assert_eq!(config.settled_ttl(), Duration::from_secs(604_800));
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn with_settled_ttl(mut self, ttl: Duration) -> Result<Self, ConfigError> {
        if ttl < self.ack_deadline {
            return Err(ConfigError::new(
                format!("consumer `{}`", self.labels.target()),
                "settled_ttl",
                format!("{ttl:?}"),
                format!(
                    "shorter than `ack_deadline = {:?}`: a message redelivered after its record expired would be applied again; keep settled records for hours (24 h is the default)",
                    self.ack_deadline
                ),
            ));
        }
        self.settled_ttl = ttl;
        Ok(self)
    }

    /// The same configuration, pausing `delay` before handing a message
    /// back to the broker (its handler running elsewhere, the
    /// deduplicator or the dead-letter sink unavailable), so that a
    /// requeued message is not redelivered in a tight loop.
    ///
    /// # Default
    ///
    /// The policy's first pause (500 ms for the preset).
    ///
    /// ```
    /// use resilience::consumer::ConsumerConfig;
    /// use resilience::telemetry::Labels;
    /// use std::time::Duration;
    ///
    /// let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?
    ///     .with_requeue_delay(Duration::from_secs(1));
    /// assert_eq!(config.requeue_delay(), Duration::from_secs(1));
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    #[must_use]
    pub const fn with_requeue_delay(mut self, delay: Duration) -> Self {
        self.requeue_delay = delay;
        self
    }

    /// The `service` and `target` labels of the consumer's metrics.
    ///
    /// ```
    /// # use resilience::{consumer::ConsumerConfig, telemetry::Labels};
    /// # use std::time::Duration;
    /// let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
    /// assert_eq!(config.labels().target(), "orders");
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub const fn labels(&self) -> Labels {
        self.labels
    }

    /// The retry policy of each message.
    ///
    /// ```
    /// # use resilience::{consumer::ConsumerConfig, retry::Policy, telemetry::Labels};
    /// # use std::time::Duration;
    /// let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
    /// assert_eq!(config.policy(), &Policy::background());
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub const fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The broker's ack deadline; also how long a deduplicator's lock on a
    /// message in progress lasts, so that a crashed consumer's message runs
    /// again once the broker would have redelivered it anyway.
    ///
    /// ```
    /// # use resilience::{consumer::ConsumerConfig, telemetry::Labels};
    /// # use std::time::Duration;
    /// let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
    /// assert_eq!(config.ack_deadline(), Duration::from_secs(300));
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub const fn ack_deadline(&self) -> Duration {
        self.ack_deadline
    }

    /// How long the record of a settled message is kept.
    ///
    /// ```
    /// # use resilience::{consumer::ConsumerConfig, telemetry::Labels};
    /// # use std::time::Duration;
    /// let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
    /// assert_eq!(config.settled_ttl(), ConsumerConfig::SETTLED_TTL);
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub const fn settled_ttl(&self) -> Duration {
        self.settled_ttl
    }

    /// The pause before a message is handed back to the broker.
    ///
    /// ```
    /// # use resilience::{consumer::ConsumerConfig, telemetry::Labels};
    /// # use std::time::Duration;
    /// let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
    /// assert_eq!(config.requeue_delay(), Duration::from_millis(500));
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub const fn requeue_delay(&self) -> Duration {
        self.requeue_delay
    }

    /// The name the handler's attempts are polled under: a `#[retry]` fn
    /// called in the handler makes one attempt and its WARN names this
    /// outer chain.
    pub(crate) const fn chain_name(&self) -> &'static &'static str {
        self.chain
    }
}

/// "the consumer `<target>`", kept for the process's life (the thread
/// mark of a chain is a `&'static &'static str`), once per target.
fn chain_name(labels: Labels) -> &'static &'static str {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static NAMES: Mutex<Option<HashMap<&'static str, &'static &'static str>>> = Mutex::new(None);
    let mut names = match NAMES.lock() {
        Ok(names) => names,
        Err(poisoned) => poisoned.into_inner(),
    };
    names
        .get_or_insert_with(HashMap::new)
        .entry(labels.target())
        .or_insert_with(|| {
            let name: &'static str =
                Box::leak(format!("the consumer `{}`", labels.target()).into_boxed_str());
            Box::leak(Box::new(name))
        })
}

fn round_to_millis(duration: Duration) -> Duration {
    let micros = duration.as_micros();
    let millis = micros.div_ceil(1000);
    Duration::from_millis(u64::try_from(millis).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORDERS: Labels = Labels::new("billing", "orders");

    #[test]
    fn the_preset_without_attempt_timeout_is_bounded_by_max_elapsed() {
        let bound = ConsumerConfig::chain_bound(&Policy::background());
        assert_eq!(bound.total, Duration::from_secs(120));
        assert_eq!(bound.pauses, Duration::from_millis(19_375));
        assert_eq!(bound.rule_of_thumb, Duration::from_secs(16));
        ConsumerConfig::background(ORDERS, Duration::from_secs(120)).unwrap();
        let err = ConsumerConfig::background(ORDERS, Duration::from_secs(119)).unwrap_err();
        assert_eq!((err.field(), err.value()), ("ack_deadline", "119s"));
        let text = err.to_string();
        for part in [
            "consumer `orders`",
            "up to 120s",
            "6 attempts with no `attempt_timeout`",
            "500ms ×2 up to 30s",
            "19.375s",
            "= 16s",
            "rebalance",
        ] {
            assert!(text.contains(part), "{part:?} not in {text}");
        }
    }

    #[test]
    fn the_rule_of_thumb_is_kept_when_stricter() {
        // 2 attempts, 1 s pause: the schedule says 1.25 s + 2 × 100 ms,
        // the guide 1 s · 2^1 = 2 s.
        let policy = Policy::background()
            .to_builder()
            .with_max_attempts(2)
            .with_initial(Duration::from_secs(1))
            .with_attempt_timeout(Duration::from_millis(100))
            .build()
            .unwrap();
        let bound = ConsumerConfig::chain_bound(&policy);
        assert_eq!(bound.pauses, Duration::from_millis(1_250));
        assert_eq!(bound.total, Duration::from_secs(2));
        assert!(ConsumerConfig::new(ORDERS, policy, Duration::from_millis(1_999)).is_err());
        assert!(ConsumerConfig::new(ORDERS, policy, Duration::from_secs(2)).is_ok());
    }

    #[test]
    fn zero_deadline_and_short_settled_ttl_are_refused() {
        let err = ConsumerConfig::background(ORDERS, Duration::ZERO).unwrap_err();
        assert_eq!((err.field(), err.value()), ("ack_deadline", "0s"));
        let config = ConsumerConfig::background(ORDERS, Duration::from_secs(600)).unwrap();
        let err = config
            .with_settled_ttl(Duration::from_secs(60))
            .unwrap_err();
        assert_eq!((err.field(), err.value()), ("settled_ttl", "60s"));
        assert!(err.reason().contains("`ack_deadline = 600s`"), "{err}");
    }
}
