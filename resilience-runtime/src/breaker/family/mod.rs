//! Keyed families of breakers: one breaker per downstream host or per
//! tenant, whose keys are known only at run time, sharing one
//! configuration, in bounded memory ([`BreakerFamily`]).

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use hashbrown::HashTable;
use tokio::time::Instant;

use super::hooks::FamilyWide;
use super::machine::Setup;
use super::state::{CLOSED, StateWord};
use super::{BreakerConfig, CircuitBreaker, State, report};
use crate::clock::duration_nanos;
use crate::error::ConfigError;
use crate::telemetry::Labels;

/// The most members a family may be given: 1,000,000 (250 MB of breakers
/// at rest, at most 1 GiB).
pub const MAX_MEMBERS: u32 = resilience_rules::limits::MAX_MEMBERS;

// The shortest and the longest `idle`: a second, a day (shared with the
// attributes' checks).
use resilience_rules::duration::display;
use resilience_rules::limits::{MAX_IDLE, MIN_IDLE};
use resilience_rules::presets;

/// The configuration of a [`BreakerFamily`]: its members' breaker
/// configuration, its cap and when a member counts as idle.
///
/// # Default
///
/// [`BreakerConfig::new`], 1,000 members, 5 minutes.
///
/// ```
/// use resilience::breaker::{BreakerConfig, FamilyConfig};
/// use std::time::Duration;
///
/// let config = FamilyConfig::new()
///     .with_breaker(BreakerConfig::critical())
///     .with_max_members(10_000)
///     .with_idle(Duration::from_secs(600));
/// assert!(config.validate().is_ok());
/// assert_eq!(config.max_members(), 10_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FamilyConfig {
    breaker: BreakerConfig,
    max_members: u32,
    idle: Duration,
}

impl Default for FamilyConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl FamilyConfig {
    /// The defaults: [`BreakerConfig::new`], 1,000 members, idle after 5
    /// minutes unused.
    pub const fn new() -> Self {
        Self {
            breaker: BreakerConfig::new(),
            max_members: presets::FAMILY.max_members,
            idle: presets::FAMILY.idle,
        }
    }

    /// The configuration of every member.
    pub const fn with_breaker(mut self, breaker: BreakerConfig) -> Self {
        self.breaker = breaker;
        self
    }

    /// The most members held at once, 1 to [`MAX_MEMBERS`].
    pub const fn with_max_members(mut self, max_members: u32) -> Self {
        self.max_members = max_members;
        self
    }

    /// How long a closed member stays unused before a new key below the
    /// cap removes it, 1 s to 1 day.
    pub const fn with_idle(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }

    /// The members' breaker configuration.
    pub const fn breaker(&self) -> &BreakerConfig {
        &self.breaker
    }

    /// The cap on members.
    pub const fn max_members(&self) -> u32 {
        self.max_members
    }

    /// How long a closed member may stay unused below the cap.
    pub const fn idle(&self) -> Duration {
        self.idle
    }

    /// Checks every value; the error names the field (as written in the
    /// attribute and the config file) and the value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        const WHAT: &str = "breaker family";
        self.breaker.validate()?;
        if self.breaker.sharing().is_some() {
            return Err(ConfigError::new(
                WHAT,
                "shared",
                self.breaker.sharing().map_or("", |s| s.url()),
                "the members of a family cannot be shared through Redis: they would all count on one fleet key; remove `shared` or use a named breaker",
            ));
        }
        if self.max_members == 0 || self.max_members > MAX_MEMBERS {
            return Err(ConfigError::new(
                WHAT,
                "max_members",
                self.max_members,
                format!(
                    "a family holds 1 to {MAX_MEMBERS} members (each 250 B to 1 KiB); the default is {}",
                    presets::FAMILY.max_members
                ),
            ));
        }
        if self.idle < MIN_IDLE || self.idle > MAX_IDLE {
            return Err(ConfigError::new(
                WHAT,
                "idle",
                format!("{:?}", self.idle),
                format!(
                    "a member counts as idle after {} to {} unused; the default is {}",
                    display(MIN_IDLE),
                    display(MAX_IDLE),
                    display(presets::FAMILY.idle)
                ),
            ));
        }
        Ok(())
    }
}

