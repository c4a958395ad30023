//! Keyed families of breakers: one breaker per downstream host or per
//! tenant, whose keys are known only at run time, sharing one
//! configuration, in bounded memory ([`BreakerFamily`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use super::{BreakerConfig, CircuitBreaker, State, owner, report};
use crate::clock::duration_nanos;
use crate::error::ConfigError;
use crate::telemetry::Labels;

/// The most members a family may be given: 1,000,000 (about 1 GiB of
/// breakers).
pub const MAX_MEMBERS: u32 = resilience_rules::limits::MAX_MEMBERS;

// The shortest and the longest `idle`: a second, a day (shared with the
// attributes' checks).
use resilience_rules::limits::{MAX_IDLE, MIN_IDLE};

/// The key of the overflow breaker in logs and [`CircuitBreaker::key`].
const OVERFLOW: &str = "(overflow)";

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
            max_members: 1_000,
            idle: Duration::from_secs(300),
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

    /// How long an idle member stays unused before a sweep removes it,
    /// 1 s to 1 day.
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

    /// How long an idle member may stay unused.
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
                "a family holds 1 to 1000000 members (each about 1 KiB); the default is 1000",
            ));
        }
        if self.idle < MIN_IDLE || self.idle > MAX_IDLE {
            return Err(ConfigError::new(
                WHAT,
                "idle",
                format!("{:?}", self.idle),
                "a member counts as idle after 1s to 24h unused; the default is 5m",
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
    #[inline]
    fn with_key<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        f(self)
    }
}

impl<T: FamilyKey + ?Sized> FamilyKey for &T {
    #[inline]
    fn with_key<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        (**self).with_key(f)
    }
}

