//! The one store behind both faces of idempotency: the server's
//! [`IdempotencyStore`](super::server::IdempotencyStore) (a response per
//! `Idempotency-Key`) and the consumer's
//! [`Dedup`](crate::consumer::Dedup) (a settlement per message id).
//!
//! Both keep one record per key that goes nothing → *held* by a lease
//! (while the handler runs, for the lock ttl) → *done* (for the record's
//! ttl) or back to nothing, and every change after `begin` is made only by
//! the lease that holds the key, so a holder whose lock expired cannot
//! overwrite its successor's work. What the two faces differ in is only
//! what a lease and a finished record carry, so the records are generic
//! over both: [`Records`] in memory, `RedisRecords` (features
//! `idempotency-redis` and `consumer-redis`) in Redis.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

#[cfg(any(feature = "idempotency-redis", feature = "consumer-redis"))]
mod redis;
#[cfg(any(feature = "idempotency-redis", feature = "consumer-redis"))]
pub(crate) use redis::RedisRecords;

/// What a key holds: the lease of the handler running for it, or the
/// record of how that ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record<H, D> {
    Held(H),
    Done(D),
}

/// The store is full of live keys; the caller decides what that means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full;

/// Records in this process's memory, bounded, expiring by tokio's clock
/// (so paused-clock tests see locks expire). `K` is the key, `H` what a
/// lease carries, `D` a finished record.
#[derive(Debug)]
pub(crate) struct Records<K, H, D> {
    capacity: usize,
    state: Mutex<State<K, H, D>>,
}

#[derive(Debug)]
struct State<K, H, D> {
    /// Each key's record; an expired one stays until the next purge.
    records: HashMap<K, Expiring<H, D>>,
    /// Expiry order, so that purging costs O(log n) per expired key and
    /// an expired record never lingers (a long-running consumer sees
    /// millions of ids).
    expiries: BTreeMap<(Instant, u64), K>,
    sequence: u64,
}

/// A key's record and its expiry, which is also its key in `expiries`.
#[derive(Debug)]
struct Expiring<H, D> {
    record: Record<H, D>,
    expiry: (Instant, u64),
}

impl<K, H, D> Records<K, H, D> {
    /// Records for at most `capacity` live keys.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            state: Mutex::new(State {
                records: HashMap::new(),
                expiries: BTreeMap::new(),
                sequence: 0,
            }),
        }
    }

    // The server's face alone reads a record back, renews a lock and
    // reports its capacity; the consumer's does none of these.
    #[cfg_attr(not(feature = "idempotency-server"), allow(dead_code))]
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    fn lock(&self) -> MutexGuard<'_, State<K, H, D>> {
        // Every update below is a handful of inserts and removes with no
        // code that can panic between them: a poisoned map is consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K, H, D> Records<K, H, D>
where
    K: Hash + Eq + Clone,
    H: PartialEq + Clone,
    D: Clone,
{
    /// The number of keys that have not expired.
    pub(crate) fn len(&self) -> usize {
        let mut state = self.lock();
        state.purge(Instant::now());
        state.records.len()
    }

    /// What `key` holds, if it has not expired.
    #[cfg_attr(not(feature = "idempotency-server"), allow(dead_code))]
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<Record<H, D>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut state = self.lock();
        state.purge(Instant::now());
        state.records.get(key).map(|stored| stored.record.clone())
    }

    /// Takes a free `key` for `lease` until `lock_ttl` from now (`Ok(None)`),
    /// or answers what holds it, unchanged.
    pub(crate) fn begin<Q>(
        &self,
        key: &Q,
        lease: &H,
        lock_ttl: Duration,
    ) -> Result<Option<Record<H, D>>, Full>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = Instant::now();
        let mut state = self.lock();
        state.purge(now);
        if let Some(stored) = state.records.get(key) {
            return Ok(Some(stored.record.clone()));
        }
        if state.records.len() >= self.capacity {
            return Err(Full);
        }
        let expiry = state.expiry(now, lock_ttl);
        let key = key.to_owned();
        state.expiries.insert(expiry, key.clone());
        state.records.insert(
            key,
            Expiring {
                record: Record::Held(lease.clone()),
                expiry,
            },
        );
        Ok(None)
    }

    /// Replaces the lock `lease` holds on `key` with `done` for `ttl`;
    /// `false`, changing nothing, when `lease` no longer holds it.
    pub(crate) fn complete<Q>(&self, key: &Q, lease: &H, done: D, ttl: Duration) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.rearm(key, lease, ttl, Some(Record::Done(done)))
    }

    /// Moves the end of the lock `lease` holds on `key` to `lock_ttl` from
    /// now; `false`, changing nothing, when `lease` no longer holds it.
    #[cfg_attr(not(feature = "idempotency-server"), allow(dead_code))]
    pub(crate) fn renew<Q>(&self, key: &Q, lease: &H, lock_ttl: Duration) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.rearm(key, lease, lock_ttl, None)
    }

    /// What `complete` and `renew` share: if `lease` holds `key`, a new
    /// expiry `ttl` from now and, when given, a new record.
    fn rearm<Q>(&self, key: &Q, lease: &H, ttl: Duration, record: Option<Record<H, D>>) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = Instant::now();
        let mut state = self.lock();
        state.purge(now);
        if !state.is_held_by(key, lease) {
            return false;
        }
        let expiry = state.expiry(now, ttl);
        state.reschedule(key, expiry, record);
        true
    }

    /// Frees `key` if `lease` still holds it, and says whether it did.
    pub(crate) fn release<Q>(&self, key: &Q, lease: &H) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut state = self.lock();
        state.purge(Instant::now());
        if !state.is_held_by(key, lease) {
            return false;
        }
        if let Some(stored) = state.records.remove(key) {
            state.expiries.remove(&stored.expiry);
        }
        true
    }
}

