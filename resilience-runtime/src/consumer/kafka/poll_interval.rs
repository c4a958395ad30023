//! The guide's partition rule: a retry chain that holds a message longer
//! than the group's `max.poll.interval.ms` makes the member leave the
//! group, and the message is handled again by another one.

use std::time::Duration;

use rdkafka::ClientConfig;

use crate::consumer::config::ConsumerConfig;
use crate::error::ConfigError;

/// librdkafka's default `max.poll.interval.ms`.
const DEFAULT_MAX_POLL_INTERVAL: Duration = Duration::from_millis(300_000);

/// The consumer's `max.poll.interval.ms`, read from its settings
/// (librdkafka's default, 300 s, when unset): the ack deadline to give
/// [`ConsumerConfig`]. A value that is not a positive number of
/// milliseconds is refused, naming it.
///
/// ```
/// use resilience::consumer::kafka::{max_poll_interval, rdkafka::ClientConfig};
/// use std::time::Duration;
///
/// let mut settings = ClientConfig::new();
/// assert_eq!(max_poll_interval(&settings)?, Duration::from_secs(300));
/// settings.set("max.poll.interval.ms", "60000");
/// assert_eq!(max_poll_interval(&settings)?, Duration::from_secs(60));
/// settings.set("max.poll.interval.ms", "1m");
/// assert_eq!(max_poll_interval(&settings).unwrap_err().value(), "1m");
/// # Ok::<(), resilience::ConfigError>(())
/// ```
pub fn max_poll_interval(settings: &ClientConfig) -> Result<Duration, ConfigError> {
    match settings.get("max.poll.interval.ms") {
        None => Ok(DEFAULT_MAX_POLL_INTERVAL),
        Some(text) => match text.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
            _ => Err(ConfigError::new(
                "Kafka consumer settings",
                "max.poll.interval.ms",
                text,
                "expected a positive whole number of milliseconds (librdkafka's default is 300000)",
            )),
        },
    }
}

/// Refuses a consumer `config` that does not fit a Kafka consumer whose
/// `max.poll.interval.ms` is `max_poll_interval`: a retry chain that can
/// hold one message longer (see [`ConsumerConfig::chain_bound`]), or an
/// ack deadline longer. While the chain runs, the member calls no `poll`;
/// past `max.poll.interval.ms` librdkafka leaves the group and the
/// partition goes to another member, which handles the message again. The
/// error names both numbers and the fix.
///
/// ```
/// use resilience::consumer::ConsumerConfig;
/// use resilience::consumer::kafka::check_max_poll_interval;
/// use resilience::telemetry::Labels;
/// use std::time::Duration;
///
/// // The preset's chain can hold a message for 120 s.
/// let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(120))?;
/// check_max_poll_interval(&config, Duration::from_secs(300))?;
///
/// let err = check_max_poll_interval(&config, Duration::from_secs(60)).unwrap_err();
/// assert_eq!(err.field(), "max.poll.interval.ms");
/// assert_eq!(err.value(), "60000");
/// assert!(err.reason().contains("up to 120s"), "{err}");
/// # Ok::<(), resilience::ConfigError>(())
/// ```
pub fn check_max_poll_interval(
    config: &ConsumerConfig,
    max_poll_interval: Duration,
) -> Result<(), ConfigError> {
    let deadline = config.ack_deadline();
    let bound = ConsumerConfig::chain_bound(config.policy());
    let chain = bound.total;
    if deadline <= max_poll_interval && chain <= max_poll_interval {
        return Ok(());
    }
    let policy = config.policy();
    let backoff = policy.backoff();
    let longest = deadline.max(chain);
    Err(ConfigError::new(
        format!("consumer `{}`", config.labels().target()),
        "max.poll.interval.ms",
        max_poll_interval.as_millis(),
        format!(
            "the retry chain can hold one message for up to {chain:?} ({attempts} attempts, pauses of {initial:?} ×{multiplier} up to {max:?}, the rule of thumb `initial · 2^retries` = {thumb:?}, `max_elapsed = {elapsed:?}`; ack deadline {deadline:?}), longer than the Kafka consumer's `max.poll.interval.ms = {poll}` ({max_poll_interval:?}): while a handler retries, the messages behind it in its partition wait and the member does not poll, so past `max.poll.interval.ms` it leaves the group and the partition is rebalanced to another member, which handles the message again; raise `max.poll.interval.ms` to at least {needed}, or shorten the chain (`max_attempts`, `initial`, `max_elapsed`, an `attempt_timeout`) and the ack deadline to fit",
            attempts = policy.max_attempts(),
            initial = backoff.initial(),
            multiplier = backoff.multiplier(),
            max = backoff.max_interval(),
            thumb = bound.rule_of_thumb,
            elapsed = policy.max_elapsed(),
            poll = max_poll_interval.as_millis(),
            needed = longest.as_millis(),
        ),
    ))
}
