#![doc = include_str!("../../kafka.md")]

mod classify;
mod poll_interval;
mod retry_topics;

pub use poll_interval::{check_max_poll_interval, max_poll_interval};
pub use retry_topics::RetryTopics;

use std::fmt;
use std::time::Duration;

use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer as _, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Header, Headers, Message as _, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};

use super::config::ConsumerConfig;
use super::message::{Broker, DeadLetter, Message};
use crate::error::ConfigError;
use crate::retry::{Classify, GiveUp};

/// The driver (0.39), re-exported so that the application builds its
/// settings and its producer with the version this adapter is built for.
pub use rdkafka;

/// One delivery: the record, detached from the consumer.
pub type Delivery = OwnedMessage;

/// How long a dead letter may wait for room in the producer's queue; its
/// delivery is then bounded by the producer's `message.timeout.ms`.
const QUEUE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the adapter can fail with.
///
/// ```
/// use resilience::consumer::kafka::KafkaConsumerError;
/// use resilience::consumer::kafka::rdkafka::error::{KafkaError, RDKafkaErrorCode};
///
/// let err = KafkaConsumerError::DeadLetter {
///     dead_letter: "orders.dlq".into(),
///     topic: "orders".into(),
///     partition: 0,
///     offset: 41,
///     source: Box::new(KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut)),
/// };
/// assert!(err.to_string().starts_with("the dead letter of orders/0 at offset 41 was not delivered to `orders.dlq`"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaConsumerError {
    /// The consumer's settings or the consumer's configuration were refused
    /// (a missing `group.id`, `enable.auto.offset.store = true`, a retry
    /// chain longer than `max.poll.interval.ms`…).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// librdkafka refused to create the consumer.
    #[error("could not create the Kafka consumer of group `{group}`: {source}")]
    Create {
        /// The `group.id`.
        group: String,
        /// The driver's error.
        source: Box<KafkaError>,
    },
    /// The subscription was refused.
    #[error("could not subscribe group `{group}` to {topics:?}: {source}")]
    Subscribe {
        /// The `group.id`.
        group: String,
        /// The topics.
        topics: Vec<String>,
        /// The driver's error.
        source: Box<KafkaError>,
    },
    /// Receiving failed with an error librdkafka does not recover from
    /// by itself (transient ones are logged and skipped).
    #[error("consuming as group `{group}` failed: {source}")]
    Receive {
        /// The `group.id`.
        group: String,
        /// The driver's error.
        source: Box<KafkaError>,
    },
    /// The offset could not be stored: the partition was revoked from this
    /// member (a rebalance) while the message was handled. Its new owner
    /// gets the message again; the deduplicator keeps it applied once.
    #[error(
        "could not store offset {offset} of {topic}/{partition} (was the partition revoked in a rebalance?): {source}"
    )]
    StoreOffset {
        /// The message's topic.
        topic: String,
        /// Its partition.
        partition: i32,
        /// Its offset.
        offset: i64,
        /// The driver's error.
        source: Box<KafkaError>,
    },
    /// Committing the stored offsets failed.
    #[error("could not commit the offsets of group `{group}`: {source}")]
    Commit {
        /// The `group.id`.
        group: String,
        /// The driver's error.
        source: Box<KafkaError>,
    },
    /// The partition could not be sought back to the message.
    #[error("could not seek {topic}/{partition} back to offset {offset}: {source}")]
    Seek {
        /// The message's topic.
        topic: String,
        /// Its partition.
        partition: i32,
        /// Its offset.
        offset: i64,
        /// The driver's error.
        source: Box<KafkaError>,
    },
    /// The dead letter was not delivered (the producer's delivery report
    /// was an error): the original's offset is not stored, and the message
    /// is handed back.
    #[error(
        "the dead letter of {topic}/{partition} at offset {offset} was not delivered to `{dead_letter}`: {source}"
    )]
    DeadLetter {
        /// The dead-letter topic.
        dead_letter: String,
        /// The message's topic.
        topic: String,
        /// Its partition.
        partition: i32,
        /// Its offset.
        offset: i64,
        /// The driver's error.
        source: Box<KafkaError>,
    },
}

/// The consumer's context: logs rebalances and failed commits under the
/// `resilience` target.
#[derive(Debug, Clone, Default)]
pub struct GroupContext {
    group: String,
}

