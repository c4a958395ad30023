//! The NATS JetStream adapter (feature `jetstream`), over `async-nats`'s
//! pull consumers.
//!
//! [`JetStream`] is a [`Broker`]: it pulls one message at a time from a
//! durable (or ephemeral) pull consumer with explicit acknowledgements,
//! acknowledges with `+ACK`, hands back with `-NAK` and the consumer's
//! [requeue delay](super::ConsumerConfig::requeue_delay), and dead-letters
//! by publishing the letter to a subject a stream captures (the publish
//! acknowledged by the server, so the letter is stored before the original
//! is acknowledged), with the error in the headers:
//!
//! | header | value |
//! |---|---|
//! | `x-resilience-error` | the last attempt's error, with its sources (line breaks replaced by spaces: NATS headers are one line) |
//! | `x-resilience-attempts` | attempts made |
//! | `x-resilience-give-up` | `permanent`, `exhausted`, `elapsed` or `deadline` |
//! | `x-resilience-stream` | the stream the message was consumed from |
//! | `x-resilience-subject` | the subject it was published to |
//! | `x-resilience-sequence` | its sequence in that stream |
//!
//! The original's headers are kept, except the `Nats-Expected-*`
//! preconditions (meant for the original stream), and the letter carries
//! the message's id as `Nats-Msg-Id`, so that a letter published twice (a
//! consumer killed between the publish and the acknowledgement) is stored
//! once within the dead-letter stream's duplicate window. `Term` is not
//! used to dead-letter: the server drops a terminated message and only
//! emits an advisory, which cannot carry the error.
//!
//! # The message's id
//!
//! [`Message::id`] is the `Nats-Msg-Id` header when the producer set one:
//! it is the producer's id, the one JetStream itself deduplicates
//! publishes by, and the same for a message published twice. Without it,
//! the id is `<stream>:<sequence>:<published>` (the stream sequence and
//! the time the server stored the message, in nanoseconds since the
//! epoch): the same on every redelivery of one stored message, so a
//! redelivery is still deduplicated; the store time keeps a stream that
//! was deleted and created again (its sequences restarting from 1) from
//! looking like the old one. Two publishes of one payload are then two
//! messages: set `Nats-Msg-Id` when the producer may publish again.
//!
//! `redelivered` is `true` from the second delivery on (the delivery count
//! of the message's metadata, `num_delivered`, above 1).
//!
//! # The ack deadline
//!
//! The ack deadline to give [`ConsumerConfig`] is
//! the JetStream consumer's `ack_wait` (30 s by default: too short for the
//! `background` preset, whose chain may hold a message for 2 min; create
//! the consumer with a longer one). [`JetStream::subscribe`] reads the
//! consumer's configuration from the server and refuses, with
//! [`check_ack_wait`], a configuration whose ack deadline or retry chain is
//! longer than `ack_wait`.
//!
//! ```no_run
//! use resilience::consumer::jetstream::{self, JetStream};
//! use resilience::consumer::{Consumer, ConsumerConfig, Message};
//! use resilience::telemetry::Labels;
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), resilience::consumer::jetstream::async_nats::Error> {
//! let client = jetstream::async_nats::connect("127.0.0.1:4222").await?;
//! let context = jetstream::async_nats::jetstream::new(client);
//! let stream = context.get_stream("ORDERS").await?;
//! let pull = stream.get_consumer("billing").await?; // ack_wait = 5 min
//!
//! let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
//! let mut broker = JetStream::subscribe(context, pull, "orders.dlq", &config).await?;
//! let consumer = Consumer::new(config, |message: Message| async move {
//!     # let _ = message;
//!     Ok::<_, std::io::Error>(())
//! });
//! let summary = consumer.run(&mut broker).await?;
//! println!("{summary:?}");
//! # Ok(()) }
//! ```

use std::fmt;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{AckKind, Context};
use futures_core::Stream;

use super::config::ConsumerConfig;
use super::message::{Broker, DeadLetter, Message};
use crate::error::ConfigError;

/// The driver, re-exported so that the application builds its client and
/// its consumers with the version this adapter is built for (0.51).
pub use async_nats;

/// One delivery: the JetStream message, with what it takes to settle it.
pub type Delivery = async_nats::jetstream::Message;

/// What the adapter can fail with.
///
/// ```
/// use resilience::consumer::jetstream::JetStreamError;
///
/// let err = JetStreamError::Metadata { subject: "orders.new".into() };
/// assert_eq!(err.to_string(), "the message on `orders.new` has no JetStream metadata (is it from a JetStream consumer with explicit acks?)");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JetStreamError {
    /// The consumer's configuration does not fit its `ack_wait`: see
    /// [`check_ack_wait`].
    #[error(transparent)]
    AckWait(#[from] ConfigError),
    /// The consumer's configuration could not be read from the server.
    #[error("could not read the configuration of JetStream consumer `{consumer}`: {source}")]
    Info {
        /// The consumer's name.
        consumer: String,
        /// The driver's error.
        source: async_nats::jetstream::context::ConsumerInfoError,
    },
    /// The pull subscription could not be opened.
    #[error("could not pull from JetStream consumer `{consumer}`: {source}")]
    Subscribe {
        /// The consumer's name.
        consumer: String,
        /// The driver's error.
        source: async_nats::jetstream::consumer::StreamError,
    },
    /// A pull failed (missed heartbeats, a closed connection, a deleted
    /// consumer).
    #[error("pulling from JetStream consumer `{consumer}` failed: {source}")]
    Receive {
        /// The consumer's name.
        consumer: String,
        /// The driver's error.
        source: async_nats::jetstream::consumer::pull::MessagesError,
    },
    /// A delivery without the reply subject JetStream acknowledgements go
    /// to.
    #[error(
        "the message on `{subject}` has no JetStream metadata (is it from a JetStream consumer with explicit acks?)"
    )]
    Metadata {
        /// The subject of the message.
        subject: String,
    },
    /// An `+ACK` or `-NAK` could not be sent.
    #[error("could not send `{kind}` for the message at sequence {sequence}: {source}")]
    Settle {
        /// `+ACK` or `-NAK`.
        kind: &'static str,
        /// The message's stream sequence.
        sequence: u64,
        /// The driver's error.
        source: async_nats::Error,
    },
    /// The dead letter was not stored: no stream captures the subject,
    /// the stream refused it, or its publish acknowledgement did not come.
    #[error(
        "the dead letter was not stored on `{subject}` (does a stream capture that subject?): {source}"
    )]
    DeadLetter {
        /// The dead-letter subject.
        subject: String,
        /// The driver's error.
        source: async_nats::jetstream::context::PublishError,
    },
}