/// A value that can key a member of a [`BreakerFamily`]: text, an integer
/// (a tenant id) or an address, handed over as a `&str` without allocating
/// for the common types. The key of `#[circuit_breaker(key = …)]` must be
/// one.
///
/// Implemented for `str`, `String`, `Box<str>`, `Arc<str>`, `Cow<str>`,
/// the integer types, `char`, `IpAddr`, `Ipv4Addr`, `Ipv6Addr`,
/// `SocketAddr` and references to any of them. A type of your own
/// implements it by lending its text:
///
/// ```
/// use resilience::breaker::{BreakerFamily, FamilyConfig, FamilyKey};
///
/// struct Tenant(String);
///
/// impl FamilyKey for Tenant {
///     fn with_key<R>(&self, f: impl FnOnce(&str) -> R) -> R {
///         f(&self.0)
///     }
/// }
///
/// let family = BreakerFamily::new("billing", FamilyConfig::new())?;
/// let breaker = Tenant("acme".into()).with_key(|key| family.get(key));
/// assert_eq!(breaker.key(), Some("acme"));
/// assert_eq!(42_u64.with_key(|key| family.get(key)).key(), Some("42"));
/// # Ok::<(), resilience::ConfigError>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot key a breaker family",
    label = "the key of a breaker family must be text, an integer or an IP address",
    note = "give the key as a `&str`, a `String`, an integer or an address, e.g. `key = host` with `host: &str`, or `key = url.host_str().unwrap_or_default()`; a type of your own implements `resilience::breaker::FamilyKey`"
)]
pub trait FamilyKey {
    /// Calls `f` with the key as text.
    fn with_key<R>(&self, f: impl FnOnce(&str) -> R) -> R;
}

impl FamilyKey for str {
    fn with_key<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        f(self)
    }
}

impl<T: FamilyKey + ?Sized> FamilyKey for &T {
    fn with_key<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        (**self).with_key(f)
    }
}

macro_rules! text_keys {
    ($($ty:ty),*) => {$(
        impl FamilyKey for $ty {
            fn with_key<R>(&self, f: impl FnOnce(&str) -> R) -> R {
                f(self.as_ref())
            }
        }
    )*};
}

text_keys!(String, Box<str>, Arc<str>, std::borrow::Cow<'_, str>);

macro_rules! displayed_keys {
    ($($ty:ty),*) => {$(
        impl FamilyKey for $ty {
            fn with_key<R>(&self, f: impl FnOnce(&str) -> R) -> R {
                with_displayed(self, f)
            }
        }
    )*};
}

displayed_keys!(
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    char,
    std::net::IpAddr,
    std::net::Ipv4Addr,
    std::net::Ipv6Addr,
    std::net::SocketAddr
);

/// Formats `value` on the stack (every type above fits in 64 bytes: the
/// longest, a `SocketAddr` v6 with a scope id, is 58) and lends the text.
fn with_displayed<R>(value: &impl fmt::Display, f: impl FnOnce(&str) -> R) -> R {
    struct Stack {
        bytes: [u8; 64],
        len: usize,
    }
    impl fmt::Write for Stack {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let end = self.len + s.len();
            let room = self.bytes.get_mut(self.len..end).ok_or(fmt::Error)?;
            room.copy_from_slice(s.as_bytes());
            self.len = end;
            Ok(())
        }
    }
    let mut stack = Stack {
        bytes: [0; 64],
        len: 0,
    };
    if fmt::Write::write_fmt(&mut stack, format_args!("{value}")).is_ok() {
        // Only whole `&str`s were copied in.
        if let Ok(text) = std::str::from_utf8(&stack.bytes[..stack.len]) {
            return f(text);
        }
    }
    f(&value.to_string())
}

