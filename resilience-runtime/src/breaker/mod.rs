//! Circuit breakers: stop calling a dependency that is down, after the
//! [guide's rules](crate::guide#circuit-breaker).
//!
//! A [`CircuitBreaker`] counts the outcomes of the calls it protects in a
//! sliding window. When, inside the window, at least `min` calls were made
//! and at least `ratio` of them failed, it trips: for `cooldown` every call
//! is rejected at once with [`DependencyDown`], without running. Then it
//! lets `half_open` probes through: success closes it, failure opens it for
//! another cooldown.
//!
//! ```
//! use resilience::breaker::{BreakerConfig, CircuitBreaker, State};
//! use resilience::retry::{Classify, HttpStatus, Verdict};
//!
//! #[derive(Debug)]
//! enum ClientError {
//!     Status(u16),
//!     Resilience(resilience::Error),
//! }
//! # impl From<resilience::Error> for ClientError {
//! #     fn from(err: resilience::Error) -> Self { ClientError::Resilience(err) }
//! # }
//! # impl Classify for ClientError {
//! #     fn classify(&self) -> Verdict {
//! #         match self {
//! #             ClientError::Status(code) => HttpStatus(*code).classify(),
//! #             ClientError::Resilience(err) => err.classify(),
//! #         }
//! #     }
//! # }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), resilience::ConfigError> {
//! let breaker = CircuitBreaker::new("user", BreakerConfig::new())?;
//! for _ in 0..20 {
//!     let _ = breaker.call(async { Err::<(), _>(ClientError::Status(503)) }).await;
//! }
//! assert_eq!(breaker.state(), State::Open);
//!
//! // Open: rejected at once, the future is never polled.
//! let err = breaker.call(async { Ok::<_, ClientError>(()) }).await.unwrap_err();
//! assert_eq!(
//!     format!("{err:?}"),
//!     r#"Resilience(DependencyDown(DependencyDown { breaker: "user", state: "open" }))"#,
//! );
//! # Ok(())
//! # }
//! ```
//!
//! # What counts as a failure
//!
//! The same classification as retry, read as an [`Outcome`]
//! ([`Classify::outcome`], or a [`When`] predicate given to
//! [`CircuitBreaker::call_with`]). Every error is a failure unless its
//! classification says the dependency answered, or that the call never
//! reached it:
//!
//! - **failure**: a transient error that outlived the retries, an error
//!   nobody can classify (an opaque transport error, a driver's error in
//!   `io::Error::other`), a timed-out attempt, a chain whose budget or
//!   whose caller's deadline ran out with an attempt in flight, a call cut
//!   by its `call_timeout` or a probe by its `probe_timeout`, a slow call
//!   under the slow-call rule, and a call that panicked (the panic goes
//!   on, as gobreaker lets it). A dependency that hangs opens the breaker.
//! - **success**: an answer, including a permanent business error (a
//!   `404`, a unique violation): the dependency is up.
//! - **ignored**, not counted at all: a call the caller cancelled (its
//!   future dropped), a call whose deadline had passed before it started,
//!   and a call whose result comes back after the breaker changed state
//!   since it was admitted (gobreaker's generations): a late failure of
//!   the last closed period cannot help trip a fresh one.
//!
//! One `call` is one logical call, however many attempts the retry chain
//! inside it makes (caller → breaker → retry → transport). A call is cut
//! by the caller's [`deadline`] even without a retry chain inside, by its
//! [`call_timeout`](BreakerConfig::with_call_timeout) (30 s) when no
//! deadline is in scope, and a half-open probe by its
//! [`probe_timeout`](BreakerConfig::with_probe_timeout): all count as
//! failures, so a dependency that never answers opens the breaker and
//! frees its callers.
//!
//! # The window
//!
//! A time window ([`Window::Time`]) counts the calls of the last `window`,
//! in ten buckets: a call leaves it a tenth of the window at a time. A
//! count window ([`Window::Count`]) holds exactly the last `n` calls, as
//! resilience4j's does. The thresholds are checked when a call fails or is
//! slow, never on a success (as gobreaker checks them; resilience4j also
//! trips on the success that completes `min`). Half-open and closed each
//! start with an empty window; an open breaker keeps the counts that
//! tripped it, for the operator.
//!
//! # Sharing a breaker across replicas
//!
//! With the `breaker-redis` feature, [`BreakerConfig::with_sharing`] (or
//! `shared = "redis://…"` and `sync_interval = "1s"` under
//! `[breakers.NAME]` in the config file) makes the breakers of that name
//! in every replica of the service one breaker for the fleet, while each
//! call is still decided in the process's memory, exactly as without
//! sharing:
//!
//! - each replica's background task adds its window's new counts to the
//!   fleet's window in Redis every sync interval, and the fleet trips on
//!   its totals (`min` and `ratio` across all replicas); a replica that
//!   trips on its own counts publishes its opening at once;
//! - an opening is a Redis key that expires with the cooldown: every
//!   replica rejects within one sync interval of it, for the cooldown the
//!   fleet has left;
//! - after the cooldown, probe tokens taken with `SET NX` let the fleet
//!   send `half_open` probes in all; their success closes every replica
//!   within a sync interval, a failure opens the fleet again;
//! - when Redis does not answer, each replica decides alone (its own
//!   window, its own `half_open` probes), says so once at WARN and with
//!   `circuit_breaker_shared_fallback = 1`, and follows the fleet again at
//!   the first sync Redis answers. No call ever waits on Redis.
//!
//! [`Snapshot::fleet`] tells which of the two a breaker does now. An
//! operator's [`force_open`](CircuitBreaker::force_open) or
//! [`force_closed`](CircuitBreaker::force_closed) applies to that replica
//! only. Shared breakers need a time window, and a Tokio runtime with its
//! IO driver (`enable_all`, as `#[tokio::main]` builds): the sync task
//! starts with the breaker's first call inside the runtime; without the
//! IO driver it cannot connect and the breaker decides alone.
//!
//! ```no_run
//! use resilience::breaker::{BreakerConfig, Sharing};
//! use resilience::registry::Registry;
//!
//! let registry = Registry::builder()
//!     .service("checkout")
//!     .breaker("user", BreakerConfig::critical().with_sharing(Sharing::redis("redis://127.0.0.1:6379/")))
//!     .build()?;
//! # drop(registry);
//! # Ok::<(), resilience::ConfigError>(())
//! ```
//!
//! # One breaker per host or tenant
//!
//! When the names are known only at run time, a [`BreakerFamily`] holds
//! one breaker per key under one name and one [`FamilyConfig`], with a cap
//! on members and eviction of idle ones; its metrics carry the family's
//! name, never the key. [`Registry::breaker_for`](crate::registry::Registry::breaker_for)
//! and `#[circuit_breaker(name = "…", key = arg)]` build them.
//!
//! # Cost
//!
//! The closed path reads one shared word and adds one to a counter of a
//! stripe only the calling thread writes, with a plain store: no lock, no
//! locked instruction, no allocation and no clock read. An open
//! breaker rejects with one load. Time is tokio's clock, read only on the
//! slow paths (failures, transitions) and by one small ticker task per
//! runtime that advances every window at its bucket boundaries (outside
//! any runtime, by one thread per process); see [`CircuitBreaker`]
//! for the details and `BENCHMARKS.md` for the figures.