impl ClientContext for GroupContext {}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(partitions) => tracing::info!(
                target: "resilience",
                group = %self.group,
                partitions = %describe(partitions),
                "partitions assigned"
            ),
            Rebalance::Revoke(partitions) => tracing::info!(
                target: "resilience",
                group = %self.group,
                partitions = %describe(partitions),
                "partitions revoked; the stored offsets are committed"
            ),
            Rebalance::Error(err) => tracing::warn!(
                target: "resilience",
                group = %self.group,
                error = %err,
                "rebalance failed"
            ),
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        if let Err(err) = result {
            // `_NO_OFFSET`: nothing was stored since the last commit.
            if err.rdkafka_error_code() != Some(rdkafka::types::RDKafkaErrorCode::NoOffset) {
                tracing::warn!(
                    target: "resilience",
                    group = %self.group,
                    partitions = %describe(offsets),
                    error = %err,
                    "committing the stored offsets failed; they are committed again with the next commit"
                );
            }
        }
    }
}

fn describe(partitions: &TopicPartitionList) -> String {
    let mut text = String::new();
    for element in partitions.elements() {
        if !text.is_empty() {
            text.push_str(", ");
        }
        text.push_str(element.topic());
        text.push('/');
        text.push_str(&element.partition().to_string());
    }
    text
}

/// A Kafka consumer group member, as a [`Broker`].
pub struct Kafka {
    consumer: StreamConsumer<GroupContext>,
    producer: FutureProducer,
    group: String,
    max_poll_interval: Duration,
    auto_commit: bool,
    dead_letter: Option<String>,
    id_header: String,
    topics: Vec<String>,
    retry: Option<RetryTopics>,
    /// Retry partitions paused until their head message is due.
    paused: Vec<(tokio::time::Instant, String, i32)>,
}