/// Breakers whose names are known only at run time, one per key (a
/// downstream host, a tenant), sharing one [`FamilyConfig`].
///
/// Usually built by the [registry](crate::registry::Registry::breaker_for)
/// or by `#[circuit_breaker(name = "…", key = arg)]`. Cloning gives another
/// handle to the same family.
///
/// # Memory and eviction
///
/// A family holds at most `max_members` members (default 1,000), so its
/// memory stays bounded whatever keys its callers make up. A member is
/// about 250 bytes with its key while it is called from one thread and has
/// no failure in its window; 176 more once one fails, 320 more once a second
/// thread calls it (its own counters on a cache line per thread): at most
/// 1 KiB. What does not change with calls (configuration, labels, hooks) is
/// the family's, kept once. A known key costs a clock read, a
/// read lock and a hash; a new key is admitted under the write lock in
/// O(1): it looks at no more than 64 members, whatever the family's size
/// (`BENCHMARKS.md` has the figures at 1,000,000 members).
///
/// **Which member a new key evicts.** At the cap, a new key takes the
/// place of a member that is *closed*, not forced and not in use (no
/// handle to it outside the family, so no call in flight), chosen by a
/// CLOCK sweep, the "second chance" approximation of least recently used
/// that page caches run: a hand goes round the members in the order they
/// came; a member used since the hand last passed has that mark cleared
/// and is passed over once, and the first unmarked one goes. A new member
/// enters unmarked, so a flood of keys seen once (a scan, tenant ids a
/// client makes up) evicts its own kind first, while the keys in steady
/// use stay. Should every evictable member the hand looks at be marked,
/// the first of them goes.
///
/// **Failures do not pin a closed member.** An evicted closed member loses
/// only the part of its window it had counted: should its key come back,
/// it starts closed with an empty window, as every breaker does after a
/// state change, and needs `min` calls to trip again. Under a steady
/// background error rate every member has failures in its window; were
/// those members kept, nothing could be evicted at the cap, which is when
/// a family needs room.
///
/// **Open and half-open members stay**, as do forced ones and those in
/// use: forgetting an open member would let a failing tenant hammer a
/// dependency known to be down before its cooldown ends, and forgetting a
/// forced one would undo the operator.
///
/// **When nothing can go** (the members the hand looked at are all open,
/// half-open, forced or in use), the new key still gets a breaker of its
/// own, which the family does not keep: it judges the calls made through
/// the handle `get` returned, and goes with that handle. A key is never
/// handed a breaker other keys share, so a failing key cannot reject an
/// unrelated one, as a shared overflow breaker would (the first newcomer
/// to fail would reject every other). The price: until room appears, such
/// a key is judged afresh by each `get`, so a family this full fails open
/// for its newcomers rather than judge them together, as Envoy's outlier
/// detection stops ejecting hosts past `max_ejection_percent` rather than
/// take a whole cluster down. The memory bound holds, the family says so
/// once at WARN (and at INFO when a new key finds room again), and the
/// hand moves on: each new key looks at the next 64 members, so a member
/// that can go is found within `max_members / 64` new keys. Raise
/// `max_members` if the WARN lasts.
///
/// **Idle members.** Below the cap, each new key also looks at the next 8
/// members and removes those closed, not forced, not in use and unused for
/// `idle` (default 5 min), so a family whose hosts come and go shrinks
/// back below its cap.
///
/// A [`CircuitBreaker`] kept from [`get`](Self::get) pins its member: call
/// `get` per call, as `#[circuit_breaker(key = …)]` does, so that what is
/// unused can go. (For comparison, resilience4j's `CircuitBreakerRegistry`
/// keeps every breaker it creates until removed by hand; its maintainers
/// point users to an LRU cache behind a custom `RegistryStore`,
/// resilience4j#650 and #703.)
///
/// In the config file, a family is configured under its name like a
/// breaker, with two more keys:
///
/// ```toml
/// [breakers.payments]
/// min = 10
/// max_members = 5000
/// idle = "10m"
/// ```
///
/// # Metrics
///
/// The family's members report under one `target`, the family's name: the
/// key never becomes a label, so the number of series does not grow with
/// the keys. `circuit_breaker_state` is the worst state among the members
/// (2 when one is open, else 1 when one is half-open, else 0);
/// `circuit_breaker_trips_total` and `dependency_errors_total` count for
/// every member. The WARN event of a member's state change carries its
/// `key`, so logs tell which host it was.
///
/// # Example
///
/// ```
/// use resilience::breaker::{BreakerConfig, BreakerFamily, FamilyConfig, State};
///
/// let family = BreakerFamily::new(
///     "payments",
///     FamilyConfig::new().with_breaker(BreakerConfig::new().with_min_requests(1)),
/// )?;
/// let eu = family.get("eu.payments.example");
/// eu.try_acquire()?.failure();
/// assert_eq!(eu.state(), State::Open);
/// // Another key, another breaker.
/// assert_eq!(family.get("us.payments.example").state(), State::Closed);
/// assert_eq!((eu.name(), eu.key()), ("payments", Some("eu.payments.example")));
/// assert_eq!(family.len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct BreakerFamily {
    machine: Arc<Family>,
}

