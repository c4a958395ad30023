//! The breaker's state machine: the state word and what moves it (trips,
//! the end of the cooldown, half-open admission and the probes' outcomes,
//! the operator's transitions), the window and the hooks.

use tokio::time::Instant;

use super::config::{BreakerConfig, Window};
use super::hooks::{FamilyWide, Hook, Hooks};
#[cfg(all(feature = "breaker-redis", not(loom)))]
use super::shared;
use super::state::{CLOSED, HALF_OPEN, OPEN, Probes, StateWord, later};
use super::{Fleet, report};
use crate::clock::duration_nanos;
use crate::striped::sync::{Arc, AtomicU64, OnceBox, Ordering::*};
use crate::striped::window::{Counts, LastCalls, SlidingWindow};
use crate::telemetry::Labels;

/// One breaker's state machine: its state word, cooldown, probes and
/// window, behind every handle to it.
///
/// `repr(C)`: the state word first and the window last, whose home
/// thread's counter ends it (see [`SlidingWindow`]).
#[repr(C)]
pub(super) struct Machine {
    /// Read by every call; see [`state`] for the layout. Not on a cache
    /// line of its own: no call writes the lines around it (the window's
    /// home counter is three lines on, the other threads count on the
    /// stripes), and the padding was an eighth of a breaker.
    pub(super) state: AtomicU64,
    /// What does not change with calls: a named breaker's own, shared by
    /// the members of a [`BreakerFamily`](super::BreakerFamily).
    pub(super) setup: Arc<Setup>,
    /// The key of a family member, `None` for a breaker of no family.
    pub(super) key: Option<Box<str>>,
    /// Nanoseconds since `origin` at which the cooldown ends.
    pub(super) open_until: AtomicU64,
    pub(super) probes: AtomicU64,
    /// The breaker's own hooks, a count window's log and a shared
    /// breaker's link, allocated when there are some.
    extras: OnceBox<Extras>,
    pub(super) window: SlidingWindow,
}

/// What a breaker has that does not change with its calls: a named
/// breaker's alone, one for all the members of a family (a member is then
/// the per-call state, its key and the allocations its window makes).
pub(super) struct Setup {
    /// `service` and `target` (the name) of its metrics.
    pub(super) labels: Labels,
    pub(super) config: BreakerConfig,
    pub(super) bucket_width: u64,
    /// The instant the breakers' clocks count from: bucket boundaries and
    /// the ends of cooldowns are nanoseconds since then.
    pub(super) origin: Instant,
    /// `origin` in nanoseconds from the epoch rejections count from, so
    /// that a rejection's end of cooldown is an add.
    pub(super) origin_from_epoch: i64,
    /// A family's hooks and count of open members; `None` for a named
    /// breaker.
    pub(super) family: Option<Box<FamilyWide>>,
}

impl Setup {
    pub(super) fn new(
        labels: Labels,
        config: BreakerConfig,
        family: Option<Box<FamilyWide>>,
    ) -> Setup {
        let origin = Instant::now();
        Setup {
            labels,
            config,
            bucket_width: config.bucket_width(),
            origin,
            origin_from_epoch: crate::error::nanos_from_epoch(origin),
            family,
        }
    }
}

/// What few breakers have, allocated when one does: a breaker's own
/// hooks, a count window's log, what a shared breaker shares with its sync
/// task.
struct Extras {
    hooks: Hooks,
    /// The failures of a count window by call number; `None` for a time
    /// window.
    last_calls: Option<LastCalls>,
    #[cfg(all(feature = "breaker-redis", not(loom)))]
    shared: Option<Arc<shared::Link>>,
}

impl Extras {
    fn empty() -> Extras {
        Extras {
            hooks: Hooks::new(),
            last_calls: None,
            #[cfg(all(feature = "breaker-redis", not(loom)))]
            shared: None,
        }
    }

    /// Whether a breaker needs it before any hook is added.
    fn needed(&self) -> bool {
        #[cfg(all(feature = "breaker-redis", not(loom)))]
        if self.shared.is_some() {
            return true;
        }
        self.last_calls.is_some()
    }
}

impl Machine {
    /// A closed breaker with an empty window, driven by no ticker yet:
    /// its first call looks for one.
    pub(super) fn new(setup: Arc<Setup>, key: Option<Box<str>>) -> Machine {
        Machine::with_window(setup, key, SlidingWindow::new())
    }