impl fmt::Debug for Kafka {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kafka")
            .field("group", &self.group)
            .field("max_poll_interval", &self.max_poll_interval)
            .field("auto_commit", &self.auto_commit)
            .field("dead_letter", &self.dead_letter)
            .field("id_header", &self.id_header)
            .field("topics", &self.topics)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl Kafka {
    /// Joins the consumer group of `settings` (`bootstrap.servers`,
    /// `group.id` and the rest of librdkafka's consumer settings),
    /// subscribed to `topics`, dead-lettering through `producer` to
    /// `<topic>.dlq` (create those topics, or let the broker create them).
    ///
    /// Sets `enable.auto.offset.store = false`, and refuses:
    ///
    /// - `settings` without a `group.id`, or with
    ///   `enable.auto.offset.store = true` (an offset stored before the
    ///   outcome commits a message a crash left unfinished);
    /// - `config` whose retry chain or ack deadline is longer than the
    ///   settings' `max.poll.interval.ms` ([`check_max_poll_interval`]).
    ///
    /// Call it inside a tokio runtime: `rdkafka`'s consumer wakes its
    /// receivers through it.
    ///
    /// The producer is the application's (its `acks` and security
    /// settings): keep `acks = all` (librdkafka's default) so that a
    /// delivered letter is on every in-sync replica before the original is
    /// committed.
    pub fn subscribe(
        settings: &ClientConfig,
        topics: &[&str],
        producer: FutureProducer,
        config: &ConsumerConfig,
    ) -> Result<Self, KafkaConsumerError> {
        const SUBJECT: &str = "Kafka consumer settings";
        let group = match settings.get("group.id") {
            Some(group) if !group.trim().is_empty() => group.to_owned(),
            other => {
                return Err(ConfigError::new(
                    SUBJECT,
                    "group.id",
                    format!("{:?}", other.unwrap_or("")),
                    "the adapter consumes as a member of a consumer group, whose committed offsets say where a member taking over a partition starts: set `group.id`",
                )
                .into());
            }
        };
        if let Some(value) = settings.get("enable.auto.offset.store")
            && value.trim() != "false"
        {
            return Err(ConfigError::new(
                SUBJECT,
                "enable.auto.offset.store",
                value,
                "librdkafka would store each offset as the message is received, so a member that dies mid-handler commits a message it never finished; the adapter stores an offset once the message is settled: leave it unset (the adapter sets `false`)",
            )
            .into());
        }
        let auto_commit = match settings.get("enable.auto.commit").map(str::trim) {
            None | Some("true") => true,
            Some("false") => false,
            Some(other) => {
                return Err(ConfigError::new(
                    SUBJECT,
                    "enable.auto.commit",
                    other,
                    "expected `true` or `false`",
                )
                .into());
            }
        };
        let max_poll_interval = max_poll_interval(settings)?;
        check_max_poll_interval(config, max_poll_interval)?;

        let mut settings = settings.clone();
        settings.set("enable.auto.offset.store", "false");
        let consumer: StreamConsumer<GroupContext> = settings
            .create_with_context(GroupContext {
                group: group.clone(),
            })
            .map_err(|source| KafkaConsumerError::Create {
                group: group.clone(),
                source: Box::new(source),
            })?;
        consumer
            .subscribe(topics)
            .map_err(|source| KafkaConsumerError::Subscribe {
                group: group.clone(),
                topics: topics.iter().map(|t| (*t).to_owned()).collect(),
                source: Box::new(source),
            })?;
        Ok(Self {
            consumer,
            producer,
            group,
            max_poll_interval,
            auto_commit,
            dead_letter: None,
            id_header: "message-id".to_owned(),
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            retry: None,
            paused: Vec::new(),
        })
    }

    /// The same member, handing a message whose chain gave up on a
    /// transient error to retry topics rather than to the dead-letter
    /// topic (see [`RetryTopics`] for what it changes and when to choose
    /// it); subscribed to every `<topic>.retry.<n>` too (create them with
    /// the work topics). Give the consumer a short in-place chain (one
    /// attempt, or a few within a second): the retry topics do the
    /// waiting.
    ///
    /// ```no_run
    /// use resilience::consumer::kafka::{Kafka, RetryTopics};
    /// use std::time::Duration;
    ///
    /// # fn run(broker: Kafka) -> Result<(), Box<dyn std::error::Error>> {
    /// let delays = RetryTopics::new([Duration::from_secs(10), Duration::from_secs(60)])?;
    /// let broker = broker.with_retry_topics(delays)?; // orders.retry.1, orders.retry.2
    /// # drop(broker); Ok(()) }
    /// ```
    pub fn with_retry_topics(mut self, retry: RetryTopics) -> Result<Self, KafkaConsumerError> {
        let mut all = self.topics.clone();
        for topic in &self.topics {
            for level in 1..=retry.delays().len() {
                all.push(retry.topic(topic, level));
            }
        }
        let names: Vec<&str> = all.iter().map(String::as_str).collect();
        self.consumer
            .subscribe(&names)
            .map_err(|source| KafkaConsumerError::Subscribe {
                group: self.group.clone(),
                topics: all.clone(),
                source: Box::new(source),
            })?;
        self.retry = Some(retry);
        Ok(self)
    }

    /// `(base topic, retry level)` of a delivery's topic.
    fn level<'a>(&'a self, topic: &'a str) -> (&'a str, usize) {
        match &self.retry {
            Some(retry) => retry.level(&self.topics, topic),
            None => (topic, 0),
        }
    }

    /// Pauses the partition of a retry copy that is not due yet, its
    /// position put back on the copy, until it is due.
    fn hold(&mut self, message: &OwnedMessage) -> bool {
        let Some(due) = message
            .headers()
            .and_then(|headers| header_text(headers, retry_topics::DUE))
            .and_then(|due| due.parse::<u128>().ok())
        else {
            return false;
        };
        let wait = retry_topics::until(due);
        if wait.is_zero() || self.level(message.topic()).1 == 0 {
            return false;
        }
        let (topic, partition, offset) = (message.topic(), message.partition(), message.offset());
        let mut partitions = TopicPartitionList::new();
        partitions.add_partition(topic, partition);
        let held = self
            .consumer
            .seek(topic, partition, Offset::Offset(offset), Duration::ZERO)
            .and_then(|()| self.consumer.pause(&partitions));
        match held {
            Ok(()) => {
                self.paused.push((
                    tokio::time::Instant::now() + wait,
                    topic.to_owned(),
                    partition,
                ));
                true
            }
            Err(err) => {
                // Not paused: handled now, early rather than never.
                tracing::warn!(
                    target: "resilience",
                    group = %self.group,
                    topic,
                    partition,
                    error = %err,
                    "could not pause a retry partition until its head message is due; handling it now"
                );
                false
            }
        }
    }

