//! The task that moves breakers through time, so that calls do not have to
//! read the clock.
//!
//! It drives anything [`Ticked`]: a breaker, or a time window with no
//! breaker around it (the retry budget's deposits, see
//! [`TimedWindow`](super::timed::TimedWindow)).
//!
//! One ticker per Tokio runtime drives every breaker used on it: a breaker
//! costs the ticker one entry in a list, not a task and a timer of its own.
//! For each breaker the ticker wakes at each bucket boundary of a time
//! window and at the end of each cooldown. A millisecond before each of
//! those instants it raises the breaker's `PRECISE` flag, which sends calls
//! down the slow path where they read the clock: under tokio's paused
//! clock, a test that sleeps exactly to the end of the cooldown may be
//! woken before the ticker, and must still see the breaker half-open.
//!
//! When the runtime shuts down, its ticker marks every breaker it drove as
//! driven by none (`NO_TICKER`), and the next call of each, on whatever
//! runtime, registers it with that runtime's ticker.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::Poll;
use std::time::Duration;

use tokio::runtime::{Handle, Id};
use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};

use super::sync::Ordering::*;
pub(crate) use super::ticked::Ticked;
use super::{NO_TICKER, PRECISE};

/// How long before an event the ticker raises `PRECISE`.
pub(crate) const EARLY: u64 = 1_000_000;

/// The ticker of each runtime that has one.
static TICKERS: Mutex<Vec<(Id, Arc<Shared>)>> = Mutex::new(Vec::new());

/// What a runtime's ticker shares with the calls that register breakers.
#[derive(Default)]
struct Shared {
    /// Breakers registered since the ticker last looked.
    pending: Mutex<Vec<Weak<dyn Ticked>>>,
    wake: Notify,
}

/// A lock that a panic elsewhere cannot make unusable: every critical
/// section here leaves its data consistent.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Has the ticker of the runtime of `handle` drive `breaker` from now on,
/// starting that ticker if the runtime has none yet.
pub(crate) fn register(handle: &Handle, breaker: Weak<dyn Ticked>) {
    let id = handle.id();
    let (shared, start) = {
        let mut tickers = lock(&TICKERS);
        match tickers.iter().find(|(runtime, _)| *runtime == id) {
            Some((_, shared)) => (Arc::clone(shared), false),
            None => {
                let shared = Arc::new(Shared::default());
                tickers.push((id, Arc::clone(&shared)));
                (shared, true)
            }
        }
    };
    lock(&shared.pending).push(breaker);
    shared.wake.notify_one();
    if start {
        // Built before it is spawned: a runtime that is shutting down drops
        // the task unpolled, and the drop still releases the breakers.
        let driven = Driven {
            runtime: id,
            shared,
            entries: Vec::new(),
        };
        // Outside the lock: dropping `driven` takes it.
        handle.spawn(run(driven));
    }
}

/// One breaker on a ticker's list, and when it next needs the ticker.
pub(crate) struct Entry {
    breaker: Weak<dyn Ticked>,
    /// When to raise `PRECISE`.
    early: Instant,
    /// When to move the breaker on and lower `PRECISE`.
    at: Instant,
    raised: bool,
}

impl Entry {
    /// Moves `inner` to `now` and plans its next event.
    pub(crate) fn new(breaker: Weak<dyn Ticked>, inner: &dyn Ticked) -> Entry {
        let now = inner.now();
        inner.maintain(now);
        let next = inner.next_event(now);
        let origin = inner.origin();
        let at = |nanos: u64| origin + Duration::from_nanos(nanos);
        Entry {
            breaker,
            early: at(next.saturating_sub(EARLY).max(now)),
            at: at(next),
            raised: false,
        }
    }
}

/// The breakers a ticker drives; dropping it (the task ends with its
/// runtime) marks each of them as driven by no ticker.
struct Driven {
    runtime: Id,
    shared: Arc<Shared>,
    entries: Vec<Entry>,
}

impl Driven {
    /// Takes the newly registered breakers on.
    fn adopt(&mut self) {
        let pending = std::mem::take(&mut *lock(&self.shared.pending));
        for breaker in pending {
            if let Some(inner) = breaker.upgrade() {
                self.entries.push(Entry::new(breaker, &*inner));
            }
        }
    }

    /// Does what is due at `now`, forgets the breakers dropped meanwhile,
    /// and says when something is next due.
    fn tick(&mut self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        self.entries.retain_mut(|entry| {
            let Some(inner) = entry.breaker.upgrade() else {
                return false;
            };
            let due = entry.step(&*inner, now);
            next = Some(next.map_or(due, |next| next.min(due)));
            true
        });
        next
    }
}

impl Entry {
    /// The breaker `inner` (this entry's) at `now`: what is due is done.
    /// Returns when the entry is next due.
    pub(crate) fn step(&mut self, inner: &dyn Ticked, now: Instant) -> Instant {
        if now >= self.at {
            let breaker = self.breaker.clone();
            *self = Entry::new(breaker, inner);
            inner.word().fetch_and(!PRECISE, AcqRel);
        }
        if !self.raised && now >= self.early {
            inner.word().fetch_or(PRECISE, AcqRel);
            self.raised = true;
        }
        if self.raised { self.at } else { self.early }
    }

    /// The breaker this entry drives, if it is still alive.
    pub(crate) fn breaker(&self) -> Option<Arc<dyn Ticked>> {
        self.breaker.upgrade()
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        {
            let mut tickers = lock(&TICKERS);
            tickers.retain(|(runtime, shared)| {
                *runtime != self.runtime || !Arc::ptr_eq(shared, &self.shared)
            });
        }
        let pending = std::mem::take(&mut *lock(&self.shared.pending));
        let driven = self.entries.drain(..).map(|entry| entry.breaker);
        for inner in driven.chain(pending).filter_map(|weak| weak.upgrade()) {
            inner.word().fetch_or(NO_TICKER, AcqRel);
            inner.word().fetch_and(!PRECISE, AcqRel);
        }
    }
}

async fn run(mut driven: Driven) {
    let shared = Arc::clone(&driven.shared);
    let mut sleep = pin!(sleep_until(Instant::now()));
    loop {
        // Armed before the list is read, so a registration in between
        // still wakes the next wait.
        let mut registered = pin!(shared.wake.notified());
        registered.as_mut().enable();
        driven.adopt();
        let due = driven.tick(Instant::now());
        if let Some(due) = due {
            sleep.as_mut().reset(due);
        }
        poll_fn(|cx| {
            if registered.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
            match due {
                Some(_) => sleep.as_mut().poll(cx),
                None => Poll::Pending,
            }
        })
        .await;
    }
}
