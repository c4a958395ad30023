//! The consumer: dedup, retry, record, dead letter, acknowledge.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use super::config::ConsumerConfig;
use super::dedup::{Begin, Dedup, DedupError, Lease, NoDedup, Settled};
use super::message::{Broker, DeadLetter, Message};
use super::metrics;
use crate::error::Error;
use crate::retry::{Classify, Event, GiveUp, Policy, PolicyBuilder};
use crate::telemetry::RetryMetrics;

/// The bound on one call to the deduplicator, as the idempotency layer's
/// `store_timeout`: a store that hangs fails closed, fast.
const STORE_TIMEOUT: Duration = Duration::from_secs(1);

/// Settling a record is retried like an HTTP call, each attempt bounded.
const STORE_POLICY: Policy = PolicyBuilder::http()
    .with_attempt_timeout(STORE_TIMEOUT)
    .build_unchecked();

/// Why a message was handed back to the broker unsettled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Requeue {
    /// Another consumer holds the message's id (or a crashed one did,
    /// until its lock expires).
    InFlight,
    /// The deduplicator failed or did not answer in time: fail closed,
    /// the handler did not run.
    DedupUnavailable,
    /// The dead-letter sink refused the letter or did not confirm it: the
    /// message is redelivered and its chain runs again.
    DeadLetterFailed,
}

impl Requeue {
    /// `in_flight`, `dedup_unavailable` or `dead_letter_failed`.
    ///
    /// ```
    /// use resilience::consumer::Requeue;
    ///
    /// assert_eq!(Requeue::InFlight.as_str(), "in_flight");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Requeue::InFlight => "in_flight",
            Requeue::DedupUnavailable => "dedup_unavailable",
            Requeue::DeadLetterFailed => "dead_letter_failed",
        }
    }
}

/// What became of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Disposition {
    /// The handler succeeded after `attempts` attempts; acknowledged.
    Processed {
        /// Attempts made, from 1.
        attempts: u32,
    },
    /// The message was settled before: acknowledged without running the
    /// handler.
    Duplicate(Settled),
    /// The chain gave up: the letter goes (before [`Consumer::settle`]) or
    /// went (after it) to the dead-letter sink, and the original is
    /// acknowledged.
    DeadLetter(DeadLetter),
    /// The chain gave up on a transient error and the broker handed the
    /// message to a later retry ([`Broker::retries_later`]: Kafka's retry
    /// topics): the copy was confirmed, the original acknowledged, and the
    /// message is not recorded as settled, so that the copy runs.
    RetryLater(DeadLetter),
    /// Handed back to the broker, unsettled.
    Requeue(Requeue),
}

impl Disposition {
    /// `true` for [`Disposition::DeadLetter`].
    ///
    /// ```
    /// use resilience::consumer::Disposition;
    ///
    /// assert!(!Disposition::Processed { attempts: 1 }.is_dead_letter());
    /// ```
    pub fn is_dead_letter(&self) -> bool {
        matches!(self, Disposition::DeadLetter(_))
    }
}

/// A message handled but not yet settled with the broker: what
/// [`Consumer::handle`] returns and [`Consumer::settle`] takes.
///
/// Dropping it settles nothing: the broker redelivers the message once
/// its channel closes or its ack deadline passes, and the deduplicator's
/// record (written by `handle` when the handler succeeded) keeps the
/// redelivery from being applied again.
///
/// ```
/// use resilience::consumer::{Consumer, ConsumerConfig, Disposition, Message};
/// use resilience::telemetry::Labels;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), resilience::ConfigError> {
/// let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
/// let consumer = Consumer::new(config, |_: Message| async { Ok::<_, std::io::Error>(()) });
/// let handled = consumer.handle(Message::new(vec![])).await;
/// assert_eq!(handled.disposition(), &Disposition::Processed { attempts: 1 });
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a handled message is settled with the broker by `Consumer::settle`"]
pub struct Handled {
    disposition: Disposition,
    lease: Option<(Lease, Box<str>)>,
}

impl Handled {
    /// What [`Consumer::settle`] will do with the message.
    pub fn disposition(&self) -> &Disposition {
        &self.disposition
    }

