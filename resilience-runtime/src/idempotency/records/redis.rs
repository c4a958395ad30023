//! The records in Redis: one string per key, `<prefix><key>`, holding the
//! face's encoding of a lease or of a finished record.
//!
//! - `begin` is one `SET <key> <lease> NX PX <lock ttl> GET` (Redis ≥ 7.0):
//!   it takes the key, or returns what holds it, atomically;
//! - `complete`, `renew` and `release` are Lua scripts that compare the
//!   stored value with the caller's lease before replacing it (`SET … PX
//!   <ttl>`), extending it (`PEXPIRE`) or deleting it, so an expired
//!   lock's owner cannot clobber its successor.
//!
//! Expiry is Redis' own: a crashed holder's lock vanishes after the lock
//! ttl, a finished record after its ttl.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisResult, Script};

/// A connection and a key prefix; the faces encode what is stored.
#[derive(Clone)]
pub(crate) struct RedisRecords {
    connection: ConnectionManager,
    prefix: Arc<str>,
}

static COMPLETE: LazyLock<Script> = LazyLock::new(|| {
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

// The consumer's face never renews a lock: its lock ttl is the ack deadline.
#[cfg_attr(not(feature = "idempotency-redis"), allow(dead_code))]
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        if redis.call('GET', KEYS[1]) == ARGV[1] then
            return redis.call('PEXPIRE', KEYS[1], ARGV[2])
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

fn millis(ttl: Duration) -> u64 {
    // `PX 0` is an error in Redis.
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RedisRecords {
    pub(crate) fn new(connection: ConnectionManager, prefix: Arc<str>) -> Self {
        Self { connection, prefix }
    }

    /// Connects with `config` (the fail-fast one of `redis_link` unless
    /// the user gave theirs).
    pub(crate) async fn connect(
        url: &str,
        config: ConnectionManagerConfig,
        prefix: Arc<str>,
    ) -> RedisResult<Self> {
        Ok(Self::new(
            crate::redis_link::connect(url, config).await?,
            prefix,
        ))
    }

    pub(crate) fn set_prefix(&mut self, prefix: Arc<str>) {
        self.prefix = prefix;
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The Redis key of `key`: the prefix, then the key.
    pub(crate) fn key(&self, key: impl std::fmt::Display) -> String {
        format!("{}{}", self.prefix, key)
    }

    /// Takes `redis_key` for `lease`: `None` when it was free, else what
    /// held it (unchanged).
    pub(crate) async fn begin(
        &self,
        redis_key: &str,
        lease: &[u8],
        lock_ttl: Duration,
    ) -> RedisResult<Option<Vec<u8>>> {
        redis::cmd("SET")
            .arg(redis_key)
            .arg(lease)
            .arg("NX")
            .arg("PX")
            .arg(millis(lock_ttl))
            .arg("GET")
            .query_async(&mut self.connection.clone())
            .await
    }

    pub(crate) async fn complete(
        &self,
        redis_key: &str,
        lease: &[u8],
        done: &[u8],
        ttl: Duration,
    ) -> RedisResult<bool> {
        let done: i64 = COMPLETE
            .key(redis_key)
            .arg(lease)
            .arg(done)
            .arg(millis(ttl))
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(done == 1)
    }

    #[cfg_attr(not(feature = "idempotency-redis"), allow(dead_code))]
    pub(crate) async fn renew(
        &self,
        redis_key: &str,
        lease: &[u8],
        lock_ttl: Duration,
    ) -> RedisResult<bool> {
        let done: i64 = RENEW
            .key(redis_key)
            .arg(lease)
            .arg(millis(lock_ttl))
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(done == 1)
    }

    pub(crate) async fn release(&self, redis_key: &str, lease: &[u8]) -> RedisResult<bool> {
        let done: i64 = RELEASE
            .key(redis_key)
            .arg(lease)
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(done == 1)
    }
}
