//! The ticker of breakers called from plain threads, outside any Tokio
//! runtime: one thread per process, started by the first such call.
//!
//! Without it every call of such a breaker read the clock and summed the
//! window's stripes to see whether a bucket had ended: 53 ns for a closed
//! call on one thread, 162 ns on two (each reading the stripes the other
//! writes), against 2.5 ns inside a runtime. With it the closed path is the
//! runtime's, instruction for instruction. The thread does what a runtime's
//! ticker does (see [`ticker`](super::ticker)), with the same entries, and
//! sleeps on a condition variable between events.
//!
//! A breaker it drives carries `THREAD`. A call made inside a runtime that
//! takes a slow path anyway (a rejection, a failure, a bucket boundary)
//! hands the breaker to that runtime's ticker, so that a test's paused
//! clock, which this thread cannot see, governs it from then on; the thread
//! forgets a breaker that lost `THREAD`. A shared breaker never comes here:
//! its sync task needs a runtime.
//!
//! Should the thread die (a state-change hook that panics, run on it),
//! every breaker it drove reads the clock again (`NO_TICKER`), as does
//! every later one: slower, never wrong.

use std::sync::atomic::AtomicBool;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use tokio::time::Instant;

use super::sync::Ordering::*;
use super::ticked::Ticked;
use super::ticker::Entry;
use super::{NO_TICKER, PRECISE, THREAD};

/// Breakers registered since the thread last looked, and its wake-up.
struct Shared {
    pending: Mutex<Vec<Weak<dyn Ticked>>>,
    wake: Condvar,
}

static SHARED: Shared = Shared {
    pending: Mutex::new(Vec::new()),
    wake: Condvar::new(),
};

/// Whether the thread runs; false before it started and after it died.
static ALIVE: AtomicBool = AtomicBool::new(false);
static STARTED: OnceLock<()> = OnceLock::new();

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether the thread runs, starting it at the first call.
pub(crate) fn running() -> bool {
    STARTED.get_or_init(|| {
        ALIVE.store(true, Release);
        let spawned = std::thread::Builder::new()
            .name("resilience-breakers".into())
            .spawn(|| run(&SHARED));
        if spawned.is_err() {
            ALIVE.store(false, Release);
        }
    });
    ALIVE.load(Acquire)
}

/// Has the thread drive `breaker`, which carries `THREAD` already; `false`
/// when the thread is gone (the caller then reads the clock).
pub(crate) fn register(breaker: Weak<dyn Ticked>) -> bool {
    let mut pending = lock(&SHARED.pending);
    // Under the lock, which the dying thread takes to mark what it leaves.
    if !ALIVE.load(Acquire) {
        return false;
    }
    pending.push(breaker);
    SHARED.wake.notify_one();
    true
}

/// The breakers a ticker thread drives.
#[derive(Default)]
pub(crate) struct Driven {
    entries: Vec<Entry>,
}

impl Driven {
    /// Takes `breakers` on.
    pub(crate) fn adopt(&mut self, breakers: Vec<Weak<dyn Ticked>>) {
        for breaker in breakers {
            if let Some(inner) = breaker.upgrade() {
                self.entries.push(Entry::new(breaker, &*inner));
            }
        }
    }

    /// Does what is due at `now`, forgets the breakers dropped or handed to
    /// a runtime meanwhile, and says when something is next due.
    pub(crate) fn tick(&mut self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        self.entries.retain_mut(|entry| {
            let Some(inner) = entry.breaker() else {
                return false;
            };
            if inner.word().load(Acquire) & THREAD == 0 {
                return false;
            }
            let due = entry.step(&*inner, now);
            next = Some(next.map_or(due, |next| next.min(due)));
            true
        });
        next
    }

    /// How many breakers it drives.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The thread's own [`Driven`]: dropping it (the thread unwinding) hands
/// every breaker it drove or was about to back to the clock.
struct Thread(Driven);

impl Drop for Thread {
    fn drop(&mut self) {
        let pending = {
            let mut pending = lock(&SHARED.pending);
            ALIVE.store(false, Release);
            std::mem::take(&mut *pending)
        };
        let driven = self.0.entries.iter().filter_map(Entry::breaker);
        for inner in driven.chain(pending.iter().filter_map(Weak::upgrade)) {
            release(&*inner);
        }
    }
}

/// Back to reading the clock, unless a runtime's ticker took the breaker.
fn release(inner: &dyn Ticked) {
    let _ = inner.word().fetch_update(AcqRel, Acquire, |word| {
        (word & THREAD != 0).then_some((word & !(THREAD | PRECISE)) | NO_TICKER)
    });
}

fn run(shared: &'static Shared) {
    let mut thread = Thread(Driven::default());
    let mut pending = lock(&shared.pending);
    loop {
        let adopted = std::mem::take(&mut *pending);
        drop(pending);
        thread.0.adopt(adopted);
        let due = thread.0.tick(Instant::now());
        pending = lock(&shared.pending);
        if !pending.is_empty() {
            continue;
        }
        pending = match due {
            Some(due) => {
                let wait = due.saturating_duration_since(Instant::now());
                shared
                    .wake
                    .wait_timeout(pending, wait)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
            None => shared
                .wake
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner),
        };
    }
}

/// Marks `inner` as driven by the thread, if no ticker drives it; true when
/// this call did (and must register it).
pub(crate) fn claim(inner: &dyn Ticked) -> bool {
    inner
        .word()
        .fetch_update(AcqRel, Acquire, |word| {
            (word & NO_TICKER != 0).then_some((word & !NO_TICKER) | THREAD)
        })
        .is_ok()
}

/// Undoes [`claim`] when the thread is gone.
pub(crate) fn unclaim(inner: &dyn Ticked) {
    release(inner);
}
