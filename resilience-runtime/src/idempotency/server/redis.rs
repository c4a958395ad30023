//! The production store: Redis, shared by every instance of a service.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::store::{
    Claim, Completion, Entry, Fingerprint, IdempotencyStore, KeyLease, StoreError, StoredResponse,
};
use crate::idempotency::IdempotencyKey;
use crate::idempotency::records::RedisRecords;

/// An [`IdempotencyStore`] in Redis, through `redis`' auto-reconnecting
/// [`ConnectionManager`].
///
/// Each key is one Redis string, `idem:<key>` (the prefix is
/// configurable), holding a small binary record, with the lease discipline
/// of the consumer's `RedisDedup` (the two share one implementation):
///
/// - `begin` is one `SET idem:<key> <in-flight lease> NX PX <lock ttl> GET`
///   (Redis ≥ 7.0): it takes the key, or returns what holds it, atomically;
/// - `complete`, `renew` and `release` are Lua scripts that compare the
///   stored value with the caller's lease before replacing it (`SET … PX
///   <ttl>`), extending it (`PEXPIRE`) or deleting it, so an expired
///   lock's owner cannot clobber its successor.
///
/// Expiry is Redis' own: a crashed instance stops renewing its locks and
/// they vanish one lock ttl later (10 s by default); responses after the
/// ttl.
///
/// A fresh request costs two round trips (`begin`, then `complete`), a
/// replay one (`begin` answers with the stored response).
///
/// # When Redis is down
///
/// [`connect`](Self::connect) configures the connection manager to fail
/// fast ([`manager_config`](Self::manager_config)): when Redis is dead a
/// request gets its `503` at once rather than after the layer's
/// `store_timeout`, and once Redis is back the next request reconnects.
/// A Redis that accepts connections but does not answer is bounded by the
/// response timeout (500 ms), within the layer's `store_timeout`.
///
/// ```no_run
/// use http::header::AUTHORIZATION;
/// use resilience::idempotency::server::{IdempotencyLayer, RedisStore, Scope};
///
/// # async fn run() -> Result<(), resilience::idempotency::server::StoreError> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379/").await?;
/// let layer = IdempotencyLayer::new(store, Scope::header(AUTHORIZATION));
/// # drop(layer); Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    records: RedisRecords,
}

impl RedisStore {
    /// The default key prefix: `idem:`.
    pub const DEFAULT_PREFIX: &'static str = "idem:";

    /// How long [`connect`](Self::connect)'s manager waits for a
    /// connection to Redis to open: 250 ms.
    pub const DEFAULT_CONNECTION_TIMEOUT: Duration = crate::redis_link::CONNECTION_TIMEOUT;

    /// How long [`connect`](Self::connect)'s manager waits for the answer
    /// to a command: 500 ms, half the layer's default `store_timeout`.
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = crate::redis_link::RESPONSE_TIMEOUT;

    /// How many times [`connect`](Self::connect)'s manager tries again when
    /// a reconnection fails: none. Commands wait for the reconnection, so
    /// every retry and its backoff would delay each request's `503`; the
    /// next request starts the next attempt instead (one at a time), and
    /// clients back off on their own.
    pub const DEFAULT_RECONNECT_RETRIES: usize = crate::redis_link::RECONNECT_RETRIES;

    /// The longest pause between two reconnection attempts, for managers
    /// configured with retries: 500 ms.
    pub const DEFAULT_MAX_RECONNECT_DELAY: Duration = crate::redis_link::MAX_RECONNECT_DELAY;

