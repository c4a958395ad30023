//! The broker-agnostic message, dead letter, and adapter contract.

use std::future::Future;
use std::sync::Arc;

use crate::retry::GiveUp;

/// One message as the handler sees it: its id (for deduplication), its
/// payload, and whether the broker delivered it before. Cheap to clone:
/// the handler gets a clone for every attempt.
///
/// ```
/// use resilience::consumer::Message;
///
/// let message = Message::new(&b"{\"order\":1}"[..]).with_id("order-1").with_redelivered(true);
/// assert_eq!(message.id(), Some("order-1"));
/// assert_eq!(message.payload(), b"{\"order\":1}");
/// assert!(message.redelivered());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    id: Option<Arc<str>>,
    payload: Arc<[u8]>,
    redelivered: bool,
}

impl Message {
    /// A message without an id, never delivered before.
    ///
    /// ```
    /// use resilience::consumer::Message;
    ///
    /// let message = Message::new(vec![1, 2, 3]);
    /// assert_eq!((message.id(), message.payload()), (None, &[1, 2, 3][..]));
    /// ```
    pub fn new(payload: impl Into<Arc<[u8]>>) -> Self {
        Self {
            id: None,
            payload: payload.into(),
            redelivered: false,
        }
    }

    /// The same message with the id the producer gave it (AMQP's
    /// `message-id`, a Kafka header or key): what deduplication is keyed
    /// by. A message without one is never deduplicated.
    ///
    /// ```
    /// use resilience::consumer::Message;
    ///
    /// assert_eq!(Message::new(vec![]).with_id("m-1").id(), Some("m-1"));
    /// ```
    #[must_use]
    pub fn with_id(mut self, id: impl Into<Arc<str>>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The same message, marked as delivered before (or not).
    ///
    /// ```
    /// use resilience::consumer::Message;
    ///
    /// assert!(Message::new(vec![]).with_redelivered(true).redelivered());
    /// ```
    #[must_use]
    pub fn with_redelivered(mut self, redelivered: bool) -> Self {
        self.redelivered = redelivered;
        self
    }

    /// The producer's id, if any.
    ///
    /// ```
    /// # use resilience::consumer::Message;
    /// assert_eq!(Message::new(vec![]).id(), None);
    /// ```
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The body.
    ///
    /// ```
    /// # use resilience::consumer::Message;
    /// assert_eq!(Message::new(&b"hi"[..]).payload(), b"hi");
    /// ```
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// `true` when the broker says it delivered this message before (to
    /// this consumer or another one).
    ///
    /// ```
    /// # use resilience::consumer::Message;
    /// assert!(!Message::new(vec![]).redelivered());
    /// ```
    pub fn redelivered(&self) -> bool {
        self.redelivered
    }
}

/// A message the consumer gave up on, for the dead-letter sink: the
/// message, the last error, how many attempts were made and why the chain
/// stopped.
///
/// ```
/// use resilience::consumer::{DeadLetter, Message};
/// use resilience::retry::GiveUp;
///
/// let letter = DeadLetter::new(Message::new(vec![]), "invalid order", 6, GiveUp::Exhausted);
/// assert_eq!((letter.attempts, letter.reason), (6, GiveUp::Exhausted));
/// assert_eq!(letter.error, "invalid order");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// The message, as the handler saw it.
    pub message: Message,
    /// The last attempt's error, with its sources (`error: source: …`).
    pub error: String,
    /// Attempts made, from 1.
    pub attempts: u32,
    /// Why the chain stopped: a permanent error, attempts used up,
    /// `max_elapsed` or a deadline.
    pub reason: GiveUp,
}

impl DeadLetter {
    /// A dead letter of `message` after `attempts`, stopped for `reason` on
    /// `error`.
    ///
    /// ```
    /// use resilience::consumer::{DeadLetter, Message};
    /// use resilience::retry::GiveUp;
    ///
    /// let letter = DeadLetter::new(Message::new(vec![]).with_id("m"), "bad", 1, GiveUp::Permanent);
    /// assert_eq!(letter.message.id(), Some("m"));
    /// ```
    pub fn new(message: Message, error: impl Into<String>, attempts: u32, reason: GiveUp) -> Self {
        Self {
            message,
            error: error.into(),
            attempts,
            reason,
        }
    }
}

