//! The consumer's deduplicator in Redis, shared by every replica.

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;
use redis::aio::ConnectionManager;

use super::dedup::{Begin, Dedup, DedupError, Lease, Settled};

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
/// It is not the HTTP layer's `RedisStore` itself: that one stores
/// responses keyed by `Idempotency-Key` with a request fingerprint, where
/// a consumer only needs "this id was settled, and how". Give each
/// consumer group its own prefix: two groups reading one message must not
/// share a record.
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
    connection: ConnectionManager,
    prefix: Arc<str>,
}

impl RedisDedup {
    /// The default key prefix: `dedup:`.
    pub const DEFAULT_PREFIX: &'static str = "dedup:";

    /// Connects to `url` (`redis://host:port/db`) with the connection
    /// manager's defaults (reconnection with backoff, 500 ms response
    /// timeout).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), resilience::consumer::DedupError> {
    /// let dedup = resilience::consumer::RedisDedup::connect("redis://127.0.0.1:6379/").await?;
    /// # drop(dedup); Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, DedupError> {
        let client = redis::Client::open(url).map_err(DedupError::new)?;
        let connection = ConnectionManager::new(client)
            .await
            .map_err(DedupError::new)?;
        Ok(Self::new(connection))
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
            connection,
            prefix: Self::DEFAULT_PREFIX.into(),
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
        self.prefix = prefix.into();
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
        &self.prefix
    }

    /// The Redis key of a message id: the prefix, then the id.
    ///
    /// ```no_run
    /// # async fn run(dedup: resilience::consumer::RedisDedup) {
    /// assert_eq!(dedup.redis_key("m-1"), "dedup:m-1");
    /// # }
    /// ```
    pub fn redis_key(&self, id: &str) -> String {
        format!("{}{}", self.prefix, id)
    }
}

impl fmt::Debug for RedisDedup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisDedup")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn lock(lease: Lease) -> String {
    format!("lock:{:032x}", lease.token())
}

fn millis(ttl: Duration) -> u64 {
    // `PX 0` is an error in Redis.
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

static SETTLE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        if redis.call('GET', KEYS[1]) == ARGV[1] then
            redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
            return 1
        end
        return 0
        ",
    )
});

static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        if redis.call('GET', KEYS[1]) == ARGV[1] then
            return redis.call('DEL', KEYS[1])
        end
        return 0
        ",
    )
});

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
        let previous: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(lock(lease))
            .arg("NX")
            .arg("PX")
            .arg(millis(lock_ttl))
            .arg("GET")
            .query_async(&mut self.connection.clone())
            .await
            .map_err(DedupError::new)?;
        match previous {
            None => Ok(Begin::Fresh(lease)),
            Some(value) if value.starts_with("lock:") => Ok(Begin::InFlight),
            Some(value) => match Settled::parse(&value) {
                Some(settled) => Ok(Begin::Settled(settled)),
                None => Err(DedupError::new(Corrupt { key, value })),
            },
        }
    }

    async fn settle(
        &self,
        id: &str,
        lease: Lease,
        settled: Settled,
        ttl: Duration,
    ) -> Result<bool, DedupError> {
        let done: i64 = SETTLE
            .key(self.redis_key(id))
            .arg(lock(lease))
            .arg(settled.as_str())
            .arg(millis(ttl))
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(DedupError::new)?;
        Ok(done == 1)
    }

    async fn release(&self, id: &str, lease: Lease) -> Result<(), DedupError> {
        let _: i64 = RELEASE
            .key(self.redis_key(id))
            .arg(lock(lease))
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(DedupError::new)?;
        Ok(())
    }
}
