//! The bulkhead: a fixed number of calls in flight, an optional bounded
//! wait for a slot.

use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use super::Priority;
use super::report::{self, Report};
use crate::error::{ConfigError, Overloaded, ShedBy};
use crate::retry::FromRuntimeError;
use crate::telemetry::Labels;

/// At most `max` calls in flight to one dependency; the next is shed with
/// [`Overloaded`], at once or after waiting at most
/// [`max_wait`](Self::with_max_wait) for a slot.
///
/// Each [`Priority`] may fill its share of `max` ([`Priority::share`]);
/// sheddable calls never wait. **Critical calls are shed last**: a slot
/// that frees goes to a waiting critical call before any other, and while
/// one waits no call of another priority takes a slot; default calls then
/// get the slots in the order they came: a call that arrives while calls
/// of its priority wait queues behind them ([`try_acquire`](Self::try_acquire)
/// refuses it), so that a slot that frees goes to the waiter woken for it.
///
/// Admission is one compare-and-swap (and a read of the waiters' count)
/// and the release one subtraction (plus a wake-up when someone waits):
/// no clock, no lock, no allocation.
///
/// ```
/// use resilience::limit::{Bulkhead, Priority};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bulkhead = Bulkhead::new("user", 2)?;
/// let a = bulkhead.try_acquire(Priority::Default)?;
/// let _b = bulkhead.try_acquire(Priority::Default)?;
/// assert!(bulkhead.try_acquire(Priority::Default).is_err());
/// drop(a);
/// let answer = bulkhead
///     .call(Priority::Default, async { Ok::<_, resilience::Error>(42) })
///     .await?;
/// assert_eq!(answer, 42);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Bulkhead {
    max: u32,
    /// [`Priority::share`] of `max` for each priority, by
    /// [`Priority::index`]: computed once, so that an admission reads its
    /// share rather than dividing (BENCHMARKS.md, *Load limiting*).
    shares: [u32; 3],
    max_wait: Duration,
    /// The calls in flight (the low 32 bits) and the critical calls
    /// waiting for a slot (the high 32 bits, [`CRITICAL_WAITING`] each),
    /// in one word: one read tells an admission both whether a slot is
    /// free and whether a critical call waits for it, and the release's
    /// subtraction returns both.
    state: AtomicU64,
    /// Default calls waiting for a slot; a release wakes one only when no
    /// critical call waits and this is not 0.
    waiting: AtomicU32,
    /// Wakes a waiting critical call.
    freed_critical: Notify,
    /// Wakes a waiting default call.
    freed: Notify,
    report: Report,
}

/// The calls in flight, in [`Bulkhead::state`].
const IN_FLIGHT: u64 = u32::MAX as u64;
/// One critical call waiting, in [`Bulkhead::state`].
const CRITICAL_WAITING: u64 = 1 << 32;

impl Bulkhead {
    /// A bulkhead named `name` (the `target` label of its metrics) letting
    /// at most `max` calls through at once, shedding the next at once.
    ///
    /// # Errors
    ///
    /// A `max` of 0, which would shed every call.
    pub fn new(name: &'static str, max: u32) -> Result<Self, ConfigError> {
        Self::new_in(crate::telemetry::UNKNOWN_SERVICE, name, max)
    }

    pub(crate) fn new_in(
        service: &'static str,
        name: &'static str,
        max: u32,
    ) -> Result<Self, ConfigError> {
        if max == 0 {
            return Err(ConfigError::new(
                format!("bulkhead `{name}`"),
                "max_concurrent",
                max,
                "a bulkhead of 0 would shed every call; use at least 1",
            ));
        }
        let labels = Labels::new(service, name);
        report::limit_changed(labels, max);
        Ok(Self {
            max,
            shares: Priority::ALL.map(|priority| priority.share(max)),
            max_wait: Duration::ZERO,
            state: AtomicU64::new(0),
            waiting: AtomicU32::new(0),
            freed_critical: Notify::new(),
            freed: Notify::new(),
            report: Report::new(labels, ShedBy::Bulkhead),
        })
    }

