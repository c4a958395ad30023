#![doc = include_str!("../consumer.md")]

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