/// Refuses a consumer `config` that does not fit a JetStream consumer
/// whose `ack_wait` is `ack_wait`: the config's ack deadline longer than
/// `ack_wait`, or a retry chain that can hold one message longer (see
/// [`ConsumerConfig::chain_bound`]). JetStream redelivers a message not
/// acknowledged within `ack_wait` to another puller while this one still
/// retries it. The error names both values.
///
/// ```
/// use resilience::consumer::ConsumerConfig;
/// use resilience::consumer::jetstream::check_ack_wait;
/// use resilience::telemetry::Labels;
/// use std::time::Duration;
///
/// let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
/// check_ack_wait(&config, Duration::from_secs(300))?;
///
/// // JetStream's default `ack_wait` is 30 s.
/// let err = check_ack_wait(&config, Duration::from_secs(30)).unwrap_err();
/// assert_eq!((err.field(), err.value()), ("ack_deadline", "300s"));
/// assert!(err.reason().contains("`ack_wait = 30s`"), "{err}");
/// # Ok::<(), resilience::ConfigError>(())
/// ```
pub fn check_ack_wait(config: &ConsumerConfig, ack_wait: Duration) -> Result<(), ConfigError> {
    let deadline = config.ack_deadline();
    let chain = ConsumerConfig::chain_bound(config.policy()).total;
    if deadline <= ack_wait && chain <= ack_wait {
        return Ok(());
    }
    Err(ConfigError::new(
        format!("consumer `{}`", config.labels().target()),
        "ack_deadline",
        format!("{deadline:?}"),
        format!(
            "longer than the JetStream consumer's `ack_wait = {ack_wait:?}` (the retry chain can hold one message for up to {chain:?}): JetStream would redeliver the message to another puller while this one still retries it; give the JetStream consumer an `ack_wait` of at least {longest:?}, or shorten the chain and the ack deadline to fit",
            longest = deadline.max(chain),
        ),
    ))
}

/// A pull consumer of one JetStream stream, as a [`Broker`].
pub struct JetStream {
    context: Context,
    // `async-nats`'s stream is `Send` but not `Sync`; `next` takes it by
    // `&mut self` through `Mutex::get_mut`, never locking.
    messages: Mutex<async_nats::jetstream::consumer::pull::Stream>,
    stream: String,
    consumer: String,
    ack_wait: Duration,
    max_deliver: i64,
    dead_letter: String,
    requeue_delay: Duration,
}