// The internals, by role:
// - mod.rs: the handle (`CircuitBreaker`: admission, `call`, snapshots)
//   and the state machine (`Inner`: transitions, probes, the window);
// - state.rs: the state word's bit layout, behind `Word`;
// - permit.rs: one admitted call and the settling of its outcome;
// - cut.rs: a pending call cut by its timeout or the caller's deadline;
// - ticked.rs: what the tickers of `crate::striped` do to a breaker;
// - config.rs, family.rs, report.rs, shared/: configuration, keyed
//   families, metrics and events, the fleet's state through Redis.
mod config;
mod cut;
mod family;
mod permit;
pub(crate) mod report;
#[cfg(all(feature = "breaker-redis", not(loom)))]
mod shared;
mod state;
#[cfg(not(loom))]
mod ticked;

use crate::striped::{owner, sync, window};
#[cfg(not(loom))]
use crate::striped::{thread_ticker, ticker};

#[cfg(all(test, loom))]
mod loom_tests;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

pub use config::{BreakerConfig, Sharing, SlowCall, Window};
pub use cut::Call;
pub use family::{BreakerFamily, FamilyConfig, FamilyKey, MAX_MEMBERS};
pub use permit::Permit;
pub use state::State;

use self::state::{
    CLOCK_BITS, CLOSED, FAST, FORCED, HALF_OPEN, KIND, NO_TICKER, OPEN, Probes, THREAD, Word, later,
};
use self::sync::{Arc, AtomicU64, Ordering::*, RwLock};
use self::window::{Counts, LastCalls, SlidingWindow};
use crate::clock::duration_nanos;
use crate::deadline;
use crate::error::{ConfigError, DependencyDown, Error};
use crate::retry::{ByClassify, Classify, FromRuntimeError, Outcome, When};
use crate::telemetry::Labels;

