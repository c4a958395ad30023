//! Background consumers: a message handler retried under the `background`
//! preset, a poison message handed to a dead-letter sink once, a
//! redelivered message that was already applied not applied again.
//!
//! The guide's consumer stack (Watermill's `Retry` with `MaxRetries = 5,
//! InitialInterval = 500ms, Multiplier = 2, MaxInterval = 30s`, then
//! `PoisonQueue` → DLQ, then a deduplicator) in one [`Consumer`]:
//!
//! 1. **Dedup** ([`Dedup`]): the message's id is looked up; a message
//!    already settled (applied or dead-lettered) is acknowledged without
//!    running the handler, one being handled elsewhere is handed back.
//! 2. **Retry** ([`Policy`](crate::retry::Policy), the one retry core): the
//!    handler runs under the consumer's policy, classified by the error's
//!    [`Classify`](crate::Classify); a transient failure that recovers
//!    never reaches the sink.
//! 3. **Record** the message as applied as soon as the handler succeeds,
//!    before the acknowledgement, so that a consumer killed in between
//!    does not apply the redelivery again.
//! 4. **Dead letter**: once the chain is exhausted or the error is
//!    permanent, the message and the last error go to the broker's
//!    dead-letter sink ([`Broker::dead_letter`]), the message is recorded as
//!    dead-lettered, and only then is the original acknowledged: a poison
//!    message is handed off once, and never lost.
//!
//! [`ConsumerConfig::new`] refuses a retry chain that can outlast the
//! broker's ack deadline (the broker would hand the message to another consumer, and
//! the partition behind it would block).
//!
//! # Brokers
//!
//! A broker is one implementation of [`Broker`]: receive, ack, requeue,
//! dead-letter. Three are shipped: `rabbitmq` (feature `rabbitmq`, over
//! `lapin`), `jetstream` (feature `jetstream`, NATS JetStream pull
//! consumers over `async-nats`) and `kafka` (feature `kafka`, a consumer
//! group member over `rdkafka`: `next` is the consumer's `recv`, `ack`
//! stores the offset, `requeue` seeks the partition back to the message,
//! `dead_letter` produces to `<topic>.dlq` with the error in its headers
//! and waits for the delivery report; with retry topics, a transient
//! failure leaves the partition instead of holding it).
//!
//! # Stopping a worker
//!
//! [`Consumer::run`] runs until the broker ends the subscription (a Kafka
//! member never does); [`Consumer::run_until`] takes a shutdown future (a
//! signal, a cancellation token) and stops cleanly: the message in hand
//! is finished and settled, no other is pulled.
//!
//! # Annotated fns inside a handler
//!
//! A handler that calls a `#[retry]` fn (an HTTP call to a downstream
//! API) runs that fn inside the consumer's chain, and there is one
//! retrying layer: **the fn makes one attempt**, and the consumer's chain
//! retries the whole handler under the consumer's policy. The fn's own
//! `max`, `initial`… and its `[retry.*]` section of the configuration file
//! do not apply inside a consumer (they do wherever else the fn is
//! called); a WARN names both chains once. Its `#[circuit_breaker]` still
//! applies to every attempt, and its dependency's errors are counted in
//! `dependency_errors_total` under the fn's own `target` (the API's, where
//! an alert on the API looks), while `http_client_retries_total` counts
//! the attempts under the consumer's, the chain that retries. Size the consumer's policy for the
//! dependency, or call the fn from a task of its own
//! (`tokio::spawn`) to give it its own chain, paying 5 × 3 attempts per
//! message when the dependency is down.
//!
//! # The guide's Kafka rules on each broker
//!
//! The guide writes its consumer rules for Kafka: "the delay blocks the
//! partition: while a handler retries, the other messages of the partition
//! wait; if `InitialInterval · 2^MaxRetries` > `max.poll.interval.ms`,
//! rebalance", and after the retries, `PoisonQueue` → DLQ. What each
//! rule becomes:
//!
//! | the guide's rule (Kafka) | NATS JetStream | RabbitMQ | Kafka (`kafka`) |
//! |---|---|---|---|
//! | the ack deadline: `max.poll.interval.ms`, past which the consumer leaves the group and its partitions go to another | the JetStream consumer's `ack_wait` (30 s by default), past which the server redelivers the message to any puller; `JetStream::subscribe` reads it and refuses a chain that can outlast it | the broker's `consumer_timeout` (30 min by default) or the queue's `x-consumer-timeout`, past which the broker closes the channel and requeues every message on it | `max.poll.interval.ms` itself (300 s by default): `Kafka::subscribe` reads it from the consumer's settings and refuses a chain that can outlast it |
//! | give [`ConsumerConfig::new`] that deadline | `ack_wait` | `consumer_timeout` | `max.poll.interval.ms` (`kafka::max_poll_interval` reads it) |
//! | partition blocking: one message retried holds back those behind it | with `max_ack_pending = 1` (strict order), the whole consumer waits, as a partition does; above 1, the other pullers go on and only this puller waits (the adapter pulls one message at a time, so none waits in its buffer while its `ack_wait` runs) | the adapter's prefetch of one: this consumer waits, the other consumers of the queue go on; order across consumers is not kept | as the guide says: the member handles one message at a time and the rest of its partition waits; with retry topics a transient failure leaves the partition, which goes on |
//! | redelivery after a crash | after `ack_wait` (a closed connection hands nothing back), delivery count + 1 | at once when the channel closes, `redelivered` set | once the group coordinator gives up on the member (`session.timeout.ms`), from the partition's last committed offset, to the member that takes it over (offsets stored but not yet committed come again too) |
//! | `MaxRetries` then `PoisonQueue` → DLQ | the chain runs inside one delivery; the letter is published to a dead-letter subject a stream captures, the publish acknowledged, then the original acked. Keep `max_deliver` unlimited (`-1`) or well above the requeues you expect: past it the server drops the message with only an advisory, no dead letter | the chain runs inside one delivery; the letter is published with publisher confirms to a dead-letter route, then the original acked. The broker's own `x-dead-letter-exchange` cannot carry the error and is not used | the chain runs in place (or through retry topics); the letter is produced to the dead-letter topic, its delivery report awaited, then the original's offset stored |
//! | Kafka's `<topic>.dlq` | a dead-letter stream (`ORDERS_DLQ` on `orders.dlq`) | a dead-letter queue (`orders.dlq`) | `<topic>.dlq`, or one topic of your choice |
//! | the deduplicator's key | `Nats-Msg-Id`, else the stream sequence with its store time | the AMQP `message-id` | the `message-id` header, else `<topic>/<partition>/<offset>` |
//!
//! # Metrics
//!
//! With the label scheme of the HTTP side (`service`, `target` = the
//! consumer's [`Labels`](crate::telemetry::Labels)):
//!
//! | metric | kind | labels |
//! |---|---|---|---|
//! | `http_client_retries_total` | counter, one sample per attempt of the handler ([`RetryMetrics`](crate::telemetry::RetryMetrics)) | `service`, `target`, `attempt`, `result` |
//! | `dependency_errors_total` | counter, failed attempts that are the dependency's fault | `service`, `target`, `reason` |
//! | [`consumer_dead_letters_total`](DEAD_LETTERS_TOTAL) | counter, messages handed to the dead-letter sink | `service`, `target`, `reason` ∈ `permanent`, `exhausted`, `elapsed`, `deadline` |
//! | [`consumer_duplicates_total`](DUPLICATES_TOTAL) | counter, redeliveries of settled messages acknowledged without running the handler | `service`, `target` |
//!
//! Alert on `rate(consumer_dead_letters_total[5m]) > 0`: a dead
//! letter is not transient: look at it by hand.
//!
//! # Example
//!
//! ```
//! use resilience::consumer::{Consumer, ConsumerConfig, Message, MemoryDedup};
//! use resilience::telemetry::Labels;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), resilience::ConfigError> {
//! let config = ConsumerConfig::background(Labels::new("billing", "orders"), Duration::from_secs(300))?;
//! let consumer = Consumer::new(config, |message: Message| async move {
//!     match message.payload() {
//!         b"poison" => Err(std::io::Error::from(std::io::ErrorKind::InvalidData)), // permanent
//!         _ => Ok(()),
//!     }
//! })
//! .with_dedup(MemoryDedup::new());
//!
//! let handled = consumer.handle(Message::new(&b"poison"[..]).with_id("order-1")).await;
//! assert!(handled.disposition().is_dead_letter());
//! # Ok(()) }
//! ```

mod config;
mod dedup;
#[cfg(feature = "jetstream")]
pub mod jetstream;
#[cfg(feature = "kafka")]
pub mod kafka;
mod message;
mod metrics;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
#[cfg(feature = "consumer-redis")]
mod redis;
mod run;
#[cfg(test)]
mod tests;

pub use config::{ChainBound, ConsumerConfig};
pub use dedup::{Begin, Dedup, DedupError, Lease, MemoryDedup, NoDedup, Settled};
pub use message::{Broker, DeadLetter, Message};
pub use metrics::{DEAD_LETTERS_TOTAL, DUPLICATES_TOTAL, describe};
#[cfg(feature = "consumer-redis")]
pub use redis::RedisDedup;
pub use run::{Consumer, Disposition, Handled, Requeue, Summary};