    /// Connects to `url` (`redis://host:port/db`) with the store's
    /// [`manager_config`](Self::manager_config): a dead Redis fails each
    /// request at once, a restarted one is used again from the next
    /// request.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with_config(url, Self::manager_config()).await
    }

    /// Connects to `url` with a connection manager configured by `config`,
    /// e.g. the store's defaults with a longer connection timeout for a
    /// distant Redis:
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use resilience::idempotency::server::RedisStore;
    ///
    /// # async fn run() -> Result<(), resilience::idempotency::server::StoreError> {
    /// let config = RedisStore::manager_config().set_connection_timeout(Some(Duration::from_millis(500)));
    /// let store = RedisStore::connect_with_config("redis://redis.internal:6379/", config).await?;
    /// # drop(store); Ok(()) }
    /// ```
    ///
    /// Keep the response timeout below the layer's `store_timeout`, and
    /// with retries keep their total backoff short: every request waits for
    /// a reconnection in progress.
    pub async fn connect_with_config(
        url: &str,
        config: ConnectionManagerConfig,
    ) -> Result<Self, StoreError> {
        let records = RedisRecords::connect(url, config, Self::DEFAULT_PREFIX.into())
            .await
            .map_err(backend)?;
        Ok(Self { records })
    }

    /// The connection manager configuration of [`connect`](Self::connect):
    /// `redis`' defaults but for [`DEFAULT_CONNECTION_TIMEOUT`],
    /// [`DEFAULT_RESPONSE_TIMEOUT`], [`DEFAULT_RECONNECT_RETRIES`] and
    /// [`DEFAULT_MAX_RECONNECT_DELAY`].
    ///
    /// `redis`' own defaults retry a failed reconnection 6 times with
    /// exponential backoff from 100 ms, unbounded: with Redis dead every
    /// request waited out the layer's `store_timeout`, and after a restart
    /// the first success came up to seconds later.
    ///
    /// [`DEFAULT_CONNECTION_TIMEOUT`]: Self::DEFAULT_CONNECTION_TIMEOUT
    /// [`DEFAULT_RESPONSE_TIMEOUT`]: Self::DEFAULT_RESPONSE_TIMEOUT
    /// [`DEFAULT_RECONNECT_RETRIES`]: Self::DEFAULT_RECONNECT_RETRIES
    /// [`DEFAULT_MAX_RECONNECT_DELAY`]: Self::DEFAULT_MAX_RECONNECT_DELAY
    pub fn manager_config() -> ConnectionManagerConfig {
        crate::redis_link::manager_config()
    }

    /// A store over an existing connection manager. Build it from
    /// [`manager_config`](Self::manager_config) to keep a dead Redis
    /// failing fast: `redis`' own defaults make every request wait for
    /// a reconnection's retries.
    pub fn new(connection: ConnectionManager) -> Self {
        Self {
            records: RedisRecords::new(connection, Self::DEFAULT_PREFIX.into()),
        }
    }

    /// Replaces the `idem:` prefix, e.g. to keep two services' keys apart
    /// on one Redis: `idem:payments:`.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<Arc<str>>) -> Self {
        self.records.set_prefix(prefix.into());
        self
    }

    /// The prefix in front of every key.
    pub fn prefix(&self) -> &str {
        self.records.prefix()
    }

    /// The Redis key of an idempotency key: the prefix, then the key.
    pub fn redis_key(&self, key: &IdempotencyKey) -> String {
        self.records.key(key)
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix())
            .finish_non_exhaustive()
    }
}

fn backend(err: redis::RedisError) -> StoreError {
    StoreError::Backend(Box::new(err))
}

impl IdempotencyStore for RedisStore {
    fn name(&self) -> &str {
        "redis"
    }

    async fn begin(
        &self,
        key: &IdempotencyKey,
        lease: &KeyLease,
        lock_ttl: Duration,
    ) -> Result<Claim, StoreError> {
        let redis_key = self.redis_key(key);
        let previous = self
            .records
            .begin(&redis_key, &codec::in_flight(lease), lock_ttl)
            .await
            .map_err(backend)?;
        match previous {
            None => Ok(Claim::Started),
            Some(value) => codec::decode(&value)
                .map(Claim::Existing)
                .map_err(|reason| StoreError::Corrupt {
                    key: redis_key,
                    reason,
                }),
        }
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        lease: &KeyLease,
        outcome: &Completion,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.records
            .complete(
                &self.redis_key(key),
                &codec::in_flight(lease),
                &codec::completed(lease.fingerprint(), outcome),
                ttl,
            )
            .await
            .map_err(backend)
    }