type Hook = Box<dyn Fn(&'static str, State, State) + Send + Sync>;
/// A hook given once and attached to many breakers (a family's members).
// `std`'s `Arc` under loom too: hooks are outside the model.
pub(crate) type SharedHook = std::sync::Arc<dyn Fn(&'static str, State, State) + Send + Sync>;

/// The state word on a cache line of its own, so that the writes of
/// transitions and ticks to the fields around it never evict it.
#[repr(align(64))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Whether a shared breaker follows its fleet right now, from
/// [`CircuitBreaker::snapshot`](super::CircuitBreaker::snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fleet {
    /// The breaker is not shared.
    Off,
    /// Redis answered the last sync: the breaker counts with the fleet,
    /// follows its state and sends only the fleet's probes.
    Joined,
    /// Redis did not answer (or has not yet): the breaker decides alone,
    /// as an unshared one does, and rejoins at the first sync Redis
    /// answers. `circuit_breaker_shared_fallback` is 1 meanwhile.
    Local,
}

impl Fleet {
    /// `off`, `joined` or `local`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Fleet::Off => "off",
            Fleet::Joined => "joined",
            Fleet::Local => "local",
        }
    }
}

/// A circuit breaker protecting one dependency.
///
/// Cloning gives another handle to the same breaker. Breakers are usually
/// named and shared through the [`registry`](crate::registry), so that
/// every call site naming `"user"` counts against the same breaker.
///
/// # Time
///
/// Time is tokio's clock ([`tokio::time::Instant`]), so tests pause it
/// (`#[tokio::test(start_paused = true)]`) and stay deterministic. To keep
/// the clock off the hot path, the first call made inside a Tokio runtime
/// hands the breaker to that runtime's ticker: one task per runtime, shared
/// by all its breakers, spawned with the first of them. It wakes for each
/// breaker at each bucket boundary (every 6 s with the default window) and
/// at the end of each cooldown. A millisecond before each of those
/// instants it tells the breaker's calls to read the clock themselves, so
/// that a call landing exactly on a bucket boundary or on the end of the
/// cooldown sees it, whichever task the paused clock wakes first.
///
/// A breaker first called outside any Tokio runtime (from plain threads,
/// with [`try_acquire`](Self::try_acquire)) is driven the same way by one
/// thread per process, `resilience-breakers`, started by the first such
/// call: the closed path costs what it costs inside a runtime and reads no
/// clock. A rejection or a failure inside a runtime hands the breaker over
/// to that runtime's ticker, so that a paused clock governs it. A shared
/// breaker ([`Sharing`]) waits for a runtime instead, and until then every
/// call reads the clock, as does every call of a breaker whose runtime shut
/// down, until a call from another runtime hands it to that one's ticker.
///
/// # Example
///
/// ```
/// use resilience::breaker::{BreakerConfig, CircuitBreaker, State};
/// use std::time::Duration;
///
/// let breaker = CircuitBreaker::new(
///     "thumbnails",
///     BreakerConfig::relaxed().with_cooldown(Duration::from_secs(5)),
/// )?;
/// breaker.on_state_change(|name, from, to| println!("{name}: {from} → {to}"));
/// assert_eq!(breaker.state(), State::Closed);
/// # Ok::<(), resilience::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct CircuitBreaker {
    inner: Arc<Inner>,
}

struct Inner {
    /// Read by every call; see [`state`] for the layout.
    state: Padded<AtomicU64>,
    /// `service` and `target` (the name) of its metrics.
    labels: Labels,
    /// The key and the family of a [`BreakerFamily`] member (whose name is
    /// the family's): boxed, so that a breaker of no family pays a word.
    member: Option<Box<family::Tag>>,
    config: BreakerConfig,
    bucket_width: u64,
    /// Nanoseconds since `origin` at which the cooldown ends.
    open_until: AtomicU64,
    probes: AtomicU64,
    window: SlidingWindow,
    /// The failures of a count window by call number; `None` for a time
    /// window.
    last_calls: Option<Box<LastCalls>>,
    origin: Instant,
    /// `origin` in nanoseconds from the epoch rejections count from, so
    /// that a rejection's end of cooldown is an add.
    origin_from_epoch: i64,
    hooks: RwLock<Vec<Hook>>,
    /// What the breaker shares with its sync task, when shared.
    #[cfg(all(feature = "breaker-redis", not(loom)))]
    shared: Option<Arc<shared::Link>>,
}

/// How a call was let through, stamped with the generation of the state
/// that admitted it: an outcome that comes back after the breaker changed
/// state counts for nothing (gobreaker's generations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    /// Counted in the window of the closed period of this generation.
    Closed(u32),
    /// A half-open probe of the given generation.
    Probe(u32),
}

// A permit keeps its admission in one word, written and read whole: two
// half-word stores read back as one word stall the store buffer, which cost
// more than the rest of the closed path together.
const TAKEN: u64 = u64::MAX;
/// A [`Call`] not polled yet.
const IDLE: u64 = u64::MAX - 1;
const PROBE: u64 = 1 << 32;
/// Set on a live permit under a slow-call rule: its call is timed, so that
/// the path without one tests a single word when it settles.
const TIMED: u64 = 1 << 33;
/// The generation, in the low half of a packed admission.
const GENERATION: u64 = u32::MAX as u64;