    /// Resumes the paused partitions whose head message is due.
    fn resume_due(&mut self) {
        let now = tokio::time::Instant::now();
        let consumer = &self.consumer;
        self.paused.retain(|(until, topic, partition)| {
            if *until > now {
                return true;
            }
            let mut partitions = TopicPartitionList::new();
            partitions.add_partition(topic, *partition);
            // A partition revoked meanwhile cannot be resumed, and needs
            // not: its next owner starts it unpaused.
            let _ = consumer.resume(&partitions);
            false
        });
    }

    /// The same member, dead-lettering every topic's messages to `topic`
    /// instead of `<topic>.dlq`.
    ///
    /// ```no_run
    /// # fn run(broker: resilience::consumer::kafka::Kafka) {
    /// let broker = broker.with_dead_letter_topic("billing.dlq");
    /// assert_eq!(broker.dead_letter_topic("orders"), "billing.dlq");
    /// # }
    /// ```
    #[must_use]
    pub fn with_dead_letter_topic(mut self, topic: impl Into<String>) -> Self {
        self.dead_letter = Some(topic.into());
        self
    }

    /// The same member, reading a message's id from the header `name`
    /// (`message-id` by default).
    ///
    /// ```no_run
    /// # fn run(broker: resilience::consumer::kafka::Kafka) {
    /// let broker = broker.with_id_header("event-id");
    /// # drop(broker); }
    /// ```
    #[must_use]
    pub fn with_id_header(mut self, name: impl Into<String>) -> Self {
        self.id_header = name.into();
        self
    }

    /// Where the dead letters of `topic`'s messages go.
    ///
    /// ```no_run
    /// # fn run(broker: resilience::consumer::kafka::Kafka) {
    /// assert_eq!(broker.dead_letter_topic("orders"), "orders.dlq");
    /// # }
    /// ```
    pub fn dead_letter_topic(&self, topic: &str) -> String {
        match &self.dead_letter {
            Some(fixed) => fixed.clone(),
            None => format!("{topic}.dlq"),
        }
    }

    /// The `group.id`.
    ///
    /// ```no_run
    /// # fn run(broker: resilience::consumer::kafka::Kafka) {
    /// println!("member of {}", broker.group());
    /// # }
    /// ```
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The consumer's `max.poll.interval.ms`, as read when subscribing.
    ///
    /// ```no_run
    /// # fn run(broker: resilience::consumer::kafka::Kafka) {
    /// println!("max.poll.interval.ms = {:?}", broker.max_poll_interval());
    /// # }
    /// ```
    pub fn max_poll_interval(&self) -> Duration {
        self.max_poll_interval
    }

    /// The underlying consumer (its assignment, positions, committed
    /// offsets, pause and resume).
    ///
    /// ```no_run
    /// use resilience::consumer::kafka::rdkafka::consumer::Consumer as _;
    /// # fn run(broker: resilience::consumer::kafka::Kafka) -> Result<(), Box<dyn std::error::Error>> {
    /// println!("{:?}", broker.consumer().assignment()?);
    /// # Ok(()) }
    /// ```
    pub fn consumer(&self) -> &StreamConsumer<GroupContext> {
        &self.consumer
    }