/// The most members a new key looks at for one to evict, at the cap.
const SCAN: usize = 64;
/// The most members a new key looks at for idle ones, below the cap.
const SWEEP: usize = 8;

struct Family {
    config: FamilyConfig,
    /// What every member shares: labels, breaker configuration, clock
    /// origin, the family's hooks and its tally of open members.
    setup: super::sync::Arc<Setup>,
    members: RwLock<Members>,
    /// Whether the last new key found no room (warned once).
    full: AtomicBool,
}

/// The members, and the CLOCK hand that picks the one to evict.
#[derive(Default)]
struct Members {
    /// Each member's place in `ring`, hashed by its key (which the member
    /// holds: the table keeps 4 bytes a member, not a second copy).
    places: HashTable<u32>,
    hasher: RandomState,
    /// The members, in the order the hand visits them.
    ring: Vec<Member>,
    /// The place the hand looks at next, modulo the ring's length.
    hand: usize,
}

struct Member {
    breaker: CircuitBreaker,
    /// Nanoseconds since the family's origin of the last `get`, to within
    /// `idle / 64` (a busy key does not write it on every call), shifted
    /// left by one; the low bit marks a member used since the hand last
    /// passed, which it spares once.
    used: AtomicU64,
}

impl BreakerFamily {
    /// An empty family named `name` (the `target` label of its metrics and
    /// the name its members' rejections carry), after checking `config`.
    pub fn new(name: &'static str, config: FamilyConfig) -> Result<Self, ConfigError> {
        Self::new_in(crate::telemetry::UNKNOWN_SERVICE, name, config)
    }

    pub(crate) fn new_in(
        service: &'static str,
        name: &'static str,
        config: FamilyConfig,
    ) -> Result<Self, ConfigError> {
        config
            .validate()
            .map_err(|err| err.with_subject(format!("breaker family `{name}`")))?;
        let labels = Labels::new(service, name);
        report::breaker_created(labels, State::Closed);
        let wide = FamilyWide::new();
        Ok(BreakerFamily {
            machine: Arc::new(Family {
                config,
                setup: super::sync::Arc::new(Setup::new(
                    labels,
                    config.breaker,
                    Some(Box::new(wide)),
                )),
                members: RwLock::new(Members::default()),
                full: AtomicBool::new(false),
            }),
        })
    }

    /// The family's name.
    pub fn name(&self) -> &'static str {
        self.machine.setup.labels.target()
    }

    /// The configuration every member runs with.
    pub fn config(&self) -> &FamilyConfig {
        &self.machine.config
    }

    /// The breaker of `key`, created closed on first use (see
    /// [memory and eviction](BreakerFamily#memory-and-eviction) for what a
    /// new key may evict, and for the breaker it gets when nothing can go).
    ///
    /// One clock read, one read lock and one hash of `key` per call; call
    /// it per call rather than keeping the breaker, so that an unused
    /// member can be evicted (a handle kept outside the family makes its
    /// member unevictable).
    pub fn get(&self, key: &str) -> CircuitBreaker {
        let family = &*self.machine;
        let now = family.now();
        if let Some(member) = family.read().get(key) {
            member.touch(now, family.config.idle);
            return member.breaker.clone();
        }
        family.insert(key, now)
    }

    /// The breaker of `key` if it is a member now, without creating it.
    pub fn find(&self, key: &str) -> Option<CircuitBreaker> {
        let family = &*self.machine;
        family.read().get(key).map(|m| m.breaker.clone())
    }

    /// How many members the family holds (breakers it did not keep aside).
    pub fn len(&self) -> usize {
        self.machine.read().ring.len()
    }

    /// Whether the family holds no member.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The members' keys, sorted, for health endpoints.
    pub fn keys(&self) -> Vec<String> {
        let members = self.machine.read();
        let mut keys: Vec<String> = members.ring.iter().map(|m| m.key().to_string()).collect();
        keys.sort();
        keys
    }

    /// How many members are open now, with the breakers the family gave
    /// out without keeping them (when full) while they live.
    pub fn open_members(&self) -> usize {
        let family = self.machine.setup.family.as_deref();
        family.map_or(0, |family| family.count(State::Open))
    }

    /// Registers `hook`, called with `(name, from, to)` after each state
    /// change of every member, present and future (the member is the
    /// breaker's [`key`](CircuitBreaker::key) in the WARN event).
    pub fn on_state_change<F>(&self, hook: F)
    where
        F: Fn(&'static str, State, State) + Send + Sync + 'static,
    {
        if let Some(family) = self.machine.setup.family.as_deref() {
            family.hooks.add(Box::new(hook));
        }
    }
}