impl<K, H, D> State<K, H, D>
where
    K: Hash + Eq + Clone,
    H: PartialEq,
{
    fn purge(&mut self, now: Instant) {
        while let Some(entry) = self.expiries.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            self.records.remove(&key);
        }
    }

    fn is_held_by<Q>(&self, key: &Q, lease: &H) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        matches!(self.records.get(key), Some(Expiring { record: Record::Held(held), .. }) if held == lease)
    }

    fn expiry(&mut self, now: Instant, ttl: Duration) -> (Instant, u64) {
        self.sequence += 1;
        // The configs cap ttls far below any overflow; saturate rather
        // than panic for records used on their own.
        let at = now
            .checked_add(ttl)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400));
        (at, self.sequence)
    }

    /// Gives `key` a new expiry and, when `record` is given, a new record.
    fn reschedule<Q>(&mut self, key: &Q, expiry: (Instant, u64), record: Option<Record<H, D>>)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some(stored) = self.records.get_mut(key) {
            let old = std::mem::replace(&mut stored.expiry, expiry);
            if let Some(record) = record {
                stored.record = record;
            }
            if let Some(owned) = self.expiries.remove(&old) {
                self.expiries.insert(expiry, owned);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Map = Records<String, u32, &'static str>;

    const LOCK: Duration = Duration::from_secs(10);
    const TTL: Duration = Duration::from_secs(3600);

    // The contract both faces document: one `begin` wins, only its lease
    // changes the record, and expiry frees the key.
    #[tokio::test(start_paused = true)]
    async fn only_the_holding_lease_changes_a_record() {
        let records = Map::new(10);
        assert_eq!(records.begin("k", &1, LOCK), Ok(None));
        assert_eq!(records.begin("k", &2, LOCK), Ok(Some(Record::Held(1))));
        assert!(!records.complete("k", &2, "stolen", TTL));
        assert!(!records.release("k", &2));
        assert!(!records.renew("k", &2, LOCK));
        assert!(records.complete("k", &1, "done", TTL));
        assert_eq!(records.get("k"), Some(Record::Done("done")));
        // A finished record is not held: its lease can no longer free it.
        assert!(!records.release("k", &1));
        tokio::time::advance(TTL).await;
        assert_eq!(records.get("k"), None);
        assert_eq!(records.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewed_lock_outlives_its_first_ttl_and_an_expired_one_is_taken_again() {
        let records = Map::new(10);
        assert_eq!(records.begin("k", &1, LOCK), Ok(None));
        tokio::time::advance(LOCK / 2).await;
        assert!(records.renew("k", &1, LOCK));
        tokio::time::advance(LOCK * 3 / 4).await;
        assert_eq!(records.get("k"), Some(Record::Held(1)));
        tokio::time::advance(LOCK).await;
        assert_eq!(records.begin("k", &2, LOCK), Ok(None));
        assert!(!records.complete("k", &1, "late", TTL));
        assert!(records.release("k", &2));
        assert!(records.is_empty_for_test());
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_store_refuses_new_keys_and_purges_expired_ones() {
        let records = Map::new(2);
        assert_eq!(records.begin("a", &1, LOCK), Ok(None));
        assert_eq!(records.begin("b", &2, LOCK), Ok(None));
        assert_eq!(records.begin("c", &3, LOCK), Err(Full));
        // A key already present is answered, full or not.
        assert_eq!(records.begin("a", &4, LOCK), Ok(Some(Record::Held(1))));
        tokio::time::advance(LOCK).await;
        assert_eq!(records.begin("c", &3, LOCK), Ok(None));
        assert_eq!(records.len(), 1);
    }

    impl Map {
        fn is_empty_for_test(&self) -> bool {
            self.len() == 0
        }
    }
}