    /// [`new`](Self::new) with the window `window`.
    pub(super) fn with_window(
        setup: Arc<Setup>,
        key: Option<Box<str>>,
        window: SlidingWindow,
    ) -> Machine {
        let mut extras = Extras::empty();
        if let Window::Count(n) = setup.config.window() {
            extras.last_calls = Some(LastCalls::new(n));
        }
        #[cfg(all(feature = "breaker-redis", not(loom)))]
        {
            extras.shared = setup
                .config
                .sharing()
                .map(|sharing| Arc::new(shared::Link::new(sharing, setup.labels)));
        }
        Machine {
            state: AtomicU64::new(StateWord::INITIAL.0),
            setup,
            key,
            open_until: AtomicU64::new(0),
            probes: AtomicU64::new(0),
            window,
            extras: match extras.needed() {
                true => OnceBox::with_value(Box::new(extras)),
                false => OnceBox::new(),
            },
        }
    }

    /// What a shared breaker shares with its sync task.
    #[cfg(all(feature = "breaker-redis", not(loom)))]
    pub(super) fn shared(&self) -> Option<&Arc<shared::Link>> {
        self.extras.get()?.shared.as_ref()
    }

    /// A count window's log of failures; `None` for a time window.
    fn last_calls(&self) -> Option<&LastCalls> {
        self.extras.get()?.last_calls.as_ref()
    }

    /// Adds a hook for this breaker alone.
    pub(super) fn on_state_change(&self, hook: Hook) {
        self.extras
            .get_or_init(|| Box::new(Extras::empty()))
            .hooks
            .add(hook);
    }

    pub(super) fn fleet(&self) -> Fleet {
        #[cfg(all(feature = "breaker-redis", not(loom)))]
        if let Some(link) = self.shared() {
            return link.fleet();
        }
        Fleet::Off
    }

    /// The generation of the current state: it changes with every
    /// transition.
    #[inline(always)]
    pub(super) fn generation(&self) -> u32 {
        StateWord(self.state.load(Acquire)).generation()
    }

    /// Nanoseconds on tokio's clock since the breaker was created.
    pub(super) fn now(&self) -> u64 {
        duration_nanos(Instant::now().saturating_duration_since(self.setup.origin))
    }

    /// Moves a time window to the bucket of `now` (a count window keeps
    /// its calls in `last_calls`, and has no buckets to move).
    pub(super) fn rotate(&self, now: u64, totals: Counts) {
        if let Window::Time(_) = self.setup.config.window() {
            self.window.rotate(now / self.setup.bucket_width, totals);
        }
    }

    /// What has to happen by `now`: the window's rotation, the end of the
    /// cooldown.
    pub(super) fn maintain(&self, now: u64) {
        // The stripes are summed only for a rotation: most calls that read
        // the clock find the bucket unchanged, and summing reads the cache
        // line of every other thread that counts.
        if let Window::Time(_) = self.setup.config.window()
            && now / self.setup.bucket_width > self.window.epoch()
        {
            self.rotate(now, self.window.totals());
        }
        let word = StateWord(self.state.load(Acquire));
        if word.cooling_down() && now >= self.open_until.load(Acquire) {
            self.transition(word, HALF_OPEN, false, now);
        }
    }

