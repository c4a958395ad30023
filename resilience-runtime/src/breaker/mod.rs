#![doc = include_str!("../breaker.md")]

// The internals, by role:
// - mod.rs: the handle (`CircuitBreaker`: admission, `call`, the
//   operator's methods, snapshots);
// - machine.rs: the state machine (`Machine`: transitions, trips, half-open
//   admission, the cooldown, the window, the hooks);
// - state.rs: the state word's bit layout, behind `StateWord`;
// - permit.rs: one admitted call and the settling of its outcome;
// - cut.rs: a pending call cut by its timeout or the caller's deadline;
// - ticked.rs: what the tickers of `crate::striped` do to a breaker;
// - config.rs, family.rs, report.rs, shared/: configuration, keyed
//   families, metrics and events, the fleet's state through Redis.
mod config;
mod cut;
mod family;
#[cfg(all(feature = "breaker-redis", not(loom)))]
mod fleet_sync;
mod hooks;
mod machine;
mod permit;
pub(crate) mod report;
#[cfg(all(feature = "breaker-redis", not(loom)))]
mod shared;
mod state;
#[cfg(not(loom))]
mod ticked;

use crate::striped::sync;
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

use self::machine::{Machine, Setup};
use self::state::{CLOSED, HALF_OPEN, OPEN, Probes, StateWord};
use self::sync::{Arc, Ordering::*};
use crate::clock::duration_nanos;
use crate::deadline;
use crate::error::{ConfigError, DependencyDown, Error};
use crate::retry::{ByClassify, Classifier, Classify, FromRuntimeError, Outcome};
use crate::telemetry::Labels;

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
    machine: Arc<Machine>,
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
enum CallOutcome {
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
        Ok(Self::labelled(Labels::new(service, name), config))
    }

    fn labelled(labels: Labels, config: BreakerConfig) -> Self {
        report::breaker_created(labels, State::Closed);
        let setup = Arc::new(Setup::new(labels, config, None));
        CircuitBreaker {
            machine: Arc::new(Machine::new(setup, None)),
        }
    }

    /// A breaker whose window gives threads in slots from `owned` up the
    /// shared stripe, for the model checks.
    #[cfg(loom)]
    fn with_stripes(labels: Labels, config: BreakerConfig, owned: usize) -> Self {
        let setup = Arc::new(Setup::new(labels, config, None));
        let window = crate::striped::window::SlidingWindow::with_owned(owned);
        CircuitBreaker {
            machine: Arc::new(Machine::with_window(setup, None, window)),
        }
    }

    /// A member of the family `setup` belongs to, keyed `key`; its gauge
    /// is the family's.
    fn member(setup: Arc<Setup>, key: &str) -> Self {
        CircuitBreaker {
            machine: Arc::new(Machine::new(setup, Some(key.into()))),
        }
    }

    /// The breaker's name; a [`BreakerFamily`] member's is its family's.
    pub fn name(&self) -> &'static str {
        self.machine.setup.labels.target()
    }

    /// The key of a [`BreakerFamily`] member, `None` for a breaker of no
    /// family.
    pub fn key(&self) -> Option<&str> {
        self.machine.key.as_deref()
    }

    /// The configuration the breaker runs with (fixed at creation).
    pub fn config(&self) -> &BreakerConfig {
        &self.machine.setup.config
    }

    /// The current state. An open breaker whose cooldown is over reads
    /// `Open` until the next call or tick moves it to half-open.
    pub fn state(&self) -> State {
        StateWord(self.machine.state.load(Acquire)).state()
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
    /// closure returning a [`Verdict`](crate::retry::Verdict),
    /// read through [`Verdict::outcome`](crate::retry::Verdict::outcome), or
    /// a `bool`, `true` meaning "the dependency failed"): the per-breaker
    /// override of what counts as a failure.
    pub fn call_with<Fut, T, E, W>(&self, fut: Fut, when: W) -> Call<'_, Fut, W>
    where
        Fut: Future<Output = Result<T, E>>,
        E: FromRuntimeError,
        W: Classifier<E>,
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
        let word = StateWord(self.machine.state.load(Acquire));
        if word.is_fast() {
            return Ok(Admission::Closed(word.generation()));
        }
        if word.rejects_at_once() {
            return Err(self.reject(word));
        }
        self.admit_slow()
    }

    #[cold]
    fn admit_slow(&self) -> Result<Admission, DependencyDown> {
        let machine = &*self.machine;
        let word = StateWord(machine.state.load(Acquire));
        if word.wants_runtime_ticker() {
            self.start_ticker();
        }
        if word.needs_clock() {
            machine.maintain(machine.now());
        }
        loop {
            let word = StateWord(machine.state.load(Acquire));
            let generation = word.generation();
            return match word.kind() {
                CLOSED => Ok(Admission::Closed(generation)),
                HALF_OPEN if machine.try_probe(generation) => {
                    if StateWord(machine.state.load(Acquire)).generation() != generation {
                        // That half-open period ended while we took its slot:
                        // give it back and look again.
                        machine.settle_probe(generation, None);
                        continue;
                    }
                    Ok(Admission::Probe(generation))
                }
                _ => Err(self.reject(word)),
            };
        }
    }

    #[inline]
    fn reject(&self, word: StateWord) -> DependencyDown {
        self.on_outcome(CallOutcome::Rejected);
        let down = DependencyDown::new(self.machine.setup.labels.target(), word.rejection());
        if word.cooling_down() {
            // The end of the cooldown, for `DependencyDown::retry_after`:
            // a load and an add, no clock read.
            let until = self.machine.open_until.load(Acquire);
            let until = i64::try_from(until).unwrap_or(i64::MAX);
            return down
                .reopening_from_epoch(self.machine.setup.origin_from_epoch.saturating_add(until));
        }
        down
    }

    /// Every outcome of every call passes here, rejections included.
    #[inline(always)]
    fn on_outcome(&self, outcome: CallOutcome) {
        match outcome {
            CallOutcome::Done {
                admission: Admission::Closed(generation),
                failed: false,
                slow: false,
            } => {
                if self.machine.generation() == generation {
                    self.machine.window.add_success();
                }
            }
            CallOutcome::Done {
                admission: Admission::Closed(generation),
                failed,
                slow,
            } => self.record_closed(generation, failed, slow),
            CallOutcome::Done {
                admission: Admission::Probe(generation),
                failed,
                slow,
            } => self
                .machine
                .settle_probe(generation, Some(!failed && !slow)),
            CallOutcome::Cancelled(Admission::Probe(generation)) => {
                self.machine.settle_probe(generation, None)
            }
            CallOutcome::Rejected => report::breaker_rejected(self.machine.setup.labels),
            CallOutcome::Cancelled(Admission::Closed(_)) => {}
        }
    }

    /// A failed or slow call of a closed breaker. A breaker driven by the
    /// thread of callers without a runtime, failing inside one, goes to
    /// that runtime's ticker first: its clock may be paused.
    #[cold]
    fn record_closed(&self, generation: u32, failed: bool, slow: bool) {
        if StateWord(self.machine.state.load(Acquire)).on_thread() {
            self.start_ticker();
        }
        self.machine.record_closed(generation, failed, slow);
    }

    /// Finds the breaker a ticker: the current runtime's, or outside any
    /// runtime the process's ticker thread (see `thread_ticker`). Called
    /// while no ticker drives it (`NO_TICKER`), or the thread does
    /// (`THREAD`), which hands it to a runtime when there is one.
    #[cfg(not(loom))]
    fn start_ticker(&self) {
        let state = &self.machine.state;
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            if !StateWord(state.load(Acquire)).unticked() {
                return;
            }
            // A shared breaker waits for a runtime: its sync task needs one.
            #[cfg(feature = "breaker-redis")]
            if self.machine.shared().is_some() {
                return;
            }
            if thread_ticker::running()
                && thread_ticker::claim(&*self.machine)
                && !thread_ticker::register(Arc::downgrade(&self.machine) as _)
            {
                thread_ticker::unclaim(&*self.machine);
            }
            return;
        };
        let before = StateWord(state.fetch_and(StateWord::RUNTIME_TICKER, AcqRel));
        if before.wants_runtime_ticker() {
            ticker::register(&handle, Arc::downgrade(&self.machine) as _);
            #[cfg(feature = "breaker-redis")]
            fleet_sync::start(&self.machine, &handle);
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
        self.machine.on_state_change(Box::new(hook));
    }

    /// Opens the breaker until [`force_closed`](Self::force_closed) or
    /// [`reset`](Self::reset): every call is rejected, as `"forced open"`.
    pub fn force_open(&self) {
        self.machine.transition_any(OPEN, true);
    }

    /// Disables the breaker until [`force_open`](Self::force_open) or
    /// [`reset`](Self::reset): every call goes through and is counted, but
    /// the breaker never trips.
    pub fn force_closed(&self) {
        self.machine.transition_any(CLOSED, true);
    }

    /// Back to closed with an empty window, whatever the state, forced or
    /// not.
    pub fn reset(&self) {
        self.machine.transition_any(CLOSED, false);
    }

    /// A consistent-enough picture of the breaker, for health endpoints
    /// and operators. Counters are read without stopping the calls in
    /// flight, so a busy breaker's figures may be off by those calls.
    pub fn snapshot(&self) -> Snapshot {
        let machine = &*self.machine;
        let now = machine.now();
        machine.rotate(now, machine.window.totals());
        let word = StateWord(machine.state.load(Acquire));
        let counts = machine.counts();
        let probes = Probes(machine.probes.load(Acquire));
        let until_half_open = word
            .cooling_down()
            .then(|| Duration::from_nanos(machine.open_until.load(Acquire).saturating_sub(now)));
        Snapshot {
            name: machine.setup.labels.target(),
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
            probes_in_flight: if word.is_half_open() && probes.generation() == word.generation() {
                u32::from(probes.in_flight())
            } else {
                0
            },
            fleet: machine.fleet(),
        }
    }
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = StateWord(self.machine.state.load(Relaxed));
        f.debug_struct("CircuitBreaker")
            .field("name", &self.machine.setup.labels.target())
            .field("key", &self.key())
            .field("state", &word.state())
            .field("forced", &word.forced())
            .field("config", &self.machine.setup.config)
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
