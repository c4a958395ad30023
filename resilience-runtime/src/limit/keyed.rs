//! A rate limit per key (per host, per tenant), in bounded memory.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use super::rate::{Clock, RateClock, Schedule, check_burst};
use super::report::Report;
use super::{Priority, Rate};
use crate::error::{ConfigError, Overloaded, ShedBy};
use crate::telemetry::Labels;

/// Shards of the key table: calls for different keys rarely wait on the
/// same lock, and a new key locks one shard for writing, not the table.
const SHARDS: usize = 16;
/// How many entries a new key at the cap looks at for one to forget.
const SAMPLE: usize = 32;

/// A [`RateLimit`](super::RateLimit) per key: each tenant, host or account
/// its own quota of `rate` and burst (a partner API allowing 100 requests
/// a second *per account*), in a table of at most
/// [`max_keys`](Self::with_max_keys) keys (kept per shard: each of its 16
/// shards holds at most a sixteenth, rounded up).
///
/// A key costs its own size, one word and the table's slack. A key whose
/// arrival time has passed is no different from a key never seen (both
/// admit a whole burst), so it can be forgotten at no cost: a new key at
/// the cap takes the place of such an idle key. When none of the entries
/// it looks at is idle (more keys are busy than the cap), it takes the
/// place of the one closest to idle, whose caller may then get up to its
/// burst again early: size the cap above the keys busy at once.
///
/// Admission of a known key is a shard's read lock, one hash and the GCRA's
/// compare-and-swap; no allocation.
///
/// ```
/// use resilience::limit::{KeyedRateLimit, Priority, Rate};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let per_account: KeyedRateLimit<String> =
///     KeyedRateLimit::new("partner", Rate::per_second(2))?.with_max_keys(100_000)?;
/// for _ in 0..2 {
///     per_account.try_acquire("acct-1", Priority::Default)?;
/// }
/// assert!(per_account.try_acquire("acct-1", Priority::Default).is_err());
/// // Another account has its own quota.
/// per_account.try_acquire("acct-2", Priority::Default)?;
/// assert_eq!(per_account.len(), 2);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct KeyedRateLimit<K> {
    shards: Box<[RwLock<HashMap<K, AtomicU64>>]>,
    hasher: RandomState,
    clock: Clock,
    schedule: Schedule,
    rate: Rate,
    burst: u32,
    max_keys: usize,
    max_wait: Duration,
    report: Report,
}

impl<K: Hash + Eq + Clone> KeyedRateLimit<K> {
    /// A limit named `name` of `rate` for each key, a burst of the rate's
    /// count, at most 10,000 keys.
    ///
    /// # Errors
    ///
    /// A rate that [does not validate](Rate::validate).
    pub fn new(name: &'static str, rate: Rate) -> Result<Self, ConfigError> {
        rate.validate()
            .map_err(|err| err.with_subject(format!("rate limit `{name}`")))?;
        Ok(Self {
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            clock: Clock::new(),
            schedule: Schedule::new(rate, rate.count()),
            rate,
            burst: rate.count(),
            max_keys: 10_000,
            max_wait: Duration::ZERO,
            report: Report::new(
                Labels::new(crate::telemetry::UNKNOWN_SERVICE, name),
                ShedBy::RateLimit,
            ),
        })
    }

    /// The same limit, each key admitting up to `burst` calls at once.
    ///
    /// # Errors
    ///
    /// A burst of 0.
    pub fn with_burst(mut self, burst: u32) -> Result<Self, ConfigError> {
        check_burst(self.name(), burst)?;
        self.burst = burst;
        self.schedule = Schedule::new(self.rate, burst);
        Ok(self)
    }

    /// The same limit, keeping at most `max_keys` keys.
    ///
    /// # Errors
    ///
    /// A cap of 0.
    pub fn with_max_keys(mut self, max_keys: usize) -> Result<Self, ConfigError> {
        if max_keys == 0 {
            return Err(ConfigError::new(
                format!("rate limit `{}`", self.name()),
                "max_keys",
                max_keys,
                "a keyed rate limit needs room for at least 1 key",
            ));
        }
        self.max_keys = max_keys;
        Ok(self)
    }