    /// Records a failed or slow call admitted in the closed period of
    /// `generation`, and trips the breaker when the window says so. A
    /// call of an earlier period counts for nothing.
    #[cold]
    pub(super) fn record_closed(&self, generation: u32, failed: bool, slow: bool) {
        let word = StateWord(self.state.load(Acquire));
        if word.generation() != generation {
            return;
        }
        let counts = match self.setup.config.window() {
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
                match self.last_calls() {
                    Some(last) => last.record(number, failed, slow),
                    None => Counts::default(),
                }
            }
        };
        if !word.may_trip() {
            return;
        }
        if self.should_trip(counts) {
            self.transition(word, OPEN, false, self.now());
        }
    }

    /// The counts of the window now.
    pub(super) fn counts(&self) -> Counts {
        let totals = self.window.totals();
        match self.last_calls() {
            None => self.window.counts(totals),
            Some(last) => last.counts(totals.calls),
        }
    }

    /// Empties the window, as every new state period starts.
    fn clear_window(&self) {
        self.window.clear();
        if let Some(last) = self.last_calls() {
            last.clear(self.window.totals().calls);
        }
    }

    fn should_trip(&self, counts: Counts) -> bool {
        let config = &self.setup.config;
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
    pub(super) fn try_probe(&self, generation: u32) -> bool {
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
        if let Some(link) = self.shared() {
            return link.probe_limit(generation, self.setup.config.half_open());
        }
        let _ = generation;
        self.setup.config.half_open()
    }

    /// Frees a probe's slot; `Some(success)` when it completed, `None` when
    /// it was cancelled. Probes of an earlier half-open period are ignored.
    pub(super) fn settle_probe(&self, generation: u32, success: Option<bool>) {
        let half_open = |word: StateWord| word.is_half_open() && word.generation() == generation;
        if let Some(succeeded) = success
            && half_open(StateWord(self.state.load(Acquire)))
        {
            // The half-open period's own counts, for the snapshot.
            self.window.add(!succeeded, false);
            if let Some(last) = self.last_calls() {
                last.record(self.window.totals().calls, !succeeded, false);
            }
        }
        if success == Some(false) {
            // Open before the slot is freed, so that no call takes the slot
            // of a failed probe while still half-open.
            let word = StateWord(self.state.load(Acquire));
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
        let word = StateWord(self.state.load(Acquire));
        if success == Some(true)
            && half_open(word)
            && u32::from(after.successes()) >= self.setup.config.half_open()
        {
            self.transition(word, CLOSED, false, 0);
        }
    }

    /// Operator transitions: from whatever state the breaker is in.
    pub(super) fn transition_any(&self, to: u64, forced: bool) {
        let now = self.now();
        while !self.transition(StateWord(self.state.load(Acquire)), to, forced, now) {}
    }

    /// The one place where the breaker changes state: from the generation
    /// of `from` only (a late outcome of an earlier state must not move the
    /// breaker), to `to`, then the WARN and the hooks. Returns whether this
    /// call made the change.
    pub(super) fn transition(&self, from: StateWord, to: u64, forced: bool, now: u64) -> bool {
        let until = if forced {
            u64::MAX
        } else {
            now.saturating_add(duration_nanos(self.setup.config.cooldown()))
        };
        self.transition_until(from, to, forced, until)
    }

    /// Moves the breaker to its fleet's state, from `from` only: open for
    /// `open_for` more nanoseconds (an open breaker only has its cooldown
    /// moved to the fleet's), half-open or closed. Returns whether it
    /// changed.
    #[cfg(all(feature = "breaker-redis", not(loom)))]
    pub(super) fn follow(&self, from: StateWord, to: u64, open_for: Option<u64>) -> bool {
        let now = self.now();
        let until = now.saturating_add(open_for.unwrap_or(0));
        if to == OPEN && from.is_open() {
            if StateWord(self.state.load(Acquire)) == from {
                self.open_until.store(until, Release);
            }
            return false;
        }
        self.transition_until(from, to, false, until)
    }

    /// [`transition`](Self::transition), opening until `until`.
    fn transition_until(&self, from: StateWord, to: u64, forced: bool, until: u64) -> bool {
        if StateWord(self.state.load(Acquire)).generation() != from.generation() {
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
            let word = StateWord(current);
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
        let (from_state, to_state) = (before.state(), StateWord(to).state());
        #[cfg(all(feature = "breaker-redis", not(loom)))]
        if let Some(link) = self.shared() {
            link.wake();
        }
        let setup = &*self.setup;
        let family = setup.family.as_deref();
        match (&self.key, family) {
            (Some(key), Some(family)) => {
                family.transition(setup.labels, key, from_state, to_state, forced)
            }
            _ => report::breaker_transition(setup.labels, from_state, to_state, forced),
        }
        if from_state != to_state {
            let name = setup.labels.target();
            if let Some(family) = family {
                family.hooks.run(name, from_state, to_state);
            }
            if let Some(extras) = self.extras.get() {
                extras.hooks.run(name, from_state, to_state);
            }
        }
        true
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        // A member dropped open (evicted members are closed, but a caller
        // may have kept a handle to one) leaves its family's tally.
        if let (Some(_), Some(family)) = (&self.key, self.setup.family.as_deref()) {
            family.forget(
                self.setup.labels,
                StateWord(self.state.load(Acquire)).state(),
            );
        }
    }
}