impl Family {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Members> {
        self.members.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> u64 {
        duration_nanos(Instant::now().saturating_duration_since(self.setup.origin))
    }

    fn member(&self, key: &str) -> CircuitBreaker {
        CircuitBreaker::member(super::sync::Arc::clone(&self.setup), key)
    }

    /// A new key: a place of its own below the cap, an evicted member's at
    /// the cap, or a breaker the family does not keep when nothing can go.
    #[cold]
    fn insert(&self, key: &str, now: u64) -> CircuitBreaker {
        let mut members = self.members.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(member) = members.get(key) {
            return member.breaker.clone();
        }
        let idle = duration_nanos(self.config.idle);
        let place = if members.ring.len() < self.config.max_members as usize {
            members.sweep(now, idle);
            None
        } else {
            match members.victim(now, idle) {
                Some(place) => Some(place),
                None => return self.unretained(key, members.ring.len()),
            }
        };
        if self.full.swap(false, Relaxed) {
            tracing::info!(
                target: "resilience",
                family = self.setup.labels.target(),
                "breaker family has room again: new keys become members"
            );
        }
        let breaker = self.member(key);
        let member = Member {
            breaker: breaker.clone(),
            used: AtomicU64::new(now << 1),
        };
        match place {
            Some(place) => members.replace(place, key, member),
            None => members.push(key, member, self.config.max_members as usize),
        }
        breaker
    }

    /// The breaker of a new key when the family is full and nothing can
    /// go: its own, not kept.
    #[cold]
    fn unretained(&self, key: &str, members: usize) -> CircuitBreaker {
        if !self.full.swap(true, Relaxed) {
            tracing::warn!(
                target: "resilience",
                family = self.setup.labels.target(),
                members,
                "breaker family is full and no member it looked at can be evicted (open, half-open, forced or in use): new keys get a breaker of their own that the family does not keep, judged afresh on each lookup, until one can; raise `max_members` if this lasts"
            );
        }
        self.member(key)
    }
}

/// A table entry's hash, from the key of the member at its place.
fn rehasher<'a>(hasher: &'a RandomState, ring: &'a [Member]) -> impl Fn(&u32) -> u64 + 'a {
    move |&place| hasher.hash_one(ring[place as usize].key())
}

impl Members {
    fn get(&self, key: &str) -> Option<&Member> {
        let ring = &self.ring;
        let place = self.places.find(self.hasher.hash_one(key), |&place| {
            ring[place as usize].key() == key
        })?;
        Some(&ring[*place as usize])
    }

    fn push(&mut self, key: &str, member: Member, cap: usize) {
        let Members {
            places,
            hasher,
            ring,
            ..
        } = self;
        // Below the cap, which is at most `MAX_MEMBERS`.
        let place = ring.len() as u32;
        ring.push(member);
        places.insert_unique(hasher.hash_one(key), place, rehasher(hasher, ring));
        if ring.len() == cap {
            // Each eviction may leave a tombstone in the table, and the
            // table clears them by rehashing in place only while it is at
            // most half full, else by doubling: sized now for twice the
            // cap, it never grows again.
            places.reserve(cap + 2, rehasher(hasher, ring));
            // Grown by doubling, the ring may hold room for up to twice
            // the cap; it never holds more than the cap.
            ring.shrink_to_fit();
        }
    }