    /// The same bulkhead, whose [`acquire`](Self::acquire) waits at most
    /// `max_wait` for a slot before shedding the call (default: no wait).
    ///
    /// The wait counts against the caller's time: keep it well below the
    /// retry chain's `max_elapsed` and the caller's deadline.
    #[must_use]
    pub fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// The bulkhead's name.
    pub fn name(&self) -> &'static str {
        self.report.name()
    }

    /// The most calls in flight at once.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// The longest [`acquire`](Self::acquire) waits for a slot.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// The calls in flight now.
    pub fn in_flight(&self) -> u32 {
        (self.state.load(Ordering::Relaxed) & IN_FLIGHT) as u32
    }

    /// Takes a slot for a call of `priority` if one is free, without
    /// waiting.
    ///
    /// # Errors
    ///
    /// [`Overloaded`] when the calls in flight already fill the share of
    /// `priority`.
    #[inline]
    pub fn try_acquire(&self, priority: Priority) -> Result<BulkheadPermit<'_>, Overloaded> {
        self.admit(priority, Arrival::New)
            .ok_or_else(|| self.report.shed(priority, self.max))
    }

    /// `arrival`: a call that just came does not pass the calls of its
    /// priority already waiting (a slot that frees is theirs, in the order
    /// they came); a waiter woken for a slot takes it.
    #[inline]
    fn admit(&self, priority: Priority, arrival: Arrival) -> Option<BulkheadPermit<'_>> {
        if arrival == Arrival::New
            && priority != Priority::Critical
            && self.waiting.load(Ordering::SeqCst) != 0
        {
            return None;
        }
        // Compare-and-swap rather than add-then-undo: a call that is
        // refused never raises the count, so it cannot make another call
        // (a waiter woken for a freed slot) fail in its turn.
        let share = u64::from(self.shares[priority.index()]);
        // A call that is not critical compares the whole word: a critical
        // call waiting puts it above every share, so that the slot it
        // waits for stays its own.
        let seen = match (priority, arrival) {
            (Priority::Critical, Arrival::Woken) => IN_FLIGHT,
            // A critical call that just came queues behind the critical
            // calls waiting: their count, in the high bits, is above any
            // share.
            _ => u64::MAX,
        };
        let mut before = self.state.load(Ordering::SeqCst);
        loop {
            if before & seen >= share {
                return None;
            }
            match self.state.compare_exchange_weak(
                before,
                before + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => break,
                Err(actual) => before = actual,
            }
        }
        let recording = report::limit_recording();
        if recording {
            report::limit_in_flight(self.report.labels(), (before & IN_FLIGHT) as u32 + 1);
        }
        Some(BulkheadPermit {
            bulkhead: self,
            recording,
        })
    }

    /// Takes a slot for a call of `priority`, waiting at most
    /// [`max_wait`](Self::max_wait) for one (sheddable calls never wait).
    /// A slot that frees goes to a waiting critical call first, then to
    /// the default calls in the order they came.
    ///
    /// # Errors
    ///
    /// [`Overloaded`] when no slot was freed in time.
    pub async fn acquire(&self, priority: Priority) -> Result<BulkheadPermit<'_>, Overloaded> {
        if let Some(permit) = self.admit(priority, Arrival::New) {
            return Ok(permit);
        }
        if self.max_wait.is_zero() || priority == Priority::Sheddable {
            return Err(self.report.shed(priority, self.max));
        }
        let until = tokio::time::Instant::now() + self.max_wait;
        let critical = priority == Priority::Critical;
        let (freed, _waiting, ahead) = if critical {
            let before = self.state.fetch_add(CRITICAL_WAITING, Ordering::SeqCst);
            (
                &self.freed_critical,
                Waiting::critical(self),
                before / CRITICAL_WAITING,
            )
        } else {
            let before = self.waiting.fetch_add(1, Ordering::SeqCst);
            (&self.freed, Waiting::default(self), u64::from(before))
        };
        // The first in line looks for a slot freed since its first try;
        // one with calls ahead of it waits to be woken, so that the slot
        // that frees goes to the one woken for it (wake-ups go in the
        // order the waiters registered).
        let mut look = ahead == 0;
        loop {
            let freed = freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            // After registering: a slot freed since the last try wakes
            // this one, or is seen here.
            if look && let Some(permit) = self.admit(priority, Arrival::Woken) {
                return Ok(permit);
            }
            look = true;
            if tokio::time::timeout_at(until, freed).await.is_err() {
                return Err(self.report.shed(priority, self.max));
            }
        }
    }

    /// Runs `call` in a slot (waiting for one as [`acquire`](Self::acquire)
    /// does), or sheds it with the caller's error type.
    pub async fn call<F, T, E>(&self, priority: Priority, call: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
        E: FromRuntimeError,
    {
        let _permit = self
            .acquire(priority)
            .await
            .map_err(|shed| E::from_runtime(shed.into()))?;
        call.await
    }

    /// Frees a slot; `recording`: a recorder was in scope at the
    /// admission, so that the gauge is worth setting.
    #[inline]
    fn release(&self, recording: bool) {
        let before = self.state.fetch_sub(1, Ordering::SeqCst);
        if before >= CRITICAL_WAITING {
            self.freed_critical.notify_one();
        } else if self.waiting.load(Ordering::SeqCst) != 0 {
            self.freed.notify_one();
        }
        // The gauge is set by every admission; a release sets it only when
        // the last call leaves, so that an idle limiter reads 0.
        if recording && before & IN_FLIGHT == 1 {
            report::limit_in_flight(self.report.labels(), 0);
        }
    }

    /// After a waiter left (admitted, or shed at `max_wait`): wakes the
    /// next one if a slot is still free for it. A release wakes one waiter
    /// per slot, and the one it woke may have taken another slot meanwhile
    /// or given up, so that a slot freed for it would otherwise wait for
    /// the next release while someone waits for it.
    fn pass_on(&self) {
        let state = self.state.load(Ordering::SeqCst);
        if state & IN_FLIGHT >= u64::from(self.max) {
            return;
        }
        if state >= CRITICAL_WAITING {
            self.freed_critical.notify_one();
        } else if state < u64::from(self.shares[Priority::Default.index()])
            && self.waiting.load(Ordering::SeqCst) != 0
        {
            self.freed.notify_one();
        }
    }
}

