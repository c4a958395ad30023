//! The consumer's deduplicator in Redis, shared by every replica.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;

use super::dedup::{Begin, Dedup, DedupError, Lease, Settled};
use crate::idempotency::records::RedisRecords;

/// A [`Dedup`] in Redis, with the key discipline of the idempotency
/// layer's `RedisStore`: one Redis string per message id, `dedup:<id>`
/// (the prefix is configurable), holding `lock:<lease token>` while a
/// handler runs and `applied` or `dead_lettered` once the message is
/// settled.
///
/// - `begin` is one `SET dedup:<id> lock:<token> NX PX <lock ttl> GET`
///   (Redis ≥ 7.0): it takes the id, or returns what holds it, atomically;
/// - `settle` and `release` are Lua scripts that compare the stored value
///   with the caller's lock before replacing (`SET … PX <ttl>`) or deleting
///   it, so a consumer whose lock expired cannot clobber its successor's.
///
/// Expiry is Redis' own: a crashed consumer's lock vanishes after the
/// lock ttl (the ack deadline), settled records after the settled ttl.
///
/// The HTTP layer's `RedisStore` runs on the same records (one
/// implementation of the lease discipline and of the connection): that
/// face stores responses keyed by `Idempotency-Key` with a request
/// fingerprint, this one only "this id was settled, and how". Give each
/// consumer group its own prefix: two groups reading one message must not
/// share a record.
///
/// # When Redis is down
///
/// [`connect`](Self::connect) configures the connection manager to fail
/// fast, as the idempotency layer's store does: a connection opens within
/// 250 ms or fails, a command is answered within 500 ms or fails, and a
/// lost connection is re-established by the next command. A consumer whose
/// deduplicator fails hands the message back to the broker, so a dead
/// Redis costs a redelivery, not a stalled consumer.
///
/// ```no_run
/// use resilience::consumer::RedisDedup;
///
/// # async fn run() -> Result<(), resilience::consumer::DedupError> {
/// let dedup = RedisDedup::connect("redis://127.0.0.1:6379/").await?.with_prefix("dedup:orders:");
/// assert_eq!(dedup.redis_key("order-1"), "dedup:orders:order-1");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisDedup {
    records: RedisRecords,
}

impl RedisDedup {
    /// The default key prefix: `dedup:`.
    pub const DEFAULT_PREFIX: &'static str = "dedup:";

    /// Connects to `url` (`redis://host:port/db`) with a connection manager
    /// that fails fast (see [When Redis is down](Self#when-redis-is-down)).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), resilience::consumer::DedupError> {
    /// let dedup = resilience::consumer::RedisDedup::connect("redis://127.0.0.1:6379/").await?;
    /// # drop(dedup); Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, DedupError> {
        let records = RedisRecords::connect(
            url,
            crate::redis_link::manager_config(),
            Self::DEFAULT_PREFIX.into(),
        )
        .await
        .map_err(DedupError::new)?;
        Ok(Self { records })
    }

    /// A deduplicator over an existing connection manager (one the
    /// application shares with its idempotency store, say).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let manager = redis::aio::ConnectionManager::new(client).await?;
    /// let dedup = resilience::consumer::RedisDedup::new(manager);
    /// # drop(dedup); Ok(()) }
    /// ```
    pub fn new(connection: ConnectionManager) -> Self {
        Self {
            records: RedisRecords::new(connection, Self::DEFAULT_PREFIX.into()),
        }
    }

    /// Replaces the `dedup:` prefix, e.g. `dedup:orders:` for one consumer
    /// group.
    ///
    /// ```no_run
    /// # async fn run(dedup: resilience::consumer::RedisDedup) {
    /// let dedup = dedup.with_prefix("dedup:orders:");
    /// assert_eq!(dedup.prefix(), "dedup:orders:");
    /// # }
    /// ```
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<Arc<str>>) -> Self {
        self.records.set_prefix(prefix.into());
        self
    }

    /// The prefix in front of every key.
    ///
    /// ```no_run
    /// # async fn run(dedup: resilience::consumer::RedisDedup) {
    /// assert_eq!(dedup.prefix(), "dedup:");
    /// # }
    /// ```
    pub fn prefix(&self) -> &str {
        self.records.prefix()
    }

    /// The Redis key of a message id: the prefix, then the id.
    ///
    /// ```no_run
    /// # async fn run(dedup: resilience::consumer::RedisDedup) {
    /// assert_eq!(dedup.redis_key("m-1"), "dedup:m-1");
    /// # }
    /// ```
    pub fn redis_key(&self, id: &str) -> String {
        self.records.key(id)
    }
}

impl fmt::Debug for RedisDedup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisDedup")
            .field("prefix", &self.prefix())
            .finish_non_exhaustive()
    }
}

fn lock(lease: Lease) -> String {
    format!("lock:{:032x}", lease.token())
}

/// A value found under a key that this code did not write.
#[derive(Debug, thiserror::Error)]
#[error("unexpected record {value:?} under `{key}`")]
struct Corrupt {
    key: String,
    value: String,
}

impl Dedup for RedisDedup {
    async fn begin(&self, id: &str, lock_ttl: Duration) -> Result<Begin, DedupError> {
        let key = self.redis_key(id);
        let lease = Lease::new();
        let previous = self
            .records
            .begin(&key, lock(lease).as_bytes(), lock_ttl)
            .await
            .map_err(DedupError::new)?;
        let Some(value) = previous else {
            return Ok(Begin::Fresh(lease));
        };
        let value = String::from_utf8_lossy(&value);
        if value.starts_with("lock:") {
            return Ok(Begin::InFlight);
        }
        match Settled::parse(&value) {
            Some(settled) => Ok(Begin::Settled(settled)),
            None => Err(DedupError::new(Corrupt {
                key,
                value: value.into_owned(),
            })),
        }
    }

    async fn settle(
        &self,
        id: &str,
        lease: Lease,
        settled: Settled,
        ttl: Duration,
    ) -> Result<bool, DedupError> {
        self.records
            .complete(
                &self.redis_key(id),
                lock(lease).as_bytes(),
                settled.as_str().as_bytes(),
                ttl,
            )
            .await
            .map_err(DedupError::new)
    }

    async fn release(&self, id: &str, lease: Lease) -> Result<(), DedupError> {
        self.records
            .release(&self.redis_key(id), lock(lease).as_bytes())
            .await
            .map_err(DedupError::new)?;
        Ok(())
    }
}
