//! The RabbitMQ adapter (feature `rabbitmq`), over `lapin` on the current
//! tokio runtime.
//!
//! [`RabbitMq`] is a [`Broker`]: it consumes one queue with manual
//! acknowledgements and a prefetch of one, acknowledges with `basic.ack`,
//! hands back with `basic.nack(requeue)`, and dead-letters by publishing
//! to a [`DeadLetterRoute`] on a channel in confirm mode (so the letter is
//! on the broker before the original is acknowledged), with the error in
//! the headers:
//!
//! | header | value |
//! |---|---|
//! | `x-resilience-error` | the last attempt's error, with its sources |
//! | `x-resilience-attempts` | attempts made (`long-uint`) |
//! | `x-resilience-give-up` | `permanent`, `exhausted`, `elapsed` or `deadline` |
//! | `x-resilience-queue` | the queue the message was consumed from |
//!
//! The original's properties (`message-id`, content type, headers…) are
//! kept. RabbitMQ's own dead-lettering (`x-dead-letter-exchange` on
//! `basic.reject`) is not used because it cannot carry the error; a route
//! to the same exchange keeps its topology.
//!
//! The ack deadline to give [`ConsumerConfig`](super::ConsumerConfig) is
//! the broker's `consumer_timeout` (30 min by default), or the queue's
//! `x-consumer-timeout`.
//!
//! ```no_run
//! use resilience::consumer::rabbitmq::{self, DeadLetterRoute, RabbitMq};
//! use resilience::consumer::{Consumer, ConsumerConfig, Message};
//! use resilience::telemetry::Labels;
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let connection = rabbitmq::connect("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
//! let channel = connection.create_channel().await?;
//! let mut broker = RabbitMq::subscribe(channel, "orders", DeadLetterRoute::queue("orders.dlq")).await?;
//!
//! let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(1800))?;
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

use futures_core::Stream;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions,
};
use lapin::publisher_confirm::Confirmation;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, Connection, ConnectionProperties};

use super::message::{Broker, DeadLetter, Message};

/// The driver (3), re-exported so that the application opens its
/// connection and channels with the version this adapter is built for.
pub use lapin;

/// Connects to `uri` (`amqp://user:password@host:port/vhost`) on the
/// current tokio runtime (its executor and reactor), without TLS.
///
/// Call it inside a multi-threaded tokio runtime: `lapin` runs its I/O
/// loop on the runtime's blocking threads.
///
/// ```no_run
/// # async fn run() -> Result<(), lapin::Error> {
/// let connection = resilience::consumer::rabbitmq::connect("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
/// let channel = connection.create_channel().await?;
/// # drop(channel); Ok(()) }
/// ```
pub async fn connect(uri: &str) -> Result<Connection, lapin::Error> {
    let properties = ConnectionProperties::default()
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio::current());
    Connection::connect(uri, properties).await
}

/// Where dead letters are published: an exchange and a routing key.
///
/// ```
/// use resilience::consumer::rabbitmq::DeadLetterRoute;
///
/// let direct = DeadLetterRoute::queue("orders.dlq");
/// assert_eq!((direct.exchange(), direct.routing_key()), ("", "orders.dlq"));
/// let dlx = DeadLetterRoute::new("dlx", "orders");
/// assert_eq!((dlx.exchange(), dlx.routing_key()), ("dlx", "orders"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterRoute {
    exchange: String,
    routing_key: String,
}

impl DeadLetterRoute {
    /// Straight into the queue `queue`, through the default exchange.
    pub fn queue(queue: impl Into<String>) -> Self {
        Self::new("", queue)
    }

    /// Through `exchange` (a dead-letter exchange), with `routing_key`.
    pub fn new(exchange: impl Into<String>, routing_key: impl Into<String>) -> Self {
        Self {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
        }
    }

    /// The exchange (`""` for the default one).
    pub fn exchange(&self) -> &str {
        &self.exchange
    }

    /// The routing key.
    pub fn routing_key(&self) -> &str {
        &self.routing_key
    }
}

/// What the adapter can fail with: the driver's error, or a dead letter
/// the broker did not take.
///
/// ```
/// use resilience::consumer::rabbitmq::RabbitError;
///
/// let err = RabbitError::Unroutable { exchange: String::new(), routing_key: "orders.dlq".into() };
/// assert_eq!(err.to_string(), "the dead letter could not be routed: exchange `` routing key `orders.dlq` (is the dead-letter queue declared?)");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RabbitError {
    /// The driver's error: a closed channel or connection, a protocol
    /// error.
    #[error(transparent)]
    Lapin(#[from] lapin::Error),
    /// The broker nacked the dead letter.
    #[error("the broker refused the dead letter (publisher confirm nack)")]
    Nacked,
    /// No queue is bound to the dead-letter route: the letter came back.
    #[error(
        "the dead letter could not be routed: exchange `{exchange}` routing key `{routing_key}` (is the dead-letter queue declared?)"
    )]
    Unroutable {
        /// The route's exchange.
        exchange: String,
        /// The route's routing key.
        routing_key: String,
    },
}

/// A subscription to one queue, as a [`Broker`].
pub struct RabbitMq {
    channel: Channel,
    consumer: lapin::Consumer,
    queue: String,
    dead_letter: DeadLetterRoute,
}

impl fmt::Debug for RabbitMq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitMq")
            .field("channel", &self.channel.id())
            .field("queue", &self.queue)
            .field("dead_letter", &self.dead_letter)
            .finish_non_exhaustive()
    }
}