impl Admission {
    const fn pack(self) -> u64 {
        match self {
            Admission::Closed(generation) => generation as u64,
            Admission::Probe(generation) => PROBE | generation as u64,
        }
    }

    const fn unpack(word: u64) -> Option<Admission> {
        match word {
            TAKEN | IDLE => None,
            word if word & PROBE == 0 => Some(Admission::Closed(word as u32)),
            probe => Some(Admission::Probe(probe as u32)),
        }
    }
}

/// What became of a call; every one passes through
/// [`CircuitBreaker::on_outcome`].
#[derive(Debug, Clone, Copy)]
enum Fate {
    /// The call completed: `failed` when its error was classified as the
    /// dependency's fault, `slow` when the slow-call rule applies.
    Done {
        admission: Admission,
        failed: bool,
        slow: bool,
    },
    /// The call's future was dropped before it completed.
    Cancelled(Admission),
    /// The breaker rejected the call.
    Rejected,
}

impl CircuitBreaker {
    /// A closed breaker named `name` (the `target` label of its metrics and
    /// the name carried by its rejections), after checking `config`.
    ///
    /// Its metrics carry `service = "unknown_service"`; breakers from a
    /// [`Registry`](crate::registry::Registry) carry the registry's service.
    pub fn new(name: &'static str, config: BreakerConfig) -> Result<Self, ConfigError> {
        Self::new_in(crate::telemetry::UNKNOWN_SERVICE, name, config)
    }

    /// [`new`](Self::new), for the service `service`.
    pub(crate) fn new_in(
        service: &'static str,
        name: &'static str,
        config: BreakerConfig,
    ) -> Result<Self, ConfigError> {
        config
            .validate()
            .map_err(|err| err.with_subject(format!("circuit breaker `{name}`")))?;
        Ok(Self::with_stripes(
            Labels::new(service, name),
            config,
            owner::OWNED,
            None,
        ))
    }

    fn with_stripes(
        labels: Labels,
        config: BreakerConfig,
        owned: usize,
        member: Option<Box<family::Tag>>,
    ) -> Self {
        // A member's gauge is its family's, set by the family.
        if member.is_none() {
            report::breaker_created(labels, State::Closed);
        }
        let origin = Instant::now();
        CircuitBreaker {
            inner: Arc::new(Inner {
                state: Padded(AtomicU64::new(Word::new(CLOSED, false, 0, NO_TICKER).0)),
                labels,
                member,
                config,
                bucket_width: config.bucket_width(),
                open_until: AtomicU64::new(0),
                probes: AtomicU64::new(0),
                window: SlidingWindow::new(owned),
                last_calls: match config.window() {
                    Window::Count(n) => Some(Box::new(LastCalls::new(n))),
                    Window::Time(_) => None,
                },
                origin,
                origin_from_epoch: crate::error::nanos_from_epoch(origin),
                hooks: RwLock::new(Vec::new()),
                #[cfg(all(feature = "breaker-redis", not(loom)))]
                shared: config
                    .sharing()
                    .map(|sharing| Arc::new(shared::Link::new(sharing, labels))),
            }),
        }
    }