    /// The disposition, dropping the rest.
    ///
    /// ```
    /// # use resilience::consumer::{Consumer, ConsumerConfig, Disposition, Message};
    /// # use resilience::telemetry::Labels;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), resilience::ConfigError> {
    /// # let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
    /// # let consumer = Consumer::new(config, |_: Message| async { Ok::<_, std::io::Error>(()) });
    /// let disposition = consumer.handle(Message::new(vec![])).await.into_disposition();
    /// assert!(matches!(disposition, Disposition::Processed { .. }));
    /// # Ok(()) }
    /// ```
    pub fn into_disposition(self) -> Disposition {
        self.disposition
    }
}

/// What [`Consumer::run`] did, message by message, until the subscription
/// ended.
///
/// ```
/// use resilience::consumer::Summary;
///
/// assert_eq!(Summary::default().processed, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Summary {
    /// Messages whose handler succeeded.
    pub processed: u64,
    /// Redeliveries of settled messages, acknowledged without running.
    pub duplicates: u64,
    /// Messages handed to the dead-letter sink.
    pub dead_lettered: u64,
    /// Messages handed to a later retry ([`Disposition::RetryLater`]).
    pub retried_later: u64,
    /// Messages handed back to the broker.
    pub requeued: u64,
    /// Settlements the broker refused (a lost channel): the broker
    /// redelivers those messages.
    pub settle_errors: u64,
}

/// A message handler run as a background consumer: deduplicated,
/// retried under the consumer's policy, dead-lettered once when it cannot
/// succeed.
///
/// `handler` is called once per attempt with a clone of the message; its
/// error type says what may be retried through [`Classify`], and must be
/// buildable from the runtime's [`Error`] (a chain that runs out of time
/// ends with one) and be a `std::error::Error` (its text goes into the dead
/// letter).
///
/// See the [module docs](super) for the order of the steps, and
/// [`run`](Self::run) for a whole subscription.
pub struct Consumer<H, D = NoDedup> {
    config: ConsumerConfig,
    handler: H,
    dedup: D,
}

impl<H, D: fmt::Debug> fmt::Debug for Consumer<H, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("config", &self.config)
            .field("dedup", &self.dedup)
            .finish_non_exhaustive()
    }
}

impl<H> Consumer<H> {
    /// A consumer running `handler` under `config`, without deduplication.
    ///
    /// ```
    /// use resilience::consumer::{Consumer, ConsumerConfig, Message};
    /// use resilience::telemetry::Labels;
    /// use std::time::Duration;
    ///
    /// let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
    /// let consumer = Consumer::new(config, |message: Message| async move {
    ///     println!("{} bytes", message.payload().len());
    ///     Ok::<_, std::io::Error>(())
    /// });
    /// # let _ = consumer;
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn new(config: ConsumerConfig, handler: H) -> Self {
        Self {
            config,
            handler,
            dedup: NoDedup,
        }
    }
}

impl<H, D> Consumer<H, D> {
    /// The same consumer, deduplicating messages by id in `dedup`.
    ///
    /// ```
    /// use resilience::consumer::{Consumer, ConsumerConfig, Message, MemoryDedup};
    /// use resilience::telemetry::Labels;
    /// use std::time::Duration;
    ///
    /// let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
    /// let consumer = Consumer::new(config, |_: Message| async { Ok::<_, std::io::Error>(()) })
    ///     .with_dedup(MemoryDedup::new());
    /// # let _ = consumer;
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn with_dedup<D2: Dedup>(self, dedup: D2) -> Consumer<H, D2> {
        Consumer {
            config: self.config,
            handler: self.handler,
            dedup,
        }
    }

    /// The configuration.
    ///
    /// ```
    /// # use resilience::consumer::{Consumer, ConsumerConfig, Message};
    /// # use resilience::telemetry::Labels;
    /// # use std::time::Duration;
    /// # let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
    /// let consumer = Consumer::new(config, |_: Message| async { Ok::<_, std::io::Error>(()) });
    /// assert_eq!(consumer.config().labels().target(), "orders");
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }
}

