//! A bounded in-process store, for tests, demos and single-instance
//! services.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::store::{Begin, Entry, IdempotencyStore, Lease, Outcome, StoreError};
use crate::error::ConfigError;
use crate::idempotency::IdempotencyKey;

/// An [`IdempotencyStore`] in a `HashMap`, bounded and expiring by tokio's
/// clock (so tests can pause and advance it).
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
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    slots: HashMap<IdempotencyKey, Slot>,
    /// Expiry order, so that purging costs O(log n) per expired key.
    expiries: BTreeMap<(Instant, u64), IdempotencyKey>,
    sequence: u64,
}

#[derive(Debug)]
struct Slot {
    record: Record,
    expiry: (Instant, u64),
}

#[derive(Debug)]
enum Record {
    InFlight(Lease),
    Completed(Entry),
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
            capacity,
            state: Mutex::new(State::default()),
        })
    }

    /// The most live keys the store holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The number of keys that have not expired.
    pub fn len(&self) -> usize {
        let mut state = self.lock();
        state.purge(Instant::now());
        state.slots.len()
    }

    /// `true` when no key is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the store holds for `key`, if it has not expired.
    pub fn get(&self, key: &IdempotencyKey) -> Option<Entry> {
        let mut state = self.lock();
        state.purge(Instant::now());
        state.slots.get(key).map(Slot::entry)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // No code path panics while holding the lock; if one ever did, the
        // map is still consistent key by key.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self {
            capacity: Self::DEFAULT_CAPACITY,
            state: Mutex::new(State::default()),
        }
    }
}

impl Slot {
    fn entry(&self) -> Entry {
        match &self.record {
            Record::InFlight(lease) => Entry::InFlight {
                fingerprint: lease.fingerprint(),
            },
            Record::Completed(entry) => entry.clone(),
        }
    }

    fn is_held_by(&self, lease: &Lease) -> bool {
        matches!(&self.record, Record::InFlight(held) if held == lease)
    }
}

impl State {
    fn purge(&mut self, now: Instant) {
        while let Some(entry) = self.expiries.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            self.slots.remove(&key);
        }
    }

    fn expiry(&mut self, now: Instant, ttl: Duration) -> (Instant, u64) {
        self.sequence += 1;
        // `IdempotencyConfig` caps ttls far below any overflow; saturate
        // rather than panic for a store used on its own.
        let at = now
            .checked_add(ttl)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400));
        (at, self.sequence)
    }

    fn reschedule(&mut self, key: &IdempotencyKey, expiry: (Instant, u64)) {
        if let Some(slot) = self.slots.get_mut(key) {
            self.expiries.remove(&slot.expiry);
            slot.expiry = expiry;
            self.expiries.insert(expiry, key.clone());
        }
    }
}

impl IdempotencyStore for MemoryStore {
    fn name(&self) -> &str {
        "memory"
    }

    async fn begin(
        &self,
        key: &IdempotencyKey,
        lease: &Lease,
        lock_ttl: Duration,
    ) -> Result<Begin, StoreError> {
        let now = Instant::now();
        let mut state = self.lock();
        state.purge(now);
        if let Some(slot) = state.slots.get(key) {
            return Ok(Begin::Existing(slot.entry()));
        }
        if state.slots.len() >= self.capacity {
            return Err(StoreError::Full {
                capacity: self.capacity,
            });
        }
        let expiry = state.expiry(now, lock_ttl);
        state.expiries.insert(expiry, key.clone());
        state.slots.insert(
            key.clone(),
            Slot {
                record: Record::InFlight(lease.clone()),
                expiry,
            },
        );
        Ok(Begin::Started)
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        lease: &Lease,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let now = Instant::now();
        let mut state = self.lock();
        state.purge(now);
        match state.slots.get_mut(key) {
            Some(slot) if slot.is_held_by(lease) => {
                slot.record = Record::Completed(Entry::Completed {
                    fingerprint: lease.fingerprint(),
                    outcome: outcome.clone(),
                });
                let expiry = state.expiry(now, ttl);
                state.reschedule(key, expiry);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn renew(
        &self,
        key: &IdempotencyKey,
        lease: &Lease,
        lock_ttl: Duration,
    ) -> Result<bool, StoreError> {
        let now = Instant::now();
        let mut state = self.lock();
        state.purge(now);
        match state.slots.get(key) {
            Some(slot) if slot.is_held_by(lease) => {
                let expiry = state.expiry(now, lock_ttl);
                state.reschedule(key, expiry);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release(&self, key: &IdempotencyKey, lease: &Lease) -> Result<bool, StoreError> {
        let mut state = self.lock();
        state.purge(Instant::now());
        match state.slots.get(key) {
            Some(slot) if slot.is_held_by(lease) => {
                let expiry = slot.expiry;
                state.expiries.remove(&expiry);
                state.slots.remove(key);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::server::{Fingerprint, StoredResponse};
    use http::{HeaderMap, Method, StatusCode, Uri};

    fn lease(body: &[u8]) -> Lease {
        Lease::new(Fingerprint::of(
            &Method::POST,
            &Uri::from_static("/p"),
            body,
        ))
    }

    fn key(text: &str) -> IdempotencyKey {
        IdempotencyKey::from_string(text).unwrap()
    }

    fn created() -> Outcome {
        Outcome::Response(StoredResponse::new(
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
        assert_eq!(store.begin(&k, &a, MINUTE).await.unwrap(), Begin::Started);
        assert_eq!(
            store.begin(&k, &b, MINUTE).await.unwrap(),
            Begin::Existing(Entry::InFlight {
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
        assert_eq!(store.begin(&k, &b, MINUTE).await.unwrap(), Begin::Started);
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_lock_frees_the_key_and_the_old_lease_loses_it() {
        let store = MemoryStore::default();
        let (old, new) = (lease(b"1"), lease(b"1"));
        let k = key("k");
        store.begin(&k, &old, MINUTE).await.unwrap();
        tokio::time::advance(MINUTE).await;
        assert_eq!(store.begin(&k, &new, MINUTE).await.unwrap(), Begin::Started);
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
            Begin::Started
        );
    }
}