    /// The same limit, whose [`acquire`](Self::acquire) waits at most
    /// `max_wait` for a call's place (default: no wait).
    #[must_use]
    pub fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// The same limit, reading `clock` (default: tokio's; see
    /// [`RateClock`]). Every key starts over from now, as if new.
    #[must_use]
    pub fn with_clock(mut self, clock: RateClock) -> Self {
        self.clock = Clock::of(clock);
        for shard in self.shards.iter_mut() {
            shard
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
        }
        self
    }

    /// The clock the limit reads.
    pub fn clock(&self) -> RateClock {
        self.clock.kind()
    }

    /// The limit's name.
    pub fn name(&self) -> &'static str {
        self.report.name()
    }

    /// Each key's rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Each key's burst.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// The most keys kept.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The keys kept now.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.read().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }

    /// Whether no key is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Admits a call of `priority` for `key` now, or refuses it with
    /// [`Overloaded`] and when to come back, as
    /// [`RateLimit::try_acquire`](super::RateLimit::try_acquire) does.
    pub fn try_acquire<Q>(&self, key: &Q, priority: Priority) -> Result<(), Overloaded>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now();
        self.with_word(key, now, |word| {
            self.schedule.try_take(word, now, priority, &self.report)
        })
    }

    /// Admits a call of `priority` for `key`, waiting for its place at most
    /// [`with_max_wait`](Self::with_max_wait) and within the caller's
    /// deadline, as [`RateLimit::acquire`](super::RateLimit::acquire) does.
    pub async fn acquire<Q>(&self, key: &Q, priority: Priority) -> Result<(), Overloaded>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now();
        let place = self.with_word(key, now, |word| {
            self.schedule
                .place(word, now, priority, self.max_wait, &self.report)
        })?;
        self.clock.wait(now, place, &self.report).await;
        Ok(())
    }

    /// Runs `f` on the arrival time of `key`, adding the key if it is new.
    fn with_word<Q, T>(&self, key: &Q, now: u64, f: impl Fn(&AtomicU64) -> T) -> T
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let shard = &self.shards[self.hasher.hash_one(key) as usize % SHARDS];
        if let Some(word) = shard
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
        {
            return f(word);
        }
        let mut table = shard.write().unwrap_or_else(PoisonError::into_inner);
        if !table.contains_key(key) && table.len() >= self.max_keys.div_ceil(SHARDS) {
            forget_one(&mut table, now);
        }
        f(table
            .entry(key.to_owned())
            .or_insert_with(|| AtomicU64::new(0)))
    }
}

