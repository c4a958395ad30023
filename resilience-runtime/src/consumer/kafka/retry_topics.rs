//! Retry topics: a message that failed transiently leaves its partition
//! for `<topic>.retry.1`, `.retry.2`, … with growing delays, so that the
//! messages behind it go on.

use std::time::{Duration, SystemTime};

use crate::error::ConfigError;

/// The header of a retry copy saying when it is due, in milliseconds
/// since the Unix epoch.
pub(super) const DUE: &str = "x-resilience-due";

/// The delays of the retry topics, one topic per delay: a message whose
/// chain gave up on a transient error goes to `<topic>.retry.1`, to be
/// handled again once the first delay has passed; failing there, to
/// `<topic>.retry.2` after the second; after the last, to the dead-letter
/// topic. A permanent error goes to the dead-letter topic at once.
///
/// A retry topic's partition whose head message is not yet due is
/// **paused** until it is (the member goes on with its other partitions
/// and keeps polling, so `max.poll.interval.ms` is never at stake), and
/// never slept on.
///
/// # Which mode to choose
///
/// - **In place** (the default: the consumer's chain retries inside the
///   partition): keeps the partition's order — a message is applied only
///   after those before it — at the price of the partition waiting
///   while one message retries, and of a chain bounded by
///   `max.poll.interval.ms`. Choose it when order matters (the events of
///   one account, one order), or when failures are short (a dependency's
///   blip retried in milliseconds).
/// - **Retry topics** (Uber's retry topics, Spring Kafka's
///   `@RetryableTopic`): the partition goes on at once; a failing message
///   is retried minutes later without holding anything. **Order is lost**
///   for the retried message: the messages behind it (of its key too)
///   are applied before it, and two retried messages of one key may be
///   applied in either order. Choose it when messages are independent and
///   a dependency's outage can last longer than a partition may wait.
///
/// Both can be combined: a short in-place chain (a few attempts within a
/// second) for blips, then the retry topics for outages.
///
/// ```
/// use resilience::consumer::kafka::RetryTopics;
/// use std::time::Duration;
///
/// let retry = RetryTopics::new([Duration::from_secs(10), Duration::from_secs(60), Duration::from_secs(600)])?;
/// assert_eq!(retry.topic("orders", 2), "orders.retry.2");
/// assert_eq!(retry.delays().len(), 3);
/// assert!(RetryTopics::new([]).is_err());
/// # Ok::<(), resilience::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryTopics {
    delays: Vec<Duration>,
}

impl RetryTopics {
    /// One retry topic per delay, in order. Refused: no delay, a zero
    /// delay, or a delay shorter than the one before it (the retries would
    /// not back off).
    pub fn new(delays: impl IntoIterator<Item = Duration>) -> Result<Self, ConfigError> {
        let delays: Vec<Duration> = delays.into_iter().collect();
        let subject = "Kafka retry topics";
        if delays.is_empty() {
            return Err(ConfigError::new(
                subject,
                "delays",
                "[]",
                "give at least one delay (one retry topic each)",
            ));
        }
        for (n, pair) in delays.windows(2).enumerate() {
            if pair[1] < pair[0] {
                return Err(ConfigError::new(
                    subject,
                    "delays",
                    format!("{delays:?}"),
                    format!(
                        "delay {} ({:?}) is shorter than the one before it ({:?}): retries must back off",
                        n + 2,
                        pair[1],
                        pair[0]
                    ),
                ));
            }
        }
        if delays.contains(&Duration::ZERO) {
            return Err(ConfigError::new(
                subject,
                "delays",
                format!("{delays:?}"),
                "a zero delay retries at once, in a loop through the broker: give each retry topic a delay",
            ));
        }
        Ok(Self { delays })
    }

    /// The delays, one per retry topic.
    ///
    /// ```
    /// # use resilience::consumer::kafka::RetryTopics;
    /// # use std::time::Duration;
    /// let retry = RetryTopics::new([Duration::from_secs(1)])?;
    /// assert_eq!(retry.delays(), [Duration::from_secs(1)]);
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn delays(&self) -> &[Duration] {
        &self.delays
    }

    /// The name of `topic`'s retry topic of `level` (from 1).
    ///
    /// ```
    /// # use resilience::consumer::kafka::RetryTopics;
    /// # use std::time::Duration;
    /// let retry = RetryTopics::new([Duration::from_secs(1)])?;
    /// assert_eq!(retry.topic("orders", 1), "orders.retry.1");
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn topic(&self, topic: &str, level: usize) -> String {
        format!("{topic}.retry.{level}")
    }

    /// `(base topic, level)` of `topic` among `bases`: level 0 for a base
    /// topic itself or a topic that is not a retry topic.
    pub(super) fn level<'a>(&self, bases: &'a [String], topic: &'a str) -> (&'a str, usize) {
        for base in bases {
            if let Some(rest) = topic
                .strip_prefix(base.as_str())
                .and_then(|rest| rest.strip_prefix(".retry."))
                && let Ok(level) = rest.parse::<usize>()
                && (1..=self.delays.len()).contains(&level)
            {
                return (base, level);
            }
        }
        (topic, 0)
    }
}

/// Milliseconds since the Unix epoch, now.
pub(super) fn now_millis() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis())
}

/// How long until a copy due at `due` (milliseconds since the epoch).
pub(super) fn until(due: u128) -> Duration {
    let wait = due.saturating_sub(now_millis());
    Duration::from_millis(u64::try_from(wait).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_read_from_the_topic_name() {
        let retry = RetryTopics::new([Duration::from_secs(1), Duration::from_secs(2)]).unwrap();
        let bases = vec!["orders".to_owned(), "orders.eu".to_owned()];
        assert_eq!(retry.level(&bases, "orders"), ("orders", 0));
        assert_eq!(retry.level(&bases, "orders.retry.1"), ("orders", 1));
        assert_eq!(retry.level(&bases, "orders.eu.retry.2"), ("orders.eu", 2));
        // Past the last level, or not a number: not a retry topic of ours.
        assert_eq!(retry.level(&bases, "orders.retry.3"), ("orders.retry.3", 0));
        assert_eq!(retry.level(&bases, "orders.retry.x"), ("orders.retry.x", 0));
    }

    #[test]
    fn delays_must_back_off() {
        let err = RetryTopics::new([Duration::from_secs(2), Duration::from_secs(1)]).unwrap_err();
        assert_eq!(err.field(), "delays");
        assert!(
            err.reason().contains("shorter than the one before it"),
            "{err}"
        );
        assert!(RetryTopics::new([Duration::ZERO]).is_err());
    }
}