impl fmt::Debug for JetStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JetStream")
            .field("stream", &self.stream)
            .field("consumer", &self.consumer)
            .field("ack_wait", &self.ack_wait)
            .field("max_deliver", &self.max_deliver)
            .field("dead_letter", &self.dead_letter)
            .finish_non_exhaustive()
    }
}

impl JetStream {
    /// Pulls from `consumer` one message at a time (a batch of one, so
    /// that no message waits in the client's buffer while its `ack_wait`
    /// runs) and dead-letters to `dead_letter`, a subject a stream other
    /// than the consumed one captures (or one outside the consumer's
    /// filter). Create the streams and the consumer first, with
    /// `AckPolicy::Explicit` (the adapter owns no topology).
    ///
    /// Reads the consumer's configuration from the server and refuses
    /// `config` when it does not fit its `ack_wait` ([`check_ack_wait`]);
    /// requeues wait `config`'s
    /// [requeue delay](ConsumerConfig::requeue_delay) on the server too.
    ///
    /// ```no_run
    /// use resilience::consumer::ConsumerConfig;
    /// use resilience::consumer::jetstream::{self, JetStream};
    /// use resilience::telemetry::Labels;
    /// use std::time::Duration;
    ///
    /// # async fn run() -> Result<(), resilience::consumer::jetstream::async_nats::Error> {
    /// let context = jetstream::async_nats::jetstream::new(jetstream::async_nats::connect("127.0.0.1:4222").await?);
    /// let pull = context.get_stream("ORDERS").await?.get_consumer("billing").await?;
    /// let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
    /// let broker = JetStream::subscribe(context, pull, "orders.dlq", &config).await?;
    /// assert_eq!(broker.consumer(), "billing");
    /// # Ok(()) }
    /// ```
    pub async fn subscribe(
        context: Context,
        mut consumer: PullConsumer,
        dead_letter: impl Into<String>,
        config: &ConsumerConfig,
    ) -> Result<Self, JetStreamError> {
        let name = consumer.cached_info().name.clone();
        let info = consumer
            .info()
            .await
            .map_err(|source| JetStreamError::Info {
                consumer: name.clone(),
                source,
            })?;
        let (stream, ack_wait, max_deliver) = (
            info.stream_name.clone(),
            info.config.ack_wait,
            info.config.max_deliver,
        );
        check_ack_wait(config, ack_wait)?;
        let messages = consumer
            .stream()
            .max_messages_per_batch(1)
            .messages()
            .await
            .map_err(|source| JetStreamError::Subscribe {
                consumer: name.clone(),
                source,
            })?;
        Ok(Self {
            context,
            messages: Mutex::new(messages),
            stream,
            consumer: name,
            ack_wait,
            max_deliver,
            dead_letter: dead_letter.into(),
            requeue_delay: config.requeue_delay(),
        })
    }

    /// The stream consumed.
    ///
    /// ```no_run
    /// # fn run(broker: resilience::consumer::jetstream::JetStream) {
    /// println!("consuming {}", broker.stream());
    /// # }
    /// ```
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The JetStream consumer's name.
    ///
    /// ```no_run
    /// # fn run(broker: resilience::consumer::jetstream::JetStream) {
    /// println!("as {}", broker.consumer());
    /// # }
    /// ```
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// The JetStream consumer's `ack_wait`, as read when subscribing.
    ///
    /// ```no_run
    /// # fn run(broker: resilience::consumer::jetstream::JetStream) {
    /// println!("ack_wait {:?}", broker.ack_wait());
    /// # }
    /// ```
    pub fn ack_wait(&self) -> std::time::Duration {
        self.ack_wait
    }

    /// The JetStream consumer's `max_deliver` (`-1`: unlimited), as read
    /// when subscribing. A message delivered that many times is dropped by
    /// the server without a dead letter: see the [module docs](super).
    ///
    /// ```no_run
    /// # fn run(broker: resilience::consumer::jetstream::JetStream) {
    /// println!("max_deliver {}", broker.max_deliver());
    /// # }
    /// ```
    pub fn max_deliver(&self) -> i64 {
        self.max_deliver
    }

    /// Where dead letters are published.
    ///
    /// ```no_run
    /// # fn run(broker: resilience::consumer::jetstream::JetStream) {
    /// println!("dead letters to {}", broker.dead_letter_subject());
    /// # }
    /// ```
    pub fn dead_letter_subject(&self) -> &str {
        &self.dead_letter
    }