    /// Commits the stored offsets now and waits for the broker's answer
    /// (blocking the thread for that round trip): before a planned
    /// shutdown, so that the next member starts exactly after the last
    /// settled message. Nothing stored since the last commit is not an
    /// error.
    ///
    /// ```no_run
    /// # fn run(broker: resilience::consumer::kafka::Kafka) -> Result<(), resilience::consumer::kafka::KafkaConsumerError> {
    /// broker.commit()?;
    /// # Ok(()) }
    /// ```
    pub fn commit(&self) -> Result<(), KafkaConsumerError> {
        match self.consumer.commit_consumer_state(CommitMode::Sync) {
            Ok(()) => Ok(()),
            Err(err)
                if err.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::NoOffset) =>
            {
                Ok(())
            }
            Err(source) => Err(KafkaConsumerError::Commit {
                group: self.group.clone(),
                source: Box::new(source),
            }),
        }
    }

    /// The letter's (or retry copy's) headers: the original's, then
    /// ours. A copy from a retry topic keeps the first delivery's topic,
    /// partition and offset, and counts the attempts of every level.
    fn letter_headers(
        &self,
        delivery: &Delivery,
        letter: &DeadLetter,
        due: Option<u128>,
    ) -> OwnedHeaders {
        const OURS: [&str; 8] = [
            "x-resilience-error",
            "x-resilience-give-up",
            "x-resilience-attempts",
            "x-resilience-topic",
            "x-resilience-partition",
            "x-resilience-offset",
            "x-resilience-time",
            retry_topics::DUE,
        ];
        let earlier = |name: &str| {
            delivery
                .headers()
                .and_then(|headers| header_text(headers, name))
        };
        let retried = self.level(delivery.topic()).1 > 0;
        let from_first = |name: &str, here: String| match earlier(name) {
            Some(value) if retried => value,
            _ => here,
        };
        let before: u32 = if retried {
            earlier("x-resilience-attempts")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        } else {
            0
        };
        let mut headers = OwnedHeaders::new();
        if let Some(original) = delivery.headers() {
            for header in original.iter() {
                if OURS.contains(&header.key) || header.key == self.id_header {
                    continue;
                }
                headers = headers.insert(Header {
                    key: header.key,
                    value: header.value,
                });
            }
        }
        let mut values = vec![
            letter.error.clone(),
            letter.reason.as_str().to_owned(),
            before.saturating_add(letter.attempts).to_string(),
            from_first("x-resilience-topic", delivery.topic().to_owned()),
            from_first("x-resilience-partition", delivery.partition().to_string()),
            from_first("x-resilience-offset", delivery.offset().to_string()),
            retry_topics::now_millis().to_string(),
        ];
        if let Some(due) = due {
            values.push(due.to_string());
        }
        for (key, value) in OURS.iter().zip(&values) {
            headers = headers.insert(Header {
                key,
                value: Some(value.as_bytes()),
            });
        }
        if let Some(id) = letter.message.id() {
            headers = headers.insert(Header {
                key: &self.id_header,
                value: Some(id.as_bytes()),
            });
        }
        headers
    }
}

/// A header of a record as text (`x-resilience-error`,
/// `x-resilience-attempts`…), for tools that read the dead-letter topic;
/// `None` when absent, empty or not UTF-8.
///
/// ```
/// use resilience::consumer::kafka::header_text;
/// use resilience::consumer::kafka::rdkafka::message::{Header, OwnedHeaders};
///
/// let headers = OwnedHeaders::new().insert(Header { key: "x-resilience-give-up", value: Some("exhausted") });
/// assert_eq!(header_text(&headers, "x-resilience-give-up").as_deref(), Some("exhausted"));
/// assert_eq!(header_text(&headers, "x-other"), None);
/// ```
pub fn header_text(headers: &impl Headers, name: &str) -> Option<String> {
    headers
        .iter()
        .filter(|header| header.key == name)
        .find_map(|header| header.value)
        .and_then(|value| std::str::from_utf8(value).ok())
        .map(str::to_owned)
}

impl Broker for Kafka {
    type Delivery = Delivery;
    type Error = KafkaConsumerError;

    /// The next record; never `None` (a group member consumes until it is
    /// dropped). Errors librdkafka recovers from by itself (a broker down,
    /// a leader moving) are logged and skipped.
    async fn next(&mut self) -> Option<Result<Delivery, KafkaConsumerError>> {
        loop {
            self.resume_due();
            let wake = self.paused.iter().map(|(until, ..)| *until).min();
            let received = {
                let mut recv = std::pin::pin!(self.consumer.recv());
                let mut timer = std::pin::pin!(async {
                    match wake {
                        Some(wake) => tokio::time::sleep_until(wake).await,
                        None => std::future::pending().await,
                    }
                });
                std::future::poll_fn(|cx| {
                    if let std::task::Poll::Ready(received) = recv.as_mut().poll(cx) {
                        return std::task::Poll::Ready(Some(received.map(|m| m.detach())));
                    }
                    timer.as_mut().poll(cx).map(|()| None)
                })
                .await
            };
            match received {
                // A paused partition is due.
                None => continue,
                Some(Ok(message)) => {
                    if self.hold(&message) {
                        continue;
                    }
                    return Some(Ok(message));
                }
                Some(Err(err)) if err.classify().is_retryable() => {
                    tracing::warn!(
                        target: "resilience",
                        group = %self.group,
                        error = %err,
                        "Kafka consumer error; librdkafka recovers by itself"
                    );
                    // Not a tight loop while the cluster is away.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Some(Err(source)) => {
                    return Some(Err(KafkaConsumerError::Receive {
                        group: self.group.clone(),
                        source: Box::new(source),
                    }));
                }
            }
        }
    }