/// Who asks for a slot: a call that just came, or a waiter that may take
/// the slot it was woken for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrival {
    New,
    Woken,
}

/// Counts a caller out of the waiters however its wait ends, then passes
/// a free slot on to the next.
struct Waiting<'a> {
    bulkhead: &'a Bulkhead,
    critical: bool,
}

impl<'a> Waiting<'a> {
    fn critical(bulkhead: &'a Bulkhead) -> Self {
        Self {
            bulkhead,
            critical: true,
        }
    }

    fn default(bulkhead: &'a Bulkhead) -> Self {
        Self {
            bulkhead,
            critical: false,
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.critical {
            self.bulkhead
                .state
                .fetch_sub(CRITICAL_WAITING, Ordering::SeqCst);
        } else {
            self.bulkhead.waiting.fetch_sub(1, Ordering::SeqCst);
        }
        self.bulkhead.pass_on();
    }
}

/// A slot of a [`Bulkhead`], freed when dropped.
#[derive(Debug)]
#[must_use = "a permit holds a slot until it is dropped"]
pub struct BulkheadPermit<'a> {
    bulkhead: &'a Bulkhead,
    /// A recorder was in scope when the slot was taken.
    recording: bool,
}

impl Drop for BulkheadPermit<'_> {
    #[inline]
    fn drop(&mut self) {
        self.bulkhead.release(self.recording);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn sheds_the_call_past_max_and_says_so() {
        let bulkhead = Bulkhead::new("inventory", 2).unwrap();
        let a = bulkhead.try_acquire(Priority::Critical).unwrap();
        let _b = bulkhead.try_acquire(Priority::Critical).unwrap();
        let shed = bulkhead.try_acquire(Priority::Critical).unwrap_err();
        assert_eq!(shed, Overloaded::new("inventory", ShedBy::Bulkhead, 2),);
        // A shed call took no slot.
        assert_eq!(bulkhead.in_flight(), 2);
        drop(a);
        assert_eq!(bulkhead.in_flight(), 1);
        assert!(bulkhead.try_acquire(Priority::Critical).is_ok());
    }

    #[test]
    fn a_bulkhead_of_zero_is_refused() {
        let err = Bulkhead::new("inventory", 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid bulkhead `inventory`: `max_concurrent = 0`: a bulkhead of 0 would shed every call; use at least 1"
        );
    }

    #[test]
    fn sheddable_calls_leave_half_to_the_others() {
        let bulkhead = Bulkhead::new("inventory", 4).unwrap();
        let _s: Vec<_> = (0..2)
            .map(|_| bulkhead.try_acquire(Priority::Sheddable).unwrap())
            .collect();
        assert!(bulkhead.try_acquire(Priority::Sheddable).is_err());
        let _d: Vec<_> = (0..2)
            .map(|_| bulkhead.try_acquire(Priority::Default).unwrap())
            .collect();
        assert_eq!(bulkhead.in_flight(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_call_gets_the_slot_freed_before_max_wait() {
        let bulkhead = Arc::new(
            Bulkhead::new("inventory", 1)
                .unwrap()
                .with_max_wait(50 * MS),
        );
        let held = bulkhead.try_acquire(Priority::Default).unwrap();
        let started = tokio::time::Instant::now();
        let waiter = {
            let bulkhead = bulkhead.clone();
            tokio::spawn(async move {
                bulkhead.acquire(Priority::Default).await.map(drop)?;
                Ok::<_, Overloaded>(tokio::time::Instant::now())
            })
        };
        tokio::time::sleep(20 * MS).await;
        drop(held);
        let admitted_at = waiter.await.unwrap().unwrap();
        assert_eq!(admitted_at - started, 20 * MS);
        assert_eq!(bulkhead.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_call_is_shed_at_max_wait() {
        let bulkhead = Bulkhead::new("inventory", 1)
            .unwrap()
            .with_max_wait(50 * MS);
        let _held = bulkhead.try_acquire(Priority::Default).unwrap();
        let started = tokio::time::Instant::now();
        let shed = bulkhead.acquire(Priority::Default).await.unwrap_err();
        assert_eq!(started.elapsed(), 50 * MS);
        assert_eq!(shed.by(), ShedBy::Bulkhead);
        // Sheddable calls never wait.
        let started = tokio::time::Instant::now();
        assert!(bulkhead.acquire(Priority::Sheddable).await.is_err());
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(bulkhead.waiting.load(Ordering::SeqCst), 0);
    }

    /// A waiter's outcome: admitted (and when), or shed (and when).
    type Waited = (Result<(), Overloaded>, Duration);

    /// Waits for a slot of `bulkhead` at `priority` from now, holds it for
    /// `hold`, and says how the wait ended and when (from `started`).
    fn waiter(
        bulkhead: &Arc<Bulkhead>,
        priority: Priority,
        started: tokio::time::Instant,
        hold: Duration,
    ) -> tokio::task::JoinHandle<Waited> {
        let bulkhead = bulkhead.clone();
        tokio::spawn(async move {
            match bulkhead.acquire(priority).await {
                Ok(_permit) => {
                    let at = started.elapsed();
                    tokio::time::sleep(hold).await;
                    (Ok(()), at)
                }
                Err(shed) => (Err(shed), started.elapsed()),
            }
        })
    }

    /// Calls marked critical are shed last when the limit is reached, as
    /// failsafe-go's prioritization: "when a policy is
    /// overloaded, lower priority executions will be rejected before
    /// higher priority ones". A critical call that came second must get
    /// the freed slot, and the default call before it be the one shed at
    /// `max_wait`, not the other way round (the order of arrival).
    #[tokio::test(start_paused = true)]
    async fn a_freed_slot_goes_to_a_waiting_critical_call_before_an_earlier_one() {
        let bulkhead = Arc::new(
            Bulkhead::new("inventory", 1)
                .unwrap()
                .with_max_wait(50 * MS),
        );
        let held = bulkhead.try_acquire(Priority::Default).unwrap();
        let started = tokio::time::Instant::now();
        let default = waiter(&bulkhead, Priority::Default, started, 100 * MS);
        tokio::time::sleep(MS).await;
        let critical = waiter(&bulkhead, Priority::Critical, started, 100 * MS);
        tokio::time::sleep(9 * MS).await;
        drop(held);
        let (critical, default) = (critical.await.unwrap(), default.await.unwrap());
        assert_eq!(
            critical,
            (Ok(()), 10 * MS),
            "the critical call gets the slot"
        );
        let (shed, at) = default;
        assert_eq!(shed.unwrap_err().by(), ShedBy::Bulkhead);
        assert_eq!(at, 50 * MS, "the default call is shed at its max_wait");
    }

    /// The slot freed in a bulkhead of 20 is one only a critical call may
    /// take (a default call fills at most 18): it must reach the critical
    /// waiter even when a default call has waited longer.
    #[tokio::test(start_paused = true)]
    async fn a_slot_only_a_critical_call_may_take_reaches_the_critical_waiter() {
        let bulkhead = Arc::new(
            Bulkhead::new("inventory", 20)
                .unwrap()
                .with_max_wait(50 * MS),
        );
        let mut held: Vec<_> = (0..20)
            .map(|_| bulkhead.try_acquire(Priority::Critical).unwrap())
            .collect();
        let started = tokio::time::Instant::now();
        let default = waiter(&bulkhead, Priority::Default, started, Duration::ZERO);
        tokio::time::sleep(MS).await;
        let critical = waiter(&bulkhead, Priority::Critical, started, Duration::ZERO);
        tokio::time::sleep(9 * MS).await;
        held.pop();
        assert_eq!(critical.await.unwrap(), (Ok(()), 10 * MS));
        let (shed, at) = default.await.unwrap();
        assert!(shed.is_err());
        assert_eq!(at, 50 * MS);
        drop(held);
    }

    /// While a critical call waits, a slot that frees is its own: a call
    /// of another priority arriving at that moment does not take it.
    #[tokio::test(start_paused = true)]
    async fn no_other_call_takes_the_slot_a_critical_call_waits_for() {
        let bulkhead = Arc::new(
            Bulkhead::new("inventory", 4)
                .unwrap()
                .with_max_wait(50 * MS),
        );
        let mut held: Vec<_> = (0..4)
            .map(|_| bulkhead.try_acquire(Priority::Default).unwrap())
            .collect();
        let started = tokio::time::Instant::now();
        let critical = waiter(&bulkhead, Priority::Critical, started, 100 * MS);
        tokio::time::sleep(10 * MS).await;
        held.pop();
        // The caller that freed the slot calls again at once.
        assert_eq!(Priority::Default.share(4), 4);
        assert!(bulkhead.try_acquire(Priority::Default).is_err());
        assert_eq!(critical.await.unwrap(), (Ok(()), 10 * MS));
        drop(held);
    }

    /// Six critical and six default calls queue for a bulkhead of 2, in
    /// turns: every critical call is admitted before any default one, and
    /// every call is admitted as slots free (no wake-up is lost when two
    /// slots free at once), two at a time.
    #[tokio::test(start_paused = true)]
    async fn every_waiting_critical_call_goes_before_every_default_one() {
        let bulkhead = Arc::new(
            Bulkhead::new("inventory", 2)
                .unwrap()
                .with_max_wait(MS * 1000),
        );
        let held: Vec<_> = (0..2)
            .map(|_| bulkhead.try_acquire(Priority::Default).unwrap())
            .collect();
        let started = tokio::time::Instant::now();
        let waiters: Vec<_> = (0..12)
            .map(|i| {
                let priority = if i % 2 == 0 {
                    Priority::Default
                } else {
                    Priority::Critical
                };
                (priority, waiter(&bulkhead, priority, started, 10 * MS))
            })
            .collect();
        tokio::time::sleep(5 * MS).await;
        drop(held);
        let mut admitted = Vec::new();
        for (priority, waiter) in waiters {
            let (outcome, at) = waiter.await.unwrap();
            assert_eq!(outcome, Ok(()), "{priority:?} at {at:?}");
            admitted.push((at, priority));
        }
        admitted.sort();
        let order: Vec<_> = admitted.iter().map(|(_, p)| *p).collect();
        assert_eq!(
            order,
            [[Priority::Critical; 6], [Priority::Default; 6]].concat(),
            "{admitted:?}"
        );
        let times: Vec<_> = admitted.iter().map(|(at, _)| *at).collect();
        let expected: Vec<_> = (0..6u32)
            .flat_map(|turn| [MS * (5 + 10 * turn); 2])
            .collect();
        assert_eq!(times, expected);
        assert_eq!(bulkhead.in_flight(), 0);
        assert_eq!(bulkhead.state.load(Ordering::SeqCst), 0);
        assert_eq!(bulkhead.waiting.load(Ordering::SeqCst), 0);
    }

    /// The bulkhead's promise, "default calls then get the slots in the
    /// order they came", as tokio's `Semaphore` (fair: permits go to
    /// waiters first in, first out) and resilience4j's fair bulkhead keep
    /// it: a call that arrives just after a release, or keeps asking,
    /// does not take the slot that a waiting call was woken for.
    #[tokio::test(start_paused = true)]
    async fn waiting_calls_get_the_slots_in_the_order_they_came() {
        let bulkhead = Arc::new(
            Bulkhead::new("inventory", 1)
                .unwrap()
                .with_max_wait(MS * 1000),
        );
        let held = bulkhead.try_acquire(Priority::Default).unwrap();
        let started = tokio::time::Instant::now();
        let mut waiters = Vec::new();
        for _ in 0..3 {
            waiters.push(waiter(&bulkhead, Priority::Default, started, 10 * MS));
            tokio::time::sleep(MS).await;
        }
        // A caller that asks every millisecond, from before the first
        // release to after the last waiter is served.
        let barging = {
            let bulkhead = bulkhead.clone();
            tokio::spawn(async move {
                let mut first = None;
                while started.elapsed() < 60 * MS {
                    if let Ok(_permit) = bulkhead.try_acquire(Priority::Default) {
                        first.get_or_insert(started.elapsed());
                        tokio::time::sleep(MS).await;
                    }
                    tokio::time::sleep(MS).await;
                }
                first
            })
        };
        tokio::time::sleep(2 * MS).await;
        // The caller that freed the slot asks again at once.
        drop(held);
        assert!(bulkhead.try_acquire(Priority::Default).is_err());
        let mut admitted = Vec::new();
        for waiter in waiters {
            let (outcome, at) = waiter.await.unwrap();
            assert_eq!(outcome, Ok(()));
            admitted.push(at);
        }
        assert_eq!(
            admitted,
            [5 * MS, 15 * MS, 25 * MS],
            "in the order they came"
        );
        let first = barging.await.unwrap().expect("a slot once nobody waits");
        assert!(
            first >= 35 * MS,
            "the caller that kept asking got a slot at {first:?}"
        );
    }

    /// Never more than `max` in flight, whatever the interleaving: 8
    /// threads hammering a bulkhead of 3.
    #[test]
    fn never_more_than_max_in_flight() {
        let bulkhead = Arc::new(Bulkhead::new("inventory", 3).unwrap());
        let inside = Arc::new(AtomicU32::new(0));
        let peak = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (bulkhead, inside, peak) = (bulkhead.clone(), inside.clone(), peak.clone());
                std::thread::spawn(move || {
                    let mut admitted = 0;
                    for _ in 0..20_000 {
                        if let Ok(_permit) = bulkhead.try_acquire(Priority::Critical) {
                            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(now, Ordering::SeqCst);
                            inside.fetch_sub(1, Ordering::SeqCst);
                            admitted += 1;
                        }
                    }
                    admitted
                })
            })
            .collect();
        let admitted: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(peak.load(Ordering::SeqCst) <= 3);
        assert!(admitted > 0);
        assert_eq!(bulkhead.in_flight(), 0);
    }
}