    async fn renew(
        &self,
        key: &IdempotencyKey,
        lease: &KeyLease,
        lock_ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.records
            .renew(&self.redis_key(key), &codec::in_flight(lease), lock_ttl)
            .await
            .map_err(backend)
    }

    async fn release(&self, key: &IdempotencyKey, lease: &KeyLease) -> Result<bool, StoreError> {
        self.records
            .release(&self.redis_key(key), &codec::in_flight(lease))
            .await
            .map_err(backend)
    }
}

/// The binary records: a version byte, a tag, the 32-byte fingerprint,
/// then by tag:
///
/// - `I` in flight: the 16-byte lease token;
/// - `R` response: status (u16), header count (u32), each header as name
///   length (u32), name, value length (u32), value; then the body;
/// - `T` too large: status (u16), limit (u64);
/// - `F` body failed: status (u16).
///
/// Integers are big-endian. Comparing whole in-flight records compares
/// leases, which is what the Lua scripts rely on.
mod codec {
    use super::*;

    const VERSION: u8 = 1;
    const HEAD: usize = 2 + 32;

    pub(super) fn in_flight(lease: &KeyLease) -> Vec<u8> {
        let mut out = head(b'I', lease.fingerprint(), 16);
        out.extend_from_slice(&lease.token().to_be_bytes());
        out
    }

    pub(super) fn completed(fingerprint: Fingerprint, outcome: &Completion) -> Vec<u8> {
        match outcome {
            Completion::Response(response) => {
                let headers = response.headers();
                let size = 6
                    + headers
                        .iter()
                        .map(|(n, v)| 8 + n.as_str().len() + v.len())
                        .sum::<usize>()
                    + response.body().len();
                let mut out = head(b'R', fingerprint, size);
                out.extend_from_slice(&response.status().as_u16().to_be_bytes());
                out.extend_from_slice(&len32(headers.len()));
                for (name, value) in headers {
                    out.extend_from_slice(&len32(name.as_str().len()));
                    out.extend_from_slice(name.as_str().as_bytes());
                    out.extend_from_slice(&len32(value.len()));
                    out.extend_from_slice(value.as_bytes());
                }
                out.extend_from_slice(response.body());
                out
            }
            Completion::TooLarge { status, limit } => {
                let mut out = head(b'T', fingerprint, 10);
                out.extend_from_slice(&status.as_u16().to_be_bytes());
                out.extend_from_slice(&limit.to_be_bytes());
                out
            }
            Completion::BodyFailed { status } => {
                let mut out = head(b'F', fingerprint, 2);
                out.extend_from_slice(&status.as_u16().to_be_bytes());
                out
            }
        }
    }

    /// Lengths inside a parsed `HeaderMap` are bounded far below 4 GiB.
    fn len32(len: usize) -> [u8; 4] {
        u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes()
    }