macro_rules! text_keys {
    ($($ty:ty),*) => {$(
        impl FamilyKey for $ty {
            #[inline]
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
            #[inline]
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
/// # Memory
///
/// A family holds at most `max_members` members (default 1,000), each a
/// breaker of about 1 KiB plus its key. A member is *idle* when it is
/// closed, not forced, has no failure in its window and no call or handle
/// in flight outside the family. A new key finds room this way:
///
/// 1. every `idle` (default 5 min) the first new key sweeps out the members
///    idle and unused for `idle` or longer, so a family whose hosts come
///    and go shrinks back even below its cap;
/// 2. at the cap, it first sweeps the same way, then evicts the least
///    recently used idle member;
/// 3. when no member is idle (all open, half-open, forced or failing), no
///    member is evicted: an open breaker forgotten would let calls through
///    to a dependency known to be down. The new key is then served by the
///    family's *overflow* breaker, one breaker shared by every key that
///    found no room, logged once at WARN until a key finds room again. The
///    calls stay protected, at the price of judging those keys together.
///
/// An evicted member that comes back starts closed, with an empty window,
/// as a new one does: it was idle, so there was nothing to remember.
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
    inner: Arc<Family>,
}

struct Family {
    labels: Labels,
    config: FamilyConfig,
    members: RwLock<HashMap<Box<str>, Member>>,
    overflow: OnceLock<CircuitBreaker>,
    /// Whether the last new key went to the overflow breaker (warned once).
    overflowing: AtomicBool,
    tally: Arc<Tally>,
    origin: Instant,
    /// Nanoseconds since `origin` of the last sweep.
    swept: AtomicU64,
    hooks: Mutex<Vec<super::SharedHook>>,
}

struct Member {
    breaker: CircuitBreaker,
    /// Nanoseconds since the family's origin of the last `get`, to within
    /// `idle / 64`: a busy key does not write it on every call.
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
        Ok(BreakerFamily {
            inner: Arc::new(Family {
                labels,
                config,
                members: RwLock::new(HashMap::new()),
                overflow: OnceLock::new(),
                overflowing: AtomicBool::new(false),
                tally: Arc::new(Tally {
                    labels,
                    counts: Mutex::new([0; 3]),
                }),
                origin: Instant::now(),
                swept: AtomicU64::new(0),
                hooks: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The family's name.
    pub fn name(&self) -> &'static str {
        self.inner.labels.target()
    }

    /// The configuration every member runs with.
    pub fn config(&self) -> &FamilyConfig {
        &self.inner.config
    }

    /// The breaker of `key`, created closed on first use (see the
    /// [memory](BreakerFamily#memory) rules for what a new key may evict, and when
    /// it gets the overflow breaker instead).
    ///
    /// One read lock and one hash of `key` per call; call it per call
    /// rather than keeping the breaker, so that an unused member can be
    /// evicted (a handle kept outside the family makes its member
    /// unevictable).
    pub fn get(&self, key: &str) -> CircuitBreaker {
        let family = &*self.inner;
        let now = family.now();
        if let Some(member) = family.read().get(key) {
            member.touch(now, family.config.idle);
            return member.breaker.clone();
        }
        family.insert(key, now)
    }

    /// The breaker of `key` if it is a member now, without creating it.
    pub fn find(&self, key: &str) -> Option<CircuitBreaker> {
        let family = &*self.inner;
        family.read().get(key).map(|m| m.breaker.clone())
    }

    /// How many members the family holds (the overflow breaker aside).
    pub fn len(&self) -> usize {
        self.inner.read().len()
    }

    /// Whether the family holds no member.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The members' keys, sorted, for health endpoints.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.inner.read().keys().map(|k| k.to_string()).collect();
        keys.sort();
        keys
    }

    /// How many members are open now, the overflow breaker included.
    pub fn open_members(&self) -> usize {
        self.inner.tally.count(State::Open)
    }

    /// Registers `hook`, called with `(name, from, to)` after each state
    /// change of every member, present and future (the member is the
    /// breaker's [`key`](CircuitBreaker::key) in the WARN event).
    pub fn on_state_change<F>(&self, hook: F)
    where
        F: Fn(&'static str, State, State) + Send + Sync + 'static,
    {
        let hook: super::SharedHook = Arc::new(hook);
        let family = &*self.inner;
        lock(&family.hooks).push(Arc::clone(&hook));
        let members = family.read();
        let overflow = family.overflow.get();
        for breaker in members.values().map(|m| &m.breaker).chain(overflow) {
            let hook = Arc::clone(&hook);
            breaker.on_state_change(move |name, from, to| hook(name, from, to));
        }
    }
}

impl Family {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Box<str>, Member>> {
        self.members.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> u64 {
        duration_nanos(Instant::now().saturating_duration_since(self.origin))
    }

    fn member(&self, key: &str) -> CircuitBreaker {
        let tag = Tag {
            key: key.into(),
            tally: Arc::clone(&self.tally),
        };
        let breaker = CircuitBreaker::with_stripes(
            self.labels,
            self.config.breaker,
            owner::OWNED,
            Some(Box::new(tag)),
        );
        for hook in lock(&self.hooks).iter() {
            let hook = Arc::clone(hook);
            breaker.on_state_change(move |name, from, to| hook(name, from, to));
        }
        breaker
    }

    #[cold]
    fn insert(&self, key: &str, now: u64) -> CircuitBreaker {
        let mut members = self.members.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(member) = members.get(key) {
            return member.breaker.clone();
        }
        let idle = duration_nanos(self.config.idle);
        let cap = self.config.max_members as usize;
        if members.len() >= cap || now.saturating_sub(self.swept.load(Relaxed)) >= idle {
            self.swept.store(now, Relaxed);
            members.retain(|_, m| !(m.idle() && now.saturating_sub(m.used.load(Relaxed)) >= idle));
        }
        if members.len() >= cap {
            let lru = members
                .iter()
                .filter(|(_, m)| m.idle())
                .min_by_key(|(_, m)| m.used.load(Relaxed))
                .map(|(k, _)| k.clone());
            match lru {
                Some(lru) => {
                    members.remove(&lru);
                }
                None => return self.overflow(members.len()),
            }
        }
        if self.overflowing.swap(false, Relaxed) {
            tracing::info!(
                target: "resilience",
                family = self.labels.target(),
                "breaker family has room again: new keys get a breaker of their own"
            );
        }
        let breaker = self.member(key);
        members.insert(
            key.into(),
            Member {
                breaker: breaker.clone(),
                used: AtomicU64::new(now),
            },
        );
        breaker
    }

    #[cold]
    fn overflow(&self, members: usize) -> CircuitBreaker {
        if !self.overflowing.swap(true, Relaxed) {
            tracing::warn!(
                target: "resilience",
                family = self.labels.target(),
                members,
                "breaker family is full and no member is idle (all open, half-open, forced or failing): new keys share its overflow breaker until one is; raise `max_members` if this lasts"
            );
        }
        self.overflow.get_or_init(|| self.member(OVERFLOW)).clone()
    }
}

impl Member {
    #[inline]
    fn touch(&self, now: u64, idle: Duration) {
        let step = duration_nanos(idle) / 64;
        if now.saturating_sub(self.used.load(Relaxed)) > step {
            self.used.store(now, Relaxed);
        }
    }

    /// Evictable: closed, not forced, no failure in its window, and no
    /// handle outside the family (no call in flight).
    fn idle(&self) -> bool {
        if super::sync::Arc::strong_count(&self.breaker.inner) > 1 {
            return false;
        }
        let snapshot = self.breaker.snapshot();
        snapshot.state == State::Closed && !snapshot.forced && snapshot.failures == 0
    }
}

impl fmt::Debug for BreakerFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerFamily")
            .field("name", &self.name())
            .field("members", &self.len())
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a member knows of its family.
pub(super) struct Tag {
    key: Box<str>,
    tally: Arc<Tally>,
}

/// How many members are in each state, for the family's gauge.
struct Tally {
    labels: Labels,
    /// Closed (unused: members are not counted closed), half-open, open.
    counts: Mutex<[usize; 3]>,
}

fn index(state: State) -> Option<usize> {
    match state {
        State::Closed => None,
        State::HalfOpen => Some(1),
        State::Open => Some(2),
    }
}

impl Tally {
    fn count(&self, state: State) -> usize {
        index(state).map_or(0, |i| lock(&self.counts)[i])
    }

    /// Moves one member from `from` to `to`, then the gauge, under one
    /// lock so that two members' transitions cannot leave it stale.
    fn moved(&self, from: Option<State>, to: Option<State>) {
        let mut counts = lock(&self.counts);
        if let Some(i) = from.and_then(index) {
            counts[i] = counts[i].saturating_sub(1);
        }
        if let Some(i) = to.and_then(index) {
            counts[i] += 1;
        }
        let worst = if counts[2] > 0 {
            State::Open
        } else if counts[1] > 0 {
            State::HalfOpen
        } else {
            State::Closed
        };
        report::family_state(self.labels, worst);
    }
}

impl Tag {
    pub(super) fn key(&self) -> &str {
        &self.key
    }

    /// A member's state change: its WARN (with the key), its trip, the
    /// family's gauge.
    pub(super) fn transition(&self, from: State, to: State, forced: bool) {
        report::member_transition(self.tally.labels, &self.key, from, to, forced);
        if from != to {
            self.tally.moved(Some(from), Some(to));
        }
    }

    /// A member dropped in `state`.
    pub(super) fn forget(&self, state: State) {
        if state != State::Closed {
            self.tally.moved(Some(state), None);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn trips_at_once() -> BreakerConfig {
        BreakerConfig::new().with_min_requests(1)
    }

    fn family(max_members: u32) -> BreakerFamily {
        let config = FamilyConfig::new()
            .with_breaker(trips_at_once())
            .with_max_members(max_members)
            .with_idle(Duration::from_secs(64));
        BreakerFamily::new("payments", config).unwrap()
    }

    fn open(breaker: &CircuitBreaker) {
        breaker.try_acquire().unwrap().failure();
        assert_eq!(breaker.state(), State::Open);
    }

    #[tokio::test(start_paused = true)]
    async fn one_breaker_per_key_named_after_the_family() {
        let family = family(10);
        let a = family.get("a.example");
        open(&a);
        assert_eq!(family.get("a.example").state(), State::Open);
        let b = family.get("b.example");
        assert_eq!(b.state(), State::Closed);
        assert_eq!((b.name(), b.key()), ("payments", Some("b.example")));
        let down = b.try_acquire().map(drop);
        assert!(down.is_ok());
        let down = a.try_acquire().map(drop).unwrap_err();
        assert_eq!(down.breaker(), "payments");
        assert_eq!(family.keys(), ["a.example", "b.example"]);
        assert_eq!(family.open_members(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_cap_the_least_recently_used_idle_member_goes() {
        let family = family(3);
        for key in ["a", "b", "c"] {
            drop(family.get(key));
            // Past the `idle / 64` step at which a use is recorded.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        drop(family.get("a"));
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(family.get("d"));
        assert_eq!(family.keys(), ["a", "c", "d"]);
    }

    #[tokio::test(start_paused = true)]
    async fn open_failing_and_held_members_are_never_evicted() {
        // Two calls to judge: one failure leaves a member closed but failing.
        let config = FamilyConfig::new()
            .with_breaker(BreakerConfig::new().with_min_requests(2))
            .with_max_members(4)
            .with_idle(Duration::from_secs(2));
        let family = BreakerFamily::new("payments", config).unwrap();
        let down = family.get("open");
        down.try_acquire().unwrap().failure();
        down.try_acquire().unwrap().failure();
        assert_eq!(down.state(), State::Open);
        drop(down);
        family.get("failing").try_acquire().unwrap().failure();
        let held = family.get("held");
        family.get("healthy").try_acquire().unwrap().success();
        // Past `idle`, well inside the 60 s window that keeps the failure.
        tokio::time::sleep(Duration::from_secs(5)).await;

        // Only "healthy" is idle: it goes.
        drop(family.get("new"));
        assert_eq!(family.keys(), ["failing", "held", "new", "open"]);
        family.get("new").try_acquire().unwrap().failure();

        // Open, failing, held: no room, the overflow breaker serves the key.
        let overflow = family.get("one-too-many");
        assert_eq!(
            (overflow.name(), overflow.key()),
            ("payments", Some("(overflow)"))
        );
        assert_eq!(family.get("another").key(), Some("(overflow)"));
        assert_eq!(family.keys(), ["failing", "held", "new", "open"]);

        // Once the held handle is dropped, its member is idle again.
        drop(held);
        assert_eq!(family.get("room").key(), Some("room"));
        assert_eq!(family.keys(), ["failing", "new", "open", "room"]);
    }

    #[tokio::test(start_paused = true)]
    async fn members_unused_for_idle_are_swept_below_the_cap() {
        let family = family(100);
        for key in ["a", "b", "c"] {
            drop(family.get(key));
        }
        open(&family.get("down"));
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(family.get("b"));
        tokio::time::sleep(Duration::from_secs(40)).await;
        // 70 s: "a" and "c" were unused for longer than 64 s, "b" was not;
        // "down" is open and stays whatever its age.
        drop(family.get("e"));
        assert_eq!(family.keys(), ["b", "down", "e"]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_gauge_tally_follows_every_member() {
        let family = family(10);
        let (a, b) = (family.get("a"), family.get("b"));
        open(&a);
        open(&b);
        assert_eq!(family.open_members(), 2);
        a.reset();
        assert_eq!(family.open_members(), 1);
        // A handle kept past its member's life still leaves the tally.
        drop(family);
        drop(b);
        let family2 = self::family(10);
        assert_eq!(family2.open_members(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_member_moves_to_half_open_on_the_ticker() {
        let family = family(10);
        let a = family.get("a");
        open(&a);
        tokio::time::sleep(Duration::from_secs(31)).await;
        assert_eq!(a.state(), State::HalfOpen);
        assert_eq!(family.inner.tally.count(State::HalfOpen), 1);
    }

    #[test]
    fn every_value_is_checked_and_named() {
        let check = |config: FamilyConfig| config.validate().unwrap_err();
        let err = check(FamilyConfig::new().with_max_members(0));
        assert_eq!((err.field(), err.value()), ("max_members", "0"));
        let err = check(FamilyConfig::new().with_max_members(MAX_MEMBERS + 1));
        assert_eq!((err.field(), err.value()), ("max_members", "1000001"));
        let err = check(FamilyConfig::new().with_idle(Duration::from_millis(999)));
        assert_eq!((err.field(), err.value()), ("idle", "999ms"));
        let err = check(FamilyConfig::new().with_idle(Duration::from_secs(86_401)));
        assert_eq!(err.field(), "idle");
        let err = check(FamilyConfig::new().with_breaker(
            BreakerConfig::new().with_sharing(super::super::Sharing::redis("redis://x/")),
        ));
        // Without the `breaker-redis` feature the breaker's own check
        // refuses it first, naming the same field and value.
        assert_eq!(err.field(), "shared");
        assert!(err.value().contains("redis://x/"), "{err}");
        let err =
            check(FamilyConfig::new().with_breaker(BreakerConfig::new().with_min_requests(0)));
        assert_eq!(err.field(), "min");
        let err =
            BreakerFamily::new("payments", FamilyConfig::new().with_max_members(0)).unwrap_err();
        assert!(
            err.to_string().contains("breaker family `payments`"),
            "{err}"
        );
        assert!(FamilyConfig::new().validate().is_ok());
    }
}
