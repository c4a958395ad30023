#![doc = include_str!("../../idempotency_server.md")]

mod body;
mod config;
mod effect;
mod layer;
mod memory;
#[cfg(feature = "idempotency-redis")]
mod redis;
mod reject;
mod scope;
mod store;

pub use body::ResponseBody;
pub use config::{IdempotencyConfig, IdempotencyConfigBuilder};
pub use effect::EffectNotApplied;
pub use layer::{Idempotency, IdempotencyLayer, ResponseFuture};
pub use memory::MemoryStore;
#[cfg(feature = "idempotency-redis")]
pub use redis::RedisStore;
pub use scope::Scope;
pub use store::{
    Claim, Completion, Entry, Fingerprint, IdempotencyStore, KeyLease, StoreError, StoredResponse,
};