    /// The breaker's name; a [`BreakerFamily`] member's is its family's.
    pub fn name(&self) -> &'static str {
        self.inner.labels.target()
    }

    /// The key of a [`BreakerFamily`] member, `None` for a breaker of no
    /// family.
    pub fn key(&self) -> Option<&str> {
        self.inner.member.as_deref().map(family::Tag::key)
    }

    /// The configuration the breaker runs with (fixed at creation).
    pub fn config(&self) -> &BreakerConfig {
        &self.inner.config
    }

    /// The current state. An open breaker whose cooldown is over reads
    /// `Open` until the next call or tick moves it to half-open.
    pub fn state(&self) -> State {
        Word(self.inner.state.load(Acquire)).state()
    }

    /// Runs `fut` as one logical call, or rejects it at once when the
    /// breaker is open (or half-open with all its probes in flight), with
    /// `E::from(Error::DependencyDown(..))`: `fut` is then dropped without
    /// being polled.
    ///
    /// The outcome is `E`'s [`Classify::outcome`]: a permanent error counts
    /// as a success. The call is cut, and counted as a failure, when the
    /// caller's [`deadline`] passes
    /// ([`Error::DeadlineExceeded`]) or, for a half-open probe, when its
    /// [`probe_timeout`](BreakerConfig::with_probe_timeout) does
    /// ([`Error::AttemptTimeout`]). Dropping the returned future before it
    /// completes counts nothing and frees the probe slot it may hold.
    pub fn call<Fut, T, E>(&self, fut: Fut) -> Call<'_, Fut, ByClassify>
    where
        Fut: Future<Output = Result<T, E>>,
        E: Classify + FromRuntimeError,
    {
        self.call_with(fut, ByClassify)
    }

    /// Like [`call`](Self::call), classifying errors with `when` (a
    /// [`When`] impl, e.g. a closure returning a [`Verdict`](crate::retry::Verdict),
    /// read through [`Verdict::outcome`](crate::retry::Verdict::outcome), or
    /// a `bool`, `true` meaning "the dependency failed"): the per-breaker
    /// override of what counts as a failure.
    pub fn call_with<Fut, T, E, W>(&self, fut: Fut, when: W) -> Call<'_, Fut, W>
    where
        Fut: Future<Output = Result<T, E>>,
        E: FromRuntimeError,
        W: When<E>,
    {
        Call {
            permit: Permit {
                breaker: self,
                admission: IDLE,
                started: 0,
            },
            when,
            fut,
            cut: None,
        }
    }

    /// Asks to make one call, for code that cannot hand its call to
    /// [`call`](Self::call) as a future: the [`Permit`] records the outcome.
    ///
    /// ```
    /// use resilience::breaker::{BreakerConfig, CircuitBreaker};
    ///
    /// let breaker = CircuitBreaker::new("ledger", BreakerConfig::new())?;
    /// match breaker.try_acquire() {
    ///     Ok(permit) => permit.success(),
    ///     Err(down) => eprintln!("{down}"),
    /// }
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    #[inline]
    pub fn try_acquire(&self) -> Result<Permit<'_>, DependencyDown> {
        let mut permit = Permit {
            breaker: self,
            admission: IDLE,
            started: 0,
        };
        permit.start()?;
        Ok(permit)
    }

    #[inline(always)]
    fn admit(&self) -> Result<Admission, DependencyDown> {
        let word = self.inner.state.load(Acquire);
        if word & FAST == 0 {
            return Ok(Admission::Closed(Word(word).generation()));
        }
        // Open with no clock needed and no runtime to look for, or forced
        // open: reject at once.
        if word & (KIND | CLOCK_BITS | THREAD) == OPEN || word & (KIND | FORCED) == OPEN | FORCED {
            return Err(self.reject(Word(word)));
        }
        self.admit_slow()
    }

    #[cold]
    fn admit_slow(&self) -> Result<Admission, DependencyDown> {
        let inner = &*self.inner;
        let word = Word(inner.state.load(Acquire));
        if word.0 & (NO_TICKER | THREAD) != 0 {
            self.start_ticker();
        }
        if word.needs_clock() {
            inner.maintain(inner.now());
        }
        loop {
            let word = Word(inner.state.load(Acquire));
            let generation = word.generation();
            return match word.kind() {
                CLOSED => Ok(Admission::Closed(generation)),
                HALF_OPEN if inner.try_probe(generation) => {
                    if Word(inner.state.load(Acquire)).generation() != generation {
                        // That half-open period ended while we took its slot:
                        // give it back and look again.
                        inner.settle_probe(generation, None);
                        continue;
                    }
                    Ok(Admission::Probe(generation))
                }
                _ => Err(self.reject(word)),
            };
        }
    }

    #[inline]
    fn reject(&self, word: Word) -> DependencyDown {
        self.on_outcome(Fate::Rejected);
        let down = DependencyDown::new(self.inner.labels.target(), word.rejection());
        if word.kind() == OPEN && !word.forced() {
            // The end of the cooldown, for `DependencyDown::retry_after`:
            // a load and an add, no clock read.
            let until = self.inner.open_until.load(Acquire);
            let until = i64::try_from(until).unwrap_or(i64::MAX);
            return down.reopening_from_epoch(self.inner.origin_from_epoch.saturating_add(until));
        }
        down
    }

    /// Every outcome of every call passes here, rejections included.
    #[inline(always)]
    fn on_outcome(&self, outcome: Fate) {
        match outcome {
            Fate::Done {
                admission: Admission::Closed(generation),
                failed: false,
                slow: false,
            } => {
                if self.inner.generation() == generation {
                    self.inner.window.add_success();
                }
            }
            Fate::Done {
                admission: Admission::Closed(generation),
                failed,
                slow,
            } => self.record_closed(generation, failed, slow),
            Fate::Done {
                admission: Admission::Probe(generation),
                failed,
                slow,
            } => self.inner.settle_probe(generation, Some(!failed && !slow)),
            Fate::Cancelled(Admission::Probe(generation)) => {
                self.inner.settle_probe(generation, None)
            }
            Fate::Rejected => report::breaker_rejected(self.inner.labels),
            Fate::Cancelled(Admission::Closed(_)) => {}
        }
    }

    /// A failed or slow call of a closed breaker. A breaker driven by the
    /// thread of callers without a runtime, failing inside one, goes to
    /// that runtime's ticker first: its clock may be paused.
    #[cold]
    fn record_closed(&self, generation: u32, failed: bool, slow: bool) {
        if self.inner.state.load(Acquire) & THREAD != 0 {
            self.start_ticker();
        }
        self.inner.record_closed(generation, failed, slow);
    }

    /// Finds the breaker a ticker: the current runtime's, or outside any
    /// runtime the process's ticker thread (see `thread_ticker`). Called
    /// while no ticker drives it (`NO_TICKER`), or the thread does
    /// (`THREAD`), which hands it to a runtime when there is one.
    #[cfg(not(loom))]
    fn start_ticker(&self) {
        let state = &self.inner.state;
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            if state.load(Acquire) & NO_TICKER == 0 {
                return;
            }
            // A shared breaker waits for a runtime: its sync task needs one.
            #[cfg(feature = "breaker-redis")]
            if self.inner.shared.is_some() {
                return;
            }
            if thread_ticker::running()
                && thread_ticker::claim(&*self.inner)
                && !thread_ticker::register(Arc::downgrade(&self.inner) as _)
            {
                thread_ticker::unclaim(&*self.inner);
            }
            return;
        };
        let before = state.fetch_and(!(NO_TICKER | THREAD), AcqRel);
        if before & (NO_TICKER | THREAD) != 0 {
            ticker::register(&handle, Arc::downgrade(&self.inner) as _);
            #[cfg(feature = "breaker-redis")]
            shared::start(&self.inner, &handle);
        }
    }

    #[cfg(loom)]
    fn start_ticker(&self) {}

    /// Registers `hook`, called with `(name, from, to)` after each state
    /// change, on the thread that made it. Each change is also logged at
    /// WARN through `tracing`.
    pub fn on_state_change<F>(&self, hook: F)
    where
        F: Fn(&'static str, State, State) + Send + Sync + 'static,
    {
        self.inner
            .hooks
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(Box::new(hook));
    }

    /// Opens the breaker until [`force_closed`](Self::force_closed) or
    /// [`reset`](Self::reset): every call is rejected, as `"forced open"`.
    pub fn force_open(&self) {
        self.inner.transition_any(OPEN, true);
    }

    /// Disables the breaker until [`force_open`](Self::force_open) or
    /// [`reset`](Self::reset): every call goes through and is counted, but
    /// the breaker never trips.
    pub fn force_closed(&self) {
        self.inner.transition_any(CLOSED, true);
    }

    /// Back to closed with an empty window, whatever the state, forced or
    /// not.
    pub fn reset(&self) {
        self.inner.transition_any(CLOSED, false);
    }

    /// A consistent-enough picture of the breaker, for health endpoints
    /// and operators. Counters are read without stopping the calls in
    /// flight, so a busy breaker's figures may be off by those calls.
    pub fn snapshot(&self) -> Snapshot {
        let inner = &*self.inner;
        let now = inner.now();
        inner.rotate(now, inner.window.totals());
        let word = Word(inner.state.load(Acquire));
        let counts = inner.counts();
        let probes = Probes(inner.probes.load(Acquire));
        let until_half_open = (word.kind() == OPEN && !word.forced())
            .then(|| Duration::from_nanos(inner.open_until.load(Acquire).saturating_sub(now)));
        Snapshot {
            name: inner.labels.target(),
            state: word.state(),
            forced: word.forced(),
            calls: counts.calls,
            failures: counts.failures,
            slow_calls: counts.slow,
            failure_ratio: if counts.calls == 0 {
                0.0
            } else {
                counts.failures as f64 / counts.calls as f64
            },
            until_half_open,
            probes_in_flight: if word.kind() == HALF_OPEN
                && probes.generation() == word.generation()
            {
                u32::from(probes.in_flight())
            } else {
                0
            },
            fleet: inner.fleet(),
        }
    }
}

