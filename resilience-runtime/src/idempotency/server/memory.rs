//! A bounded in-process store, for tests, demos and single-instance
//! services.

use std::time::Duration;

use super::store::{Claim, Completion, Entry, IdempotencyStore, KeyLease, StoreError};
use crate::error::ConfigError;
use crate::idempotency::IdempotencyKey;
use crate::idempotency::records::{Full, Record, Records};

/// An [`IdempotencyStore`] in this process's memory, bounded and expiring
/// by tokio's clock (so tests can pause and advance it). Its records are
/// the consumer's [`MemoryDedup`](crate::consumer::MemoryDedup)'s: one
/// implementation of the lease discipline for both.
///
/// It holds at most `capacity` live keys. When it is full of keys that
/// have not expired, [`begin`](IdempotencyStore::begin) fails with
/// [`StoreError::Full`] (the layer answers `503`) rather than evicting a
/// stored response, since an evicted response lets a retry run the handler
/// twice. Its keys live in one process: a service with several instances
/// needs a shared store such as Redis.
///
/// ```
/// use resilience::idempotency::server::MemoryStore;
///
/// let store = MemoryStore::new(50_000)?;
/// assert_eq!(store.capacity(), 50_000);
/// assert!(MemoryStore::new(0).is_err());
/// # Ok::<(), resilience::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct MemoryStore {
    records: Records<IdempotencyKey, KeyLease, Entry>,
}

impl MemoryStore {
    /// The capacity of [`MemoryStore::default`].
    pub const DEFAULT_CAPACITY: usize = 10_000;

    /// A store of at most `capacity` live keys.
    pub fn new(capacity: usize) -> Result<Self, ConfigError> {
        if capacity == 0 {
            return Err(ConfigError::new(
                "idempotency memory store",
                "capacity",
                capacity,
                "the store must hold at least one key",
            ));
        }
        Ok(Self {
            records: Records::new(capacity),
        })
    }

    /// The most live keys the store holds.
    pub fn capacity(&self) -> usize {
        self.records.capacity()
    }

    /// The number of keys that have not expired.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// `true` when no key is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the store holds for `key`, if it has not expired.
    pub fn get(&self, key: &IdempotencyKey) -> Option<Entry> {
        self.records.get(key).map(entry)
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self {
            records: Records::new(Self::DEFAULT_CAPACITY),
        }
    }
}

fn entry(record: Record<KeyLease, Entry>) -> Entry {
    match record {
        Record::Held(lease) => Entry::InFlight {
            fingerprint: lease.fingerprint(),
        },
        Record::Done(entry) => entry,
    }
}

impl IdempotencyStore for MemoryStore {
    fn name(&self) -> &str {
        "memory"
    }

    async fn begin(
        &self,
        key: &IdempotencyKey,
        lease: &KeyLease,
        lock_ttl: Duration,
    ) -> Result<Claim, StoreError> {
        match self.records.begin(key, lease, lock_ttl) {
            Ok(None) => Ok(Claim::Started),
            Ok(Some(found)) => Ok(Claim::Existing(entry(found))),
            Err(Full) => Err(StoreError::Full {
                capacity: self.capacity(),
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
        let done = Entry::Completed {
            fingerprint: lease.fingerprint(),
            outcome: outcome.clone(),
        };
        Ok(self.records.complete(key, lease, done, ttl))
    }

    async fn renew(
        &self,
        key: &IdempotencyKey,
        lease: &KeyLease,
        lock_ttl: Duration,
    ) -> Result<bool, StoreError> {
        Ok(self.records.renew(key, lease, lock_ttl))
    }

    async fn release(&self, key: &IdempotencyKey, lease: &KeyLease) -> Result<bool, StoreError> {
        Ok(self.records.release(key, lease))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::server::{Fingerprint, StoredResponse};
    use http::{HeaderMap, Method, StatusCode, Uri};

    fn lease(body: &[u8]) -> KeyLease {
        KeyLease::new(Fingerprint::of(
            &Method::POST,
            &Uri::from_static("/p"),
            body,
        ))
    }

    fn key(text: &str) -> IdempotencyKey {
        IdempotencyKey::from_string(text).unwrap()
    }

    fn created() -> Completion {
        Completion::Response(StoredResponse::new(
            StatusCode::CREATED,
            HeaderMap::new(),
            "ok".into(),
        ))
    }

    const MINUTE: Duration = Duration::from_secs(60);
    const DAY: Duration = Duration::from_secs(86_400);

    #[tokio::test(start_paused = true)]
    async fn one_begin_wins_then_completes_and_expires() {
        let store = MemoryStore::default();
        let (a, b) = (lease(b"1"), lease(b"1"));
        let k = key("k");
        assert_eq!(store.begin(&k, &a, MINUTE).await.unwrap(), Claim::Started);
        assert_eq!(
            store.begin(&k, &b, MINUTE).await.unwrap(),
            Claim::Existing(Entry::InFlight {
                fingerprint: a.fingerprint()
            })
        );
        assert!(!store.complete(&k, &b, &created(), DAY).await.unwrap());
        assert!(!store.release(&k, &b).await.unwrap());
        assert!(store.complete(&k, &a, &created(), DAY).await.unwrap());
        assert!(!store.release(&k, &a).await.unwrap(), "completed keys stay");

        // The completed record outlives the lock ttl, then expires.
        tokio::time::advance(DAY - Duration::from_secs(1)).await;
        assert!(matches!(store.get(&k), Some(Entry::Completed { .. })));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(store.get(&k), None);
        assert!(store.is_empty());
        assert_eq!(store.begin(&k, &b, MINUTE).await.unwrap(), Claim::Started);
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_lock_frees_the_key_and_the_old_lease_loses_it() {
        let store = MemoryStore::default();
        let (old, new) = (lease(b"1"), lease(b"1"));
        let k = key("k");
        store.begin(&k, &old, MINUTE).await.unwrap();
        tokio::time::advance(MINUTE).await;
        assert_eq!(store.begin(&k, &new, MINUTE).await.unwrap(), Claim::Started);
        assert!(!store.complete(&k, &old, &created(), DAY).await.unwrap());
        assert!(store.release(&k, &new).await.unwrap());
        assert!(store.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_store_refuses_new_keys_until_some_expire() {
        let store = MemoryStore::new(2).unwrap();
        let l = lease(b"");
        store.begin(&key("a"), &l, MINUTE).await.unwrap();
        store.begin(&key("b"), &l, 2 * MINUTE).await.unwrap();
        let err = store.begin(&key("c"), &l, MINUTE).await.unwrap_err();
        assert!(matches!(err, StoreError::Full { capacity: 2 }), "{err}");
        assert!(err.to_string().contains("2 live keys"), "{err}");
        tokio::time::advance(MINUTE).await;
        assert_eq!(store.len(), 1);
        assert_eq!(
            store.begin(&key("c"), &l, MINUTE).await.unwrap(),
            Claim::Started
        );
    }
}