    /// Forgets where the member at `place` is, before it leaves it.
    fn unplace(&mut self, place: usize) {
        let hash = self.hasher.hash_one(self.ring[place].key());
        if let Ok(entry) = self.places.find_entry(hash, |&p| p as usize == place) {
            entry.remove();
        }
    }

    /// Puts `member` in the place of the one at `place`, which goes.
    fn replace(&mut self, place: usize, key: &str, member: Member) {
        self.unplace(place);
        self.ring[place] = member;
        let Members {
            places,
            hasher,
            ring,
            ..
        } = self;
        places.insert_unique(hasher.hash_one(key), place as u32, rehasher(hasher, ring));
    }

    /// Removes the member at `place`; the last one takes its place.
    fn remove(&mut self, place: usize) {
        self.unplace(place);
        let last = self.ring.len() - 1;
        self.ring.swap_remove(place);
        if let Some(moved) = self.ring.get(place) {
            let hash = self.hasher.hash_one(moved.key());
            if let Some(at) = self.places.find_mut(hash, |&p| p as usize == last) {
                *at = place as u32;
            }
        }
    }

    /// The hand's next place, moving it on.
    fn advance(&mut self) -> usize {
        let place = self.hand % self.ring.len();
        self.hand = place + 1;
        place
    }

    /// The member to evict at the cap, among the next [`SCAN`] at the hand:
    /// the first evictable one unmarked (or unused for `idle`), else the
    /// first evictable one; `None` when none of them is.
    fn victim(&mut self, now: u64, idle: u64) -> Option<usize> {
        let mut marked = None;
        for _ in 0..SCAN.min(self.ring.len()) {
            let place = self.advance();
            let member = &self.ring[place];
            if !member.evictable() {
                continue;
            }
            if member.used.fetch_and(!1, Relaxed) & 1 == 1 && !member.stale(now, idle) {
                marked.get_or_insert(place);
                continue;
            }
            return Some(place);
        }
        marked
    }

    /// Removes the evictable members unused for `idle` among the next
    /// [`SWEEP`] at the hand.
    fn sweep(&mut self, now: u64, idle: u64) {
        for _ in 0..SWEEP.min(self.ring.len()) {
            if self.ring.is_empty() {
                return;
            }
            let place = self.advance();
            let member = &self.ring[place];
            if member.evictable() && member.stale(now, idle) {
                self.remove(place);
                // The member moved into `place` is looked at next.
                self.hand = place;
            }
        }
    }
}

impl Member {
    /// A `get` of a known key: marks the member, and records the time
    /// when it moved on by more than `idle / 64`.
    fn touch(&self, now: u64, idle: Duration) {
        let used = self.used.load(Relaxed);
        let moved = now.saturating_sub(used >> 1) > duration_nanos(idle) / 64;
        if moved || used & 1 == 0 {
            let at = if moved { now } else { used >> 1 };
            self.used.store(at << 1 | 1, Relaxed);
        }
    }

    fn key(&self) -> &str {
        self.breaker.key().unwrap_or_default()
    }

    /// Unused for `idle` or longer.
    fn stale(&self, now: u64, idle: u64) -> bool {
        now.saturating_sub(self.used.load(Relaxed) >> 1) >= idle
    }

    /// May go: closed, not forced, and no handle outside the family (no
    /// call in flight). Under the family's write lock nobody can take a
    /// handle to a member that has none, and a closed breaker without a
    /// handle cannot change state: the answer holds until the lock is
    /// released.
    fn evictable(&self) -> bool {
        let machine = &self.breaker.machine;
        let word = StateWord(machine.state.load(Acquire));
        word.kind() == CLOSED && !word.forced() && super::sync::Arc::strong_count(machine) == 1
    }
}

impl fmt::Debug for BreakerFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerFamily")
            .field("name", &self.name())
            .field("members", &self.len())
            .field("config", &self.machine.config)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