impl Inner {
    fn fleet(&self) -> Fleet {
        #[cfg(all(feature = "breaker-redis", not(loom)))]
        if let Some(link) = &self.shared {
            return link.fleet();
        }
        Fleet::Off
    }

    /// The generation of the current state: it changes with every
    /// transition.
    #[inline(always)]
    fn generation(&self) -> u32 {
        Word(self.state.load(Acquire)).generation()
    }

    /// Nanoseconds on tokio's clock since the breaker was created.
    fn now(&self) -> u64 {
        duration_nanos(Instant::now().saturating_duration_since(self.origin))
    }

    /// Moves a time window to the bucket of `now` (a count window keeps
    /// its calls in `last_calls`, and has no buckets to move).
    fn rotate(&self, now: u64, totals: Counts) {
        if let Window::Time(_) = self.config.window() {
            self.window.rotate(now / self.bucket_width, totals);
        }
    }

    /// What has to happen by `now`: the window's rotation, the end of the
    /// cooldown.
    fn maintain(&self, now: u64) {
        // The stripes are summed only for a rotation: most calls that read
        // the clock find the bucket unchanged, and summing reads the cache
        // line of every other thread that counts.
        if let Window::Time(_) = self.config.window()
            && now / self.bucket_width > self.window.epoch()
        {
            self.rotate(now, self.window.totals());
        }
        let word = Word(self.state.load(Acquire));
        if word.kind() == OPEN && !word.forced() && now >= self.open_until.load(Acquire) {
            self.transition(word, HALF_OPEN, false, now);
        }
    }