    fn message(&self, delivery: &Delivery) -> Message {
        let message = Message::new(delivery.payload().unwrap_or_default());
        let producer_id = delivery
            .headers()
            .and_then(|headers| header_text(headers, &self.id_header))
            .filter(|id| !id.is_empty());
        match producer_id {
            Some(id) => message.with_id(id),
            None => message.with_id(format!(
                "{}/{}/{}",
                delivery.topic(),
                delivery.partition(),
                delivery.offset()
            )),
        }
    }

    /// Stores the message's offset (librdkafka commits it: see the
    /// [module docs](self)).
    async fn ack(&self, delivery: &Delivery) -> Result<(), KafkaConsumerError> {
        let (topic, partition, offset) =
            (delivery.topic(), delivery.partition(), delivery.offset());
        self.consumer
            .store_offset(topic, partition, offset)
            .map_err(|source| KafkaConsumerError::StoreOffset {
                topic: topic.to_owned(),
                partition,
                offset,
                source: Box::new(source),
            })?;
        if !self.auto_commit {
            self.consumer
                .commit_consumer_state(CommitMode::Async)
                .map_err(|source| KafkaConsumerError::Commit {
                    group: self.group.clone(),
                    source: Box::new(source),
                })?;
        }
        Ok(())
    }

    /// Seeks the partition back to the message, so that it is the
    /// partition's next record again (the records librdkafka fetched
    /// behind it are dropped and fetched again).
    async fn requeue(&self, delivery: &Delivery) -> Result<(), KafkaConsumerError> {
        let (topic, partition, offset) =
            (delivery.topic(), delivery.partition(), delivery.offset());
        // A timeout of zero: librdkafka seeks asynchronously, the records
        // already fetched for the partition are dropped at once.
        self.consumer
            .seek(topic, partition, Offset::Offset(offset), Duration::ZERO)
            .map_err(|source| KafkaConsumerError::Seek {
                topic: topic.to_owned(),
                partition,
                offset,
                source: Box::new(source),
            })
    }

    /// With [retry topics](Kafka::with_retry_topics): a chain that gave
    /// up on a transient error, below the last retry topic.
    fn retries_later(&self, delivery: &Delivery, letter: &DeadLetter) -> bool {
        match &self.retry {
            Some(retry) => {
                letter.reason != GiveUp::Permanent
                    && self.level(delivery.topic()).1 < retry.delays().len()
            }
            None => false,
        }
    }

    /// Produces the letter to the dead-letter topic, or the copy to the
    /// next retry topic, and returns once the broker acknowledged it (the
    /// producer's delivery report).
    async fn dead_letter(
        &self,
        delivery: &Delivery,
        letter: &DeadLetter,
    ) -> Result<(), KafkaConsumerError> {
        let (base, level) = self.level(delivery.topic());
        let (target, due) = match &self.retry {
            Some(retry) if self.retries_later(delivery, letter) => (
                retry.topic(base, level + 1),
                Some(retry_topics::now_millis() + retry.delays()[level].as_millis()),
            ),
            _ => (self.dead_letter_topic(base), None),
        };
        let headers = self.letter_headers(delivery, letter, due);
        let mut record = FutureRecord::<[u8], [u8]>::to(&target).headers(headers);
        if let Some(key) = delivery.key() {
            record = record.key(key);
        }
        if let Some(payload) = delivery.payload() {
            record = record.payload(payload);
        }
        match self.producer.send(record, QUEUE_TIMEOUT).await {
            Ok(_) => Ok(()),
            Err((source, _)) => Err(KafkaConsumerError::DeadLetter {
                dead_letter: target,
                topic: delivery.topic().to_owned(),
                partition: delivery.partition(),
                offset: delivery.offset(),
                source: Box::new(source),
            }),
        }
    }
}