/// Makes room for a key: forgets an idle key among the first [`SAMPLE`]
/// entries (its arrival time passed: a fresh key behaves the same), else
/// the one among them closest to idle.
fn forget_one<K: Hash + Eq + Clone>(table: &mut HashMap<K, AtomicU64>, now: u64) {
    let mut closest: Option<(&K, u64)> = None;
    for (key, word) in table.iter().take(SAMPLE) {
        let tat = word.load(Ordering::Relaxed);
        if tat <= now {
            closest = Some((key, tat));
            break;
        }
        if closest.is_none_or(|(_, best)| tat < best) {
            closest = Some((key, tat));
        }
    }
    if let Some(victim) = closest.map(|(key, _)| key.clone()) {
        table.remove(&victim);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::advance;

    use super::KeyedRateLimit;
    use crate::limit::{Priority, Rate};

    const MS: Duration = Duration::from_millis(1);
    const C: Priority = Priority::Critical;

    /// governor `tests/keyed_hashmap.rs`, `rejects_too_many`: each of the
    /// keys 1 and 2 gets the quota of 2 a second on its own.
    #[tokio::test(start_paused = true)]
    async fn governor_keyed_rejects_too_many() {
        let lb = KeyedRateLimit::<u32>::new("k", Rate::per_second(2)).unwrap();
        for key in [1u32, 2] {
            assert!(lb.try_acquire(&key, C).is_ok());
            advance(MS).await;
            assert!(lb.try_acquire(&key, C).is_ok());
            advance(MS).await;
            assert!(lb.try_acquire(&key, C).is_err());
            advance(MS * 1000).await;
            assert!(lb.try_acquire(&key, C).is_ok());
            advance(MS).await;
            assert!(lb.try_acquire(&key, C).is_ok());
            advance(MS).await;
            assert!(lb.try_acquire(&key, C).is_err());
        }
    }

    /// governor `hashmap_length`: one entry per key seen.
    #[tokio::test(start_paused = true)]
    async fn governor_hashmap_length() {
        let lim = KeyedRateLimit::<String>::new("k", Rate::per_second(1)).unwrap();
        assert!(lim.is_empty());
        for (n, key) in ["foo", "bar", "baz"].into_iter().enumerate() {
            lim.try_acquire(key, C).unwrap();
            assert_eq!(lim.len(), n + 1);
        }
    }

    /// governor `actual_threadsafety` on one key: 20 threads at once on a
    /// quota of 20 are all admitted, the 21st call refused (20 an hour:
    /// the threads run outside the paused clock).
    #[test]
    fn governor_keyed_actual_threadsafety() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let lim = runtime
            .block_on(async { KeyedRateLimit::<u32>::new("k", Rate::per_hour(20)) })
            .unwrap();
        std::thread::scope(|scope| {
            for _ in 0..20 {
                scope.spawn(|| assert!(lim.try_acquire(&1, C).is_ok()));
            }
        });
        assert!(lim.try_acquire(&1, C).is_err());
    }

    /// A thousand keys through a cap of 16 (one a shard): the table never
    /// grows past it.
    #[tokio::test(start_paused = true)]
    async fn the_table_never_grows_past_the_cap() {
        let lim = KeyedRateLimit::<u32>::new("k", Rate::per_second(1))
            .unwrap()
            .with_max_keys(16)
            .unwrap();
        for key in 0..1_000 {
            lim.try_acquire(&key, C).unwrap();
            assert!(lim.len() <= 16, "{} keys", lim.len());
            advance(MS).await;
        }
    }

    /// At the cap, a new key takes the place of an idle key, never of a
    /// busy one while an idle one is there: the busy key is still refused
    /// afterwards (forgotten, it would admit a whole burst again).
    #[tokio::test(start_paused = true)]
    async fn at_the_cap_an_idle_key_goes_before_a_busy_one() {
        let lim: &'static KeyedRateLimit<u32> = Box::leak(Box::new(
            KeyedRateLimit::<u32>::new("k", Rate::per_second(1))
                .unwrap()
                .with_max_keys(32)
                .unwrap()
                .with_max_wait(Duration::from_secs(100)),
        ));
        // Key 0 takes its next ten places: busy for ten seconds.
        for _ in 0..10 {
            tokio::spawn(lim.acquire(&0, C));
        }
        tokio::task::yield_now().await;
        for key in 1..=31 {
            lim.try_acquire(&key, C).unwrap();
        }
        // A second later every key but 0 is idle.
        advance(MS * 1001).await;
        for key in 100..1_100 {
            lim.try_acquire(&key, C).unwrap();
            assert!(lim.len() <= 32);
        }
        let refused = lim.try_acquire(&0, C).unwrap_err();
        assert!(refused.retry_after().unwrap() > Duration::from_secs(8));
    }

    #[tokio::test(start_paused = true)]
    async fn bad_settings_are_refused() {
        let err = KeyedRateLimit::<u32>::new("k", Rate::per_second(1))
            .unwrap()
            .with_max_keys(0)
            .unwrap_err();
        assert_eq!((err.field(), err.value()), ("max_keys", "0"));
        let err = KeyedRateLimit::<u32>::new("k", Rate::per_second(1))
            .unwrap()
            .with_burst(0)
            .unwrap_err();
        assert_eq!(err.field(), "burst");
    }
}