/// What a broker adapter implements: receive a delivery, see it as a
/// [`Message`], and settle it one of three ways. Kept this small so that
/// an adapter is one file (see the [module docs](super) for Kafka).
///
/// # Contract
///
/// - [`ack`](Self::ack): the message is done; the broker must not
///   deliver it again.
/// - [`requeue`](Self::requeue): hand it back unsettled, to be delivered
///   again (to this consumer or another).
/// - [`dead_letter`](Self::dead_letter): publish the letter to the
///   dead-letter sink and return once the broker confirmed it, **without**
///   acknowledging the original: the consumer acknowledges it afterwards,
///   so that a failure in between redelivers the message rather than
///   losing it.
///
/// # Example
///
/// An in-memory broker:
///
/// ```
/// use resilience::consumer::{Broker, DeadLetter, Message};
/// use std::sync::Mutex;
///
/// #[derive(Default)]
/// struct Vec2 {
///     inbox: Vec<Message>,
///     acked: Mutex<Vec<Message>>,
///     dead: Mutex<Vec<DeadLetter>>,
/// }
///
/// impl Broker for Vec2 {
///     type Delivery = Message;
///     type Error = std::convert::Infallible;
///     async fn next(&mut self) -> Option<Result<Message, Self::Error>> {
///         self.inbox.pop().map(Ok)
///     }
///     fn message(&self, delivery: &Message) -> Message {
///         delivery.clone()
///     }
///     async fn ack(&self, delivery: &Message) -> Result<(), Self::Error> {
///         self.acked.lock().unwrap().push(delivery.clone());
///         Ok(())
///     }
///     async fn requeue(&self, _: &Message) -> Result<(), Self::Error> {
///         Ok(())
///     }
///     async fn dead_letter(&self, _: &Message, letter: &DeadLetter) -> Result<(), Self::Error> {
///         self.dead.lock().unwrap().push(letter.clone());
///         Ok(())
///     }
/// }
/// # let _ = Vec2::default();
/// ```
pub trait Broker: Send + Sync {
    /// One received message, with what the broker needs to settle it.
    type Delivery: Send + Sync;
    /// The driver's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The next delivery; `None` once the subscription ended.
    fn next(&mut self) -> impl Future<Output = Option<Result<Self::Delivery, Self::Error>>> + Send;

    /// The delivery as the handler sees it.
    fn message(&self, delivery: &Self::Delivery) -> Message;

    /// Acknowledges the delivery: it is done.
    fn ack(
        &self,
        delivery: &Self::Delivery,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Hands the delivery back to the broker, unsettled.
    fn requeue(
        &self,
        delivery: &Self::Delivery,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Whether [`requeue`](Self::requeue) delays the redelivery on the
    /// broker by the [requeue delay](super::ConsumerConfig::requeue_delay)
    /// itself (JetStream's `-NAK` with a delay). Then the consumer hands
    /// the message back at once and goes on with the next; otherwise
    /// (`false`, the default: RabbitMQ redelivers a requeued message at
    /// once) it waits the delay before the requeue.
    fn delays_requeue(&self) -> bool {
        false
    }

    /// Whether [`dead_letter`](Self::dead_letter) hands `letter` to a
    /// later retry rather than to the dead-letter sink (Kafka's retry
    /// topics, for a message whose chain gave up on a transient error).
    /// Then the consumer does not record the message as settled (the copy
    /// carries its id and must run), counts no dead letter, and reports
    /// [`Disposition::RetryLater`](super::Disposition::RetryLater).
    /// `false` by default.
    fn retries_later(&self, delivery: &Self::Delivery, letter: &DeadLetter) -> bool {
        let _ = (delivery, letter);
        false
    }

    /// Publishes `letter` to the dead-letter sink, confirmed, without
    /// settling the delivery.
    fn dead_letter(
        &self,
        delivery: &Self::Delivery,
        letter: &DeadLetter,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
}