    /// Records a failed or slow call admitted in the closed period of
    /// `generation`, and trips the breaker when the window says so. A
    /// call of an earlier period counts for nothing.
    #[cold]
    fn record_closed(&self, generation: u32, failed: bool, slow: bool) {
        let word = Word(self.state.load(Acquire));
        if word.generation() != generation {
            return;
        }
        let counts = match self.config.window() {
            Window::Time(_) => {
                // Calls before this one belong to the buckets they were
                // made in.
                self.rotate(self.now(), self.window.totals());
                self.window.add(failed, slow);
                self.window.counts(self.window.totals())
            }
            Window::Count(_) => {
                self.window.add(failed, slow);
                let number = self.window.totals().calls;
                match &self.last_calls {
                    Some(last) => last.record(number, failed, slow),
                    None => Counts::default(),
                }
            }
        };
        if word.0 & (KIND | FORCED) != CLOSED {
            return;
        }
        if self.should_trip(counts) {
            self.transition(word, OPEN, false, self.now());
        }
    }

    /// The counts of the window now.
    fn counts(&self) -> Counts {
        let totals = self.window.totals();
        match &self.last_calls {
            None => self.window.counts(totals),
            Some(last) => last.counts(totals.calls),
        }
    }

    /// Empties the window, as every new state period starts.
    fn clear_window(&self) {
        self.window.clear();
        if let Some(last) = &self.last_calls {
            last.clear(self.window.totals().calls);
        }
    }

    fn should_trip(&self, counts: Counts) -> bool {
        let config = &self.config;
        if counts.calls < u64::from(config.min_requests()) {
            return false;
        }
        let calls = counts.calls as f64;
        counts.failures as f64 >= config.failure_ratio() * calls
            || config
                .slow_call()
                .is_some_and(|slow| counts.slow as f64 >= slow.ratio * calls)
    }

    /// Takes a probe slot of the half-open state of `generation`, if one is
    /// free.
    fn try_probe(&self, generation: u32) -> bool {
        let limit = self.probe_limit(generation).min(u32::from(u16::MAX));
        if limit == 0 {
            // A shared breaker whose fleet gave this replica no probe.
            return false;
        }
        let mut current = Probes(self.probes.load(Acquire));
        loop {
            let next = if current.generation() == generation {
                if u32::from(current.successes()) + u32::from(current.in_flight()) >= limit {
                    return false;
                }
                Probes::new(generation, current.successes(), current.in_flight() + 1)
            } else if later(generation, current.generation()) {
                // The first probe of a new half-open period.
                Probes::new(generation, 0, 1)
            } else {
                // A later half-open period already started: our view is stale.
                return false;
            };
            match self
                .probes
                .compare_exchange(current.0, next.0, AcqRel, Acquire)
            {
                Ok(_) => return true,
                Err(actual) => current = Probes(actual),
            }
        }
    }

    /// How many probes the half-open period of `generation` may have
    /// in flight or succeeded.
    fn probe_limit(&self, generation: u32) -> u32 {
        #[cfg(all(feature = "breaker-redis", not(loom)))]
        if let Some(link) = &self.shared {
            return link.probe_limit(generation, self.config.half_open());
        }
        let _ = generation;
        self.config.half_open()
    }

    /// Frees a probe's slot; `Some(success)` when it completed, `None` when
    /// it was cancelled. Probes of an earlier half-open period are ignored.
    fn settle_probe(&self, generation: u32, success: Option<bool>) {
        let half_open = |word: Word| word.kind() == HALF_OPEN && word.generation() == generation;
        if let Some(succeeded) = success
            && half_open(Word(self.state.load(Acquire)))
        {
            // The half-open period's own counts, for the snapshot.
            self.window.add(!succeeded, false);
            if let Some(last) = &self.last_calls {
                last.record(self.window.totals().calls, !succeeded, false);
            }
        }
        if success == Some(false) {
            // Open before the slot is freed, so that no call takes the slot
            // of a failed probe while still half-open.
            let word = Word(self.state.load(Acquire));
            if half_open(word) {
                self.transition(word, OPEN, false, self.now());
            }
        }
        let mut current = Probes(self.probes.load(Acquire));
        let after = loop {
            if current.generation() != generation || current.in_flight() == 0 {
                return;
            }
            let successes = current.successes() + u16::from(success == Some(true));
            let next = Probes::new(generation, successes, current.in_flight() - 1);
            match self
                .probes
                .compare_exchange(current.0, next.0, AcqRel, Acquire)
            {
                Ok(_) => break next,
                Err(actual) => current = Probes(actual),
            }
        };
        let word = Word(self.state.load(Acquire));
        if success == Some(true)
            && half_open(word)
            && u32::from(after.successes()) >= self.config.half_open()
        {
            self.transition(word, CLOSED, false, 0);
        }
    }