    fn head(tag: u8, fingerprint: Fingerprint, rest: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEAD + rest);
        out.push(VERSION);
        out.push(tag);
        out.extend_from_slice(fingerprint.as_bytes());
        out
    }

    pub(super) fn decode(value: &[u8]) -> Result<Entry, &'static str> {
        let mut input = Reader(value);
        if input.take(1)? != [VERSION] {
            return Err("unknown record version");
        }
        let tag = input.take(1)?[0];
        let fingerprint = Fingerprint::from_bytes(
            input
                .take(32)?
                .try_into()
                .map_err(|_| "truncated fingerprint")?,
        );
        match tag {
            b'I' => {
                input.take(16)?;
                Ok(Entry::InFlight { fingerprint })
            }
            b'R' => {
                let status = input.status()?;
                let count = input.len()?;
                let mut headers = HeaderMap::new();
                for _ in 0..count {
                    let len = input.len()?;
                    let name = HeaderName::from_bytes(input.take(len)?)
                        .map_err(|_| "invalid header name")?;
                    let len = input.len()?;
                    let value = HeaderValue::from_bytes(input.take(len)?)
                        .map_err(|_| "invalid header value")?;
                    headers.append(name, value);
                }
                let body = Bytes::copy_from_slice(input.0);
                Ok(Entry::Completed {
                    fingerprint,
                    outcome: Completion::Response(StoredResponse::new(status, headers, body)),
                })
            }
            b'T' => {
                let status = input.status()?;
                let limit =
                    u64::from_be_bytes(input.take(8)?.try_into().map_err(|_| "truncated limit")?);
                Ok(Entry::Completed {
                    fingerprint,
                    outcome: Completion::TooLarge { status, limit },
                })
            }
            b'F' => Ok(Entry::Completed {
                fingerprint,
                outcome: Completion::BodyFailed {
                    status: input.status()?,
                },
            }),
            _ => Err("unknown record tag"),
        }
    }

    struct Reader<'a>(&'a [u8]);

    impl<'a> Reader<'a> {
        fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
            if self.0.len() < n {
                return Err("truncated record");
            }
            let (head, rest) = self.0.split_at(n);
            self.0 = rest;
            Ok(head)
        }

        fn u16(&mut self) -> Result<u16, &'static str> {
            let bytes = self.take(2)?;
            Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
        }

        fn len(&mut self) -> Result<usize, &'static str> {
            let bytes = self.take(4)?;
            usize::try_from(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
                .map_err(|_| "length overflows usize")
        }

        fn status(&mut self) -> Result<StatusCode, &'static str> {
            StatusCode::from_u16(self.u16()?).map_err(|_| "invalid status")
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use http::{Method, Uri, header};

        fn fingerprint() -> Fingerprint {
            Fingerprint::of(&Method::POST, &Uri::from_static("/p"), b"{}")
        }

        #[test]
        fn records_round_trip() {
            let lease = KeyLease::new(fingerprint());
            assert_eq!(
                decode(&in_flight(&lease)),
                Ok(Entry::InFlight {
                    fingerprint: fingerprint()
                })
            );
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
            headers.append(header::LINK, "<a>".parse().unwrap());
            headers.append(header::LINK, "<b>".parse().unwrap());
            for outcome in [
                Completion::Response(StoredResponse::new(
                    StatusCode::CREATED,
                    headers,
                    Bytes::from_static(b"{\"id\":1}\0\xff"),
                )),
                Completion::Response(StoredResponse::new(
                    StatusCode::NO_CONTENT,
                    HeaderMap::new(),
                    Bytes::new(),
                )),
                Completion::TooLarge {
                    status: StatusCode::OK,
                    limit: 1 << 20,
                },
                Completion::BodyFailed {
                    status: StatusCode::ACCEPTED,
                },
            ] {
                assert_eq!(
                    decode(&completed(fingerprint(), &outcome)),
                    Ok(Entry::Completed {
                        fingerprint: fingerprint(),
                        outcome
                    })
                );
            }
        }

        #[test]
        fn leases_differ_in_their_records() {
            let (a, b) = (KeyLease::new(fingerprint()), KeyLease::new(fingerprint()));
            assert_ne!(in_flight(&a), in_flight(&b));
        }

        #[test]
        fn garbage_is_reported_not_panicked_on() {
            let good = completed(
                fingerprint(),
                &Completion::TooLarge {
                    status: StatusCode::OK,
                    limit: 1,
                },
            );
            for len in 0..good.len() {
                assert!(decode(&good[..len]).is_err(), "prefix of {len} bytes");
            }
            assert_eq!(decode(b"\x02"), Err("unknown record version"));
            let mut bad_tag = good.clone();
            bad_tag[1] = b'X';
            assert_eq!(decode(&bad_tag), Err("unknown record tag"));
        }
    }
}