impl<H, Fut, E, D> Consumer<H, D>
where
    H: Fn(Message) -> Fut + Send + Sync,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Classify + From<Error> + std::error::Error + Send + Sync + 'static,
    D: Dedup,
{
    /// Runs the handler on `message` (dedup, retry, record), without
    /// settling it with the broker: see [`Handled`].
    ///
    /// ```
    /// use resilience::consumer::{Consumer, ConsumerConfig, Disposition, Message, MemoryDedup, Settled};
    /// use resilience::telemetry::Labels;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), resilience::ConfigError> {
    /// let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
    /// let consumer = Consumer::new(config, |_: Message| async { Ok::<_, std::io::Error>(()) })
    ///     .with_dedup(MemoryDedup::new());
    /// let message = Message::new(vec![]).with_id("order-1");
    /// // Applied, then the consumer "dies" before acknowledging: the
    /// // redelivery is a duplicate.
    /// drop(consumer.handle(message.clone()).await);
    /// let again = consumer.handle(message.with_redelivered(true)).await;
    /// assert_eq!(again.disposition(), &Disposition::Duplicate(Settled::Applied));
    /// # Ok(()) }
    /// ```
    pub async fn handle(&self, message: Message) -> Handled {
        let labels = self.config.labels();
        let lease = match message.id() {
            Some(id) => match self.begin(id).await {
                Ok(Begin::Fresh(lease)) => Some((lease, Box::<str>::from(id))),
                Ok(Begin::Settled(settled)) => {
                    tracing::info!(
                        target: "resilience",
                        consumer = labels.target(),
                        message_id = id,
                        settled = settled.as_str(),
                        "message already settled, acknowledging the redelivery without running it"
                    );
                    metrics::duplicate(labels);
                    return Handled {
                        disposition: Disposition::Duplicate(settled),
                        lease: None,
                    };
                }
                Ok(Begin::InFlight) => {
                    return Handled::requeue(Requeue::InFlight);
                }
                Err(err) => {
                    tracing::warn!(
                        target: "resilience",
                        consumer = labels.target(),
                        message_id = id,
                        error = %err,
                        "deduplicator unavailable, handing the message back without running it"
                    );
                    return Handled::requeue(Requeue::DedupUnavailable);
                }
            },
            None => None,
        };

        let mut ended = (0, GiveUp::Exhausted);
        let capture = |event: &Event<'_, E>| match *event {
            Event::Success { attempt } => ended.0 = attempt,
            Event::GaveUp {
                attempt, reason, ..
            } => ended = (attempt, reason),
            _ => {}
        };
        let result = self
            .config
            .policy()
            .retry(|| Named {
                name: self.config.chain_name(),
                attempt: (self.handler)(message.clone()),
            })
            .keep_last_error()
            .notify_with((RetryMetrics::new(labels), capture))
            .await;
        let (attempts, reason) = ended;
        match result {
            Ok(()) => {
                if let Some((lease, id)) = &lease {
                    self.record(id, *lease, Settled::Applied).await;
                }
                Handled {
                    disposition: Disposition::Processed { attempts },
                    lease: None,
                }
            }
            Err(error) => Handled {
                disposition: Disposition::DeadLetter(DeadLetter::new(
                    message,
                    error_chain(&error),
                    attempts,
                    reason,
                )),
                lease,
            },
        }
    }

    /// Settles a handled message with the broker: acknowledges it, or
    /// publishes its dead letter, records it and then acknowledges it, or
    /// hands it back after the [requeue delay](ConsumerConfig::requeue_delay).
    /// Returns what became of it; an error is the broker's, on the
    /// acknowledgement or the requeue (the broker then redelivers it).
    ///
    /// A dead letter the sink refuses is not lost: the message is handed
    /// back ([`Requeue::DeadLetterFailed`]) and its chain runs again when
    /// it is redelivered.
    pub async fn settle<B: Broker>(
        &self,
        broker: &B,
        delivery: &B::Delivery,
        handled: Handled,
    ) -> Result<Disposition, B::Error> {
        let labels = self.config.labels();
        let Handled { disposition, lease } = handled;
        match disposition {
            Disposition::Processed { .. } | Disposition::Duplicate(_) => {
                broker.ack(delivery).await?;
                Ok(disposition)
            }
            Disposition::Requeue(why) => {
                self.hand_back(broker, delivery, lease).await?;
                Ok(Disposition::Requeue(why))
            }
            // `handle` gives `DeadLetter`; `RetryLater` is what settling
            // it may become, taken the same way if handed back in.
            Disposition::DeadLetter(letter) | Disposition::RetryLater(letter) => {
                let later = broker.retries_later(delivery, &letter);
                if let Err(err) = broker.dead_letter(delivery, &letter).await {
                    tracing::error!(
                        target: "resilience",
                        consumer = labels.target(),
                        message_id = letter.message.id(),
                        error = %err,
                        "the dead-letter sink refused the message, handing it back"
                    );
                    self.hand_back(broker, delivery, lease).await?;
                    return Ok(Disposition::Requeue(Requeue::DeadLetterFailed));
                }
                if later {
                    tracing::info!(
                        target: "resilience",
                        consumer = labels.target(),
                        message_id = letter.message.id(),
                        attempts = letter.attempts,
                        error = %letter.error,
                        "message handed to a later retry"
                    );
                    // The copy carries the same id: it must find no lock
                    // and no settled record.
                    self.release(lease).await;
                    broker.ack(delivery).await?;
                    return Ok(Disposition::RetryLater(letter));
                }
                tracing::warn!(
                    target: "resilience",
                    consumer = labels.target(),
                    message_id = letter.message.id(),
                    attempts = letter.attempts,
                    give_up = letter.reason.as_str(),
                    error = %letter.error,
                    "message dead-lettered"
                );
                metrics::dead_lettered(labels, letter.reason);
                if let Some((lease, id)) = &lease {
                    self.record(id, *lease, Settled::DeadLettered).await;
                }
                broker.ack(delivery).await?;
                Ok(Disposition::DeadLetter(letter))
            }
        }
    }

    /// Handles and settles one delivery.
    pub async fn process<B: Broker>(
        &self,
        broker: &B,
        delivery: &B::Delivery,
    ) -> Result<Disposition, B::Error> {
        let handled = self.handle(broker.message(delivery)).await;
        self.settle(broker, delivery, handled).await
    }

    /// Consumes `broker` one message at a time, in order, until its
    /// subscription ends (`Ok` with what it did) or the broker fails to
    /// deliver (`Err`). A settlement the broker refuses is logged and
    /// counted; the broker redelivers that message.
    ///
    /// When a subscription ends is the broker's: a RabbitMQ consumer when
    /// its channel is closed or the consumer cancelled, a JetStream pull
    /// consumer when it is deleted, a Kafka group member never. To stop a
    /// worker cleanly, use [`run_until`](Self::run_until).
    ///
    /// One message at a time keeps a Kafka partition's order and is what
    /// the ack-deadline check assumes; run several consumers (or several
    /// `run`s over separate channels) for parallelism.
    pub async fn run<B: Broker>(&self, broker: &mut B) -> Result<Summary, B::Error> {
        self.run_until(broker, std::future::pending()).await
    }

    /// [`run`](Self::run) until `shutdown` completes: a clean stop. The
    /// message in hand when it completes is finished (its retry chain, its
    /// dead letter) and settled with the broker; then no other message is
    /// pulled, and the summary is returned. A message the broker had sent
    /// ahead is not settled, so the broker delivers it again (RabbitMQ and
    /// Kafka at once, to another consumer; JetStream once its `ack_wait`
    /// has passed).
    ///
    /// `shutdown` is any future: `tokio::signal::ctrl_c()`, a
    /// `CancellationToken`'s `cancelled()`, a oneshot receiver. Bound the
    /// wait for the message in hand from outside if needed (the retry
    /// chain's `max_elapsed` already bounds it). With Kafka, commit the
    /// stored offsets before dropping the member (`Kafka::commit`).
    ///
    /// ```
    /// use resilience::consumer::{Broker, Consumer, ConsumerConfig, DeadLetter, Message};
    /// use resilience::telemetry::Labels;
    /// use std::time::Duration;
    ///
    /// /// A broker that delivers forever.
    /// struct Endless;
    ///
    /// impl Broker for Endless {
    ///     type Delivery = ();
    ///     type Error = std::convert::Infallible;
    ///     async fn next(&mut self) -> Option<Result<(), Self::Error>> {
    ///         tokio::time::sleep(Duration::from_millis(10)).await;
    ///         Some(Ok(()))
    ///     }
    ///     fn message(&self, _: &()) -> Message {
    ///         Message::new(vec![])
    ///     }
    ///     async fn ack(&self, _: &()) -> Result<(), Self::Error> {
    ///         Ok(())
    ///     }
    ///     async fn requeue(&self, _: &()) -> Result<(), Self::Error> {
    ///         Ok(())
    ///     }
    ///     async fn dead_letter(&self, _: &(), _: &DeadLetter) -> Result<(), Self::Error> {
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), resilience::ConfigError> {
    /// let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
    /// let consumer = Consumer::new(config, |_: Message| async { Ok::<_, std::io::Error>(()) });
    /// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// let worker = async { consumer.run_until(&mut Endless, async { let _ = stopped.await; }).await };
    /// let stopper = async {
    ///     tokio::time::sleep(Duration::from_millis(55)).await;
    ///     let _ = stop.send(());
    /// };
    /// let (summary, ()) = tokio::join!(worker, stopper);
    /// assert_eq!(summary.unwrap().processed, 5);
    /// # Ok(()) }
    /// ```
    pub async fn run_until<B: Broker>(
        &self,
        broker: &mut B,
        shutdown: impl Future<Output = ()>,
    ) -> Result<Summary, B::Error> {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut summary = Summary::default();
        loop {
            let delivery = {
                let mut next = std::pin::pin!(broker.next());
                // The shutdown first: once it has come, no other message
                // is taken even if one is ready.
                std::future::poll_fn(|cx| {
                    if shutdown.as_mut().poll(cx).is_ready() {
                        return std::task::Poll::Ready(None);
                    }
                    next.as_mut().poll(cx)
                })
                .await
            };
            let Some(delivery) = delivery else {
                break;
            };
            let delivery = delivery?;
            match self.process(broker, &delivery).await {
                Ok(Disposition::Processed { .. }) => summary.processed += 1,
                Ok(Disposition::Duplicate(_)) => summary.duplicates += 1,
                Ok(Disposition::DeadLetter(_)) => summary.dead_lettered += 1,
                Ok(Disposition::RetryLater(_)) => summary.retried_later += 1,
                Ok(Disposition::Requeue(_)) => summary.requeued += 1,
                Err(err) => {
                    summary.settle_errors += 1;
                    tracing::warn!(
                        target: "resilience",
                        consumer = self.config.labels().target(),
                        error = %err,
                        "the broker refused a settlement; it will redeliver the message"
                    );
                }
            }
        }
        Ok(summary)
    }

    async fn begin(&self, id: &str) -> Result<Begin, DedupError> {
        let ttl = self.config.ack_deadline();
        match tokio::time::timeout(STORE_TIMEOUT, self.dedup.begin(id, ttl)).await {
            Ok(begun) => begun,
            Err(_) => Err(DedupError::new(Error::AttemptTimeout(STORE_TIMEOUT))),
        }
    }

    /// Writes the settled record, retried; a record that cannot be written
    /// is logged, never a reason to hold the message back.
    async fn record(&self, id: &str, lease: Lease, settled: Settled) {
        let ttl = self.config.settled_ttl();
        let written = STORE_POLICY
            .retry(|| self.dedup.settle(id, lease, settled, ttl))
            .await;
        let problem = match written {
            Ok(true) => return,
            Ok(false) => "the lock had expired and was taken again".to_owned(),
            Err(err) => err.to_string(),
        };
        tracing::error!(
            target: "resilience",
            consumer = self.config.labels().target(),
            message_id = id,
            settled = settled.as_str(),
            problem = %problem,
            "could not record the message as settled: a redelivery may run it again"
        );
    }

    async fn hand_back<B: Broker>(
        &self,
        broker: &B,
        delivery: &B::Delivery,
        lease: Option<(Lease, Box<str>)>,
    ) -> Result<(), B::Error> {
        self.release(lease).await;
        // Waited once: on the broker when it can delay the redelivery,
        // here otherwise.
        if !broker.delays_requeue() {
            tokio::time::sleep(self.config.requeue_delay()).await;
        }
        broker.requeue(delivery).await
    }

    async fn release(&self, lease: Option<(Lease, Box<str>)>) {
        if let Some((lease, id)) = lease {
            let released =
                tokio::time::timeout(STORE_TIMEOUT, self.dedup.release(&id, lease)).await;
            if !matches!(released, Ok(Ok(()))) {
                tracing::warn!(
                    target: "resilience",
                    consumer = self.config.labels().target(),
                    message_id = &*id,
                    "could not release the message's lock: it runs again once the lock expires"
                );
            }
        }
    }
}

impl Handled {
    fn requeue(why: Requeue) -> Self {
        Self {
            disposition: Disposition::Requeue(why),
            lease: None,
        }
    }
}

/// `error: source: source …`, as the dead letter carries it.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}

pin_project_lite::pin_project! {
    /// One attempt of the handler, polled under the consumer's name, so
    /// that a `#[retry]` fn called in the handler names the consumer as
    /// the chain it leaves the retrying to.
    struct Named<F> {
        name: &'static &'static str,
        #[pin]
        attempt: F,
    }
}

impl<F: Future> Future for Named<F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = self.project();
        let _polling = crate::retry::layer::polling(this.name);
        this.attempt.poll(cx)
    }
}