    /// Operator transitions: from whatever state the breaker is in.
    fn transition_any(&self, to: u64, forced: bool) {
        let now = self.now();
        while !self.transition(Word(self.state.load(Acquire)), to, forced, now) {}
    }

    /// The one place where the breaker changes state: from the generation
    /// of `from` only (a late outcome of an earlier state must not move the
    /// breaker), to `to`, then the WARN and the hooks. Returns whether this
    /// call made the change.
    fn transition(&self, from: Word, to: u64, forced: bool, now: u64) -> bool {
        let until = if forced {
            u64::MAX
        } else {
            now.saturating_add(duration_nanos(self.config.cooldown()))
        };
        self.transition_until(from, to, forced, until)
    }

    /// Moves the breaker to its fleet's state, from `from` only: open for
    /// `open_for` more nanoseconds (an open breaker only has its cooldown
    /// moved to the fleet's), half-open or closed. Returns whether it
    /// changed.
    #[cfg(all(feature = "breaker-redis", not(loom)))]
    fn follow(&self, from: Word, to: u64, open_for: Option<u64>) -> bool {
        let now = self.now();
        let until = now.saturating_add(open_for.unwrap_or(0));
        if to == OPEN && from.kind() == OPEN {
            if Word(self.state.load(Acquire)) == from {
                self.open_until.store(until, Release);
            }
            return false;
        }
        self.transition_until(from, to, false, until)
    }

    /// [`transition`](Self::transition), opening until `until`.
    fn transition_until(&self, from: Word, to: u64, forced: bool, until: u64) -> bool {
        if Word(self.state.load(Acquire)).generation() != from.generation() {
            return false;
        }
        // Set up the new state before it becomes visible. Half-open and
        // closed start with fresh counts (gobreaker, resilience4j); open
        // keeps the counts that tripped it, for the operator.
        if to == OPEN {
            self.open_until.store(until, Release);
        } else {
            self.clear_window();
        }
        let mut current = self.state.load(Acquire);
        let before = loop {
            let word = Word(current);
            if word.generation() != from.generation() {
                return false;
            }
            let next = word.next(to, forced);
            match self
                .state
                .compare_exchange(current, next.0, AcqRel, Acquire)
            {
                Ok(_) => break word,
                Err(actual) => current = actual,
            }
        };
        let (from_state, to_state) = (before.state(), Word(to).state());
        #[cfg(all(feature = "breaker-redis", not(loom)))]
        if let Some(link) = &self.shared {
            link.wake();
        }
        match &self.member {
            None => report::breaker_transition(self.labels, from_state, to_state, forced),
            Some(member) => member.transition(from_state, to_state, forced),
        }
        if from_state != to_state {
            let hooks = self
                .hooks
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            for hook in hooks.iter() {
                hook(self.labels.target(), from_state, to_state);
            }
        }
        true
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // A member dropped open (evicted members are closed, but a caller
        // may have kept a handle to one) leaves its family's tally.
        if let Some(member) = &self.member {
            member.forget(Word(self.state.load(Acquire)).state());
        }
    }
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = Word(self.inner.state.load(Relaxed));
        f.debug_struct("CircuitBreaker")
            .field("name", &self.inner.labels.target())
            .field("key", &self.key())
            .field("state", &word.state())
            .field("forced", &word.forced())
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// A read-only picture of a breaker, from [`CircuitBreaker::snapshot`].
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The breaker's name.
    pub name: &'static str,
    /// The state.
    pub state: State,
    /// Whether an operator forced the state ([`CircuitBreaker::force_open`],
    /// [`CircuitBreaker::force_closed`]).
    pub forced: bool,
    /// Calls counted in the window.
    pub calls: u64,
    /// Of which failed.
    pub failures: u64,
    /// Of which slow, under the slow-call rule.
    pub slow_calls: u64,
    /// `failures / calls`, 0 for an empty window.
    pub failure_ratio: f64,
    /// Time left before an open breaker lets probes through; `None` unless
    /// open (and not forced).
    pub until_half_open: Option<Duration>,
    /// Probes in flight, when half-open.
    pub probes_in_flight: u32,
    /// Whether the breaker follows its fleet ([`Sharing`]).
    pub fleet: Fleet,
}

#[cfg(all(test, not(loom)))]
mod tests;