    /// The dead letter's headers: the original's, plus the error.
    fn letter_headers(&self, delivery: &Delivery, letter: &DeadLetter) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(original) = &delivery.headers {
            for (name, values) in original.iter() {
                if AsRef::<str>::as_ref(name).starts_with("Nats-Expected-") {
                    continue;
                }
                for value in values {
                    headers.append(name.clone(), value.clone());
                }
            }
        }
        let one_line = |text: &str| text.replace(['\r', '\n'], " ");
        headers.insert("x-resilience-error", one_line(&letter.error).as_str());
        headers.insert(
            "x-resilience-attempts",
            letter.attempts.to_string().as_str(),
        );
        headers.insert("x-resilience-give-up", letter.reason.as_str());
        headers.insert("x-resilience-stream", self.stream.as_str());
        headers.insert("x-resilience-subject", delivery.subject.as_str());
        if let Ok(info) = delivery.info() {
            headers.insert(
                "x-resilience-sequence",
                info.stream_sequence.to_string().as_str(),
            );
        }
        if let Some(id) = letter.message.id() {
            headers.insert(async_nats::header::NATS_MESSAGE_ID, id);
        }
        headers
    }

    fn sequence(delivery: &Delivery) -> u64 {
        delivery.info().map_or(0, |info| info.stream_sequence)
    }

    async fn send(&self, delivery: &Delivery, kind: AckKind) -> Result<(), JetStreamError> {
        let name = match kind {
            AckKind::Ack => "+ACK",
            _ => "-NAK",
        };
        if delivery.reply.is_none() {
            return Err(JetStreamError::Metadata {
                subject: delivery.subject.to_string(),
            });
        }
        delivery
            .ack_with(kind)
            .await
            .map_err(|source| JetStreamError::Settle {
                kind: name,
                sequence: Self::sequence(delivery),
                source,
            })
    }
}

impl Broker for JetStream {
    type Delivery = Delivery;
    type Error = JetStreamError;

    async fn next(&mut self) -> Option<Result<Delivery, JetStreamError>> {
        let consumer = &self.consumer;
        let messages = match self.messages.get_mut() {
            Ok(messages) => messages,
            Err(poisoned) => poisoned.into_inner(),
        };
        std::future::poll_fn(|cx| Pin::new(&mut *messages).poll_next(cx))
            .await
            .map(|delivery| {
                delivery.map_err(|source| JetStreamError::Receive {
                    consumer: consumer.clone(),
                    source,
                })
            })
    }

    fn message(&self, delivery: &Delivery) -> Message {
        let info = delivery.info().ok();
        let redelivered = info.as_ref().is_some_and(|info| info.delivered > 1);
        let message = Message::new(&delivery.payload[..]).with_redelivered(redelivered);
        let producer_id = delivery
            .headers
            .as_ref()
            .and_then(|headers| headers.get(async_nats::header::NATS_MESSAGE_ID))
            .map(|id| id.as_str().to_owned())
            .filter(|id| !id.is_empty());
        match (producer_id, info) {
            (Some(id), _) => message.with_id(id),
            (None, Some(info)) => message.with_id(format!(
                "{}:{}:{}",
                info.stream,
                info.stream_sequence,
                info.published.unix_timestamp_nanos()
            )),
            (None, None) => message,
        }
    }

    async fn ack(&self, delivery: &Delivery) -> Result<(), JetStreamError> {
        self.send(delivery, AckKind::Ack).await
    }

    async fn requeue(&self, delivery: &Delivery) -> Result<(), JetStreamError> {
        let delay = Some(self.requeue_delay).filter(|delay| !delay.is_zero());
        self.send(delivery, AckKind::Nak(delay)).await
    }

    /// The server waits the requeue delay (`-NAK` with a delay), so the
    /// puller does not: it goes on with the next message.
    fn delays_requeue(&self) -> bool {
        true
    }

    async fn dead_letter(
        &self,
        delivery: &Delivery,
        letter: &DeadLetter,
    ) -> Result<(), JetStreamError> {
        let failed = |source| JetStreamError::DeadLetter {
            subject: self.dead_letter.clone(),
            source,
        };
        let headers = self.letter_headers(delivery, letter);
        self.context
            .publish_with_headers(self.dead_letter.clone(), headers, delivery.payload.clone())
            .await
            .map_err(failed)?
            .await
            .map_err(failed)?;
        Ok(())
    }
}

/// A header of a dead letter as text (`x-resilience-error`,
/// `x-resilience-attempts`…), for tools that read the dead-letter stream.
///
/// ```
/// use resilience::consumer::jetstream::{async_nats::HeaderMap, header_text};
///
/// let mut headers = HeaderMap::new();
/// headers.insert("x-resilience-give-up", "exhausted");
/// assert_eq!(header_text(&headers, "x-resilience-give-up").as_deref(), Some("exhausted"));
/// assert_eq!(header_text(&headers, "x-other"), None);
/// ```
pub fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).map(|value| value.as_str().to_owned())
}
