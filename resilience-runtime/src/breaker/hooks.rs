//! The hooks a breaker runs after each state change, and what the members
//! of a family share: their hooks and how many of them are open. Both the
//! state machine, which runs them, and the family, which makes them, use
//! these; neither owns them.

use std::sync::{Mutex, PoisonError};

use super::State;
use super::report;
use crate::striped::sync::RwLock;
use crate::telemetry::Labels;

pub(super) type Hook = Box<dyn Fn(&'static str, State, State) + Send + Sync>;

/// The hooks called after each state change: a breaker's own, or a
/// family's for all its members.
pub(super) struct Hooks(RwLock<Vec<Hook>>);

impl Hooks {
    pub(super) fn new() -> Hooks {
        Hooks(RwLock::new(Vec::new()))
    }

    pub(super) fn add(&self, hook: Hook) {
        let mut hooks = self
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        hooks.push(hook);
    }

    pub(super) fn run(&self, name: &'static str, from: State, to: State) {
        let hooks = self
            .0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for hook in hooks.iter() {
            hook(name, from, to);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the members of a family share beyond their configuration: the
/// family's hooks and how many members are in each state, for its gauge.
pub(super) struct FamilyWide {
    /// Closed (unused: members are not counted closed), half-open, open.
    counts: Mutex<[usize; 3]>,
    /// Called after each state change of every member.
    pub(super) hooks: Hooks,
}

fn index(state: State) -> Option<usize> {
    match state {
        State::Closed => None,
        State::HalfOpen => Some(1),
        State::Open => Some(2),
    }
}

impl FamilyWide {
    pub(super) fn new() -> FamilyWide {
        FamilyWide {
            counts: Mutex::new([0; 3]),
            hooks: Hooks::new(),
        }
    }

    pub(super) fn count(&self, state: State) -> usize {
        index(state).map_or(0, |i| lock(&self.counts)[i])
    }

    /// Moves one member from `from` to `to`, then the gauge, under one
    /// lock so that two members' transitions cannot leave it stale.
    fn moved(&self, labels: Labels, from: Option<State>, to: Option<State>) {
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
        report::family_state(labels, worst);
    }

    /// A member's state change: its WARN (with the key), its trip, the
    /// family's gauge.
    pub(super) fn transition(
        &self,
        labels: Labels,
        key: &str,
        from: State,
        to: State,
        forced: bool,
    ) {
        report::member_transition(labels, key, from, to, forced);
        if from != to {
            self.moved(labels, Some(from), Some(to));
        }
    }

    /// A member dropped in `state`.
    pub(super) fn forget(&self, labels: Labels, state: State) {
        if state != State::Closed {
            self.moved(labels, Some(state), None);
        }
    }
}