impl RabbitMq {
    /// Consumes `queue` on `channel` with manual acknowledgements and a
    /// prefetch of one, and puts the channel in confirm mode for the dead
    /// letters published to `dead_letter`. Declare the queues first (the
    /// adapter owns no topology).
    ///
    /// ```no_run
    /// use resilience::consumer::rabbitmq::{self, DeadLetterRoute, RabbitMq};
    ///
    /// # async fn run() -> Result<(), lapin::Error> {
    /// let connection = rabbitmq::connect("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
    /// let broker = RabbitMq::subscribe(connection.create_channel().await?, "orders", DeadLetterRoute::queue("orders.dlq")).await?;
    /// assert_eq!(broker.queue(), "orders");
    /// # Ok(()) }
    /// ```
    pub async fn subscribe(
        channel: Channel,
        queue: &str,
        dead_letter: DeadLetterRoute,
    ) -> Result<Self, lapin::Error> {
        channel.basic_qos(1, BasicQosOptions::default()).await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        let consumer = channel
            .basic_consume(
                queue,
                "",
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(Self {
            channel,
            consumer,
            queue: queue.to_owned(),
            dead_letter,
        })
    }

    /// The channel, to close it (which hands every unacknowledged message
    /// back to the broker).
    ///
    /// ```no_run
    /// # async fn run(broker: resilience::consumer::rabbitmq::RabbitMq) -> Result<(), lapin::Error> {
    /// broker.channel().close(200, "bye").await?;
    /// # Ok(()) }
    /// ```
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// The queue consumed.
    ///
    /// ```no_run
    /// # fn run(broker: resilience::consumer::rabbitmq::RabbitMq) {
    /// println!("consuming {}", broker.queue());
    /// # }
    /// ```
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Where dead letters go.
    ///
    /// ```no_run
    /// # fn run(broker: resilience::consumer::rabbitmq::RabbitMq) {
    /// println!("dead letters to {:?}", broker.dead_letter_route());
    /// # }
    /// ```
    pub fn dead_letter_route(&self) -> &DeadLetterRoute {
        &self.dead_letter
    }

    /// The dead letter's headers: the original's, plus the error.
    fn letter_headers(&self, delivery: &Delivery, letter: &DeadLetter) -> FieldTable {
        let mut headers = delivery.properties.headers().clone().unwrap_or_default();
        let text = |s: &str| AMQPValue::LongString(s.to_owned().into());
        headers.insert("x-resilience-error".into(), text(&letter.error));
        headers.insert(
            "x-resilience-attempts".into(),
            AMQPValue::LongUInt(letter.attempts),
        );
        headers.insert("x-resilience-give-up".into(), text(letter.reason.as_str()));
        headers.insert("x-resilience-queue".into(), text(&self.queue));
        headers
    }
}

impl Broker for RabbitMq {
    type Delivery = Delivery;
    type Error = RabbitError;

    async fn next(&mut self) -> Option<Result<Delivery, RabbitError>> {
        let consumer = &mut self.consumer;
        std::future::poll_fn(|cx| Pin::new(&mut *consumer).poll_next(cx))
            .await
            .map(|delivery| delivery.map_err(RabbitError::from))
    }

    fn message(&self, delivery: &Delivery) -> Message {
        let message = Message::new(delivery.data.as_slice()).with_redelivered(delivery.redelivered);
        match delivery.properties.message_id() {
            Some(id) => message.with_id(id.as_str()),
            None => message,
        }
    }

    async fn ack(&self, delivery: &Delivery) -> Result<(), RabbitError> {
        delivery.ack(BasicAckOptions::default()).await?;
        Ok(())
    }

    async fn requeue(&self, delivery: &Delivery) -> Result<(), RabbitError> {
        delivery
            .nack(BasicNackOptions {
                multiple: false,
                requeue: true,
            })
            .await?;
        Ok(())
    }

    async fn dead_letter(
        &self,
        delivery: &Delivery,
        letter: &DeadLetter,
    ) -> Result<(), RabbitError> {
        let properties = delivery
            .properties
            .clone()
            .with_headers(self.letter_headers(delivery, letter));
        let confirm = self
            .channel
            .basic_publish(
                self.dead_letter.exchange(),
                self.dead_letter.routing_key(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &delivery.data,
                properties,
            )
            .await?
            .await?;
        match confirm {
            Confirmation::Ack(None) | Confirmation::NotRequested => Ok(()),
            Confirmation::Ack(Some(_)) => Err(RabbitError::Unroutable {
                exchange: self.dead_letter.exchange().to_owned(),
                routing_key: self.dead_letter.routing_key().to_owned(),
            }),
            Confirmation::Nack(_) => Err(RabbitError::Nacked),
        }
    }
}

/// A header of a dead letter as text (`x-resilience-error`,
/// `x-resilience-give-up`, `x-resilience-queue`), for tools that read the
/// dead-letter queue.
///
/// ```
/// use lapin::types::{AMQPValue, FieldTable};
/// use resilience::consumer::rabbitmq::header_text;
///
/// let mut headers = FieldTable::default();
/// headers.insert("x-resilience-give-up".into(), AMQPValue::LongString("exhausted".to_owned().into()));
/// assert_eq!(header_text(&headers, "x-resilience-give-up").as_deref(), Some("exhausted"));
/// assert_eq!(header_text(&headers, "x-other"), None);
/// ```
pub fn header_text(headers: &FieldTable, name: &str) -> Option<String> {
    match headers.inner().get(&ShortString::from(name))? {
        AMQPValue::LongString(text) => Some(String::from_utf8_lossy(text.as_bytes()).into_owned()),
        AMQPValue::ShortString(text) => Some(text.as_str().to_owned()),
        AMQPValue::LongUInt(n) => Some(n.to_string()),
        _ => None,
    }
}
