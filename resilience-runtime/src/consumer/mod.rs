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
//! dead-letter. `rabbitmq` (feature `rabbitmq`, over `lapin`) is the one
//! shipped. A Kafka adapter is one file too: `next` is the consumer's
//! `recv`, `ack` stores the offset, `requeue` seeks the partition back to
//! the message, `dead_letter` produces to `<topic>.dlq` with the error in
//! its headers and waits for the delivery report.
//!
//! # Metrics
//!
//! With the label scheme of the HTTP side (`service`, `target` = the
//! consumer's [`Labels`](crate::telemetry::Labels)):
//!
//! | metric | kind | labels |
//! |---|---|---|
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
