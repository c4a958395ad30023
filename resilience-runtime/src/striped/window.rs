//! The sliding window: cumulative counters plus a ring of bucket bases.
//!
//! Nothing is ever reset on the hot path: at each bucket boundary the window
//! records the sums of its counters as the base of the new bucket, and the
//! counts of the window are "sums now − base of the oldest bucket still in
//! the window". A failure thus leaves the window one bucket (a tenth of it)
//! at a time.
//!
//! A call adds to counters that no other thread writes (see
//! [`owner`](super::owner)): counting is a plain load and store, and threads
//! do not fight over a cache line. Memory comes only when it is needed:
//!
//! - the first thread with a slot to count (its slot becomes the window's
//!   `home`) counts its calls on a counter inside the window itself, for
//!   as long as it holds the slot;
//! - when any other thread counts, the window allocates a stripe of a cache
//!   line per owning thread and one the others share (320 bytes), and the
//!   others count on those;
//! - failures and slow calls come with what they need (176 bytes: the
//!   first thread's counts of them, and their bases), allocated at the
//!   first one; until then they are all zero.
//!
//! So a breaker called from one thread that has not yet failed keeps its
//! window in 120 bytes, where it took 592 with its stripes when they were
//! allocated up front; a breaker called from many threads gets the same
//! stripes as ever, and counts as fast.

use super::BUCKETS;
use super::owner::{self, OWNED};
use super::sync::{AtomicBool, AtomicU8, AtomicU64, OnceBox, Ordering::*};
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// No thread has counted on the window yet: not a slot (below [`OWNED`]),
/// and as a `usize` neither [`owner::NONE`] nor a retired thread's mark.
const HOMELESS: u8 = u8::MAX;
const _: () = assert!(OWNED < HOMELESS as usize);

/// Counts of the calls in a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) calls: u64,
    pub(crate) failures: u64,
    pub(crate) slow: u64,
}

impl Counts {
    fn plus(self, other: Counts) -> Counts {
        Counts {
            calls: self.calls.wrapping_add(other.calls),
            failures: self.failures.wrapping_add(other.failures),
            slow: self.slow.wrapping_add(other.slow),
        }
    }
}

/// Cumulative counts of calls, failures and slow calls.
#[derive(Debug)]
struct Counters {
    calls: AtomicU64,
    failures: AtomicU64,
    slow: AtomicU64,
}

/// One more call on a counter only this thread writes: a plain load and
/// store, where `fetch_add` would be a locked instruction.
#[inline(always)]
fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Relaxed).wrapping_add(1), Relaxed);
}

impl Counters {
    fn new() -> Counters {
        Counters {
            calls: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            slow: AtomicU64::new(0),
        }
    }

    /// Counts a call on counters only this thread writes.
    #[inline(always)]
    fn count(&self, failed: bool, slow: bool) {
        bump(&self.calls);
        if failed {
            bump(&self.failures);
        }
        if slow {
            bump(&self.slow);
        }
    }

    /// Counts a call on counters other threads write too.
    fn count_shared(&self, failed: bool, slow: bool) {
        self.calls.fetch_add(1, Relaxed);
        if failed {
            self.failures.fetch_add(1, Relaxed);
        }
        if slow {
            self.slow.fetch_add(1, Relaxed);
        }
    }

    fn load(&self) -> Counts {
        Counts {
            calls: self.calls.load(Relaxed),
            failures: self.failures.load(Relaxed),
            slow: self.slow.load(Relaxed),
        }
    }
}

// One cache line each. (128 bytes would also keep x86's pair prefetcher
// from pulling a neighbour's line; it doubles the stripes' memory for a
// gain this machine could not measure, so 64 it is.)
#[repr(align(64))]
#[derive(Debug)]
struct Stripe(Counters);

/// The counters of a window that more than one thread counts on.
#[derive(Debug)]
struct Stripes {
    /// One per owning thread.
    owned: [Stripe; OWNED],
    /// The threads without a slot of their own, atomically.
    shared: Stripe,
}

impl Stripes {
    fn new() -> Stripes {
        Stripes {
            owned: std::array::from_fn(|_| Stripe(Counters::new())),
            shared: Stripe(Counters::new()),
        }
    }
}

/// What a window needs once it sees a failure or a slow call: the first
/// thread's counts of them, and their bases, one per bucket.
#[derive(Debug)]
struct Rest {
    /// Written by the thread in the window's home slot alone.
    first_failures: AtomicU64,
    first_slow: AtomicU64,
    failures: [AtomicU64; BUCKETS],
    slow: [AtomicU64; BUCKETS],
}

impl Rest {
    fn new() -> Rest {
        Rest {
            first_failures: AtomicU64::new(0),
            first_slow: AtomicU64::new(0),
            failures: std::array::from_fn(|_| AtomicU64::new(0)),
            slow: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// In declaration order (`repr(C)`): what every call reads first, the
/// bases touched at bucket boundaries, then the one counter the home thread
/// writes on every call, last, so that it shares its cache line with the
/// bases and not with what other threads read per call (the home byte,
/// the stripes' pointer, the breaker's state word before the window).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct SlidingWindow {
    /// The slot of the first thread that counted, or [`HOMELESS`].
    home: AtomicU8,
    /// The slots below this one have a stripe: fewer than [`OWNED`] only
    /// in the model checks, which need few threads to reach the shared
    /// stripe. Elsewhere a slot is compared with the constant.
    #[cfg(loom)]
    owned: u8,
    rotating: AtomicBool,
    /// Allocated when a thread other than `home`'s counts.
    stripes: OnceBox<Stripes>,
    /// The first thread's failures and slow calls and the bases of all;
    /// absent while all are zero.
    rest: OnceBox<Rest>,
    /// The current bucket: time since the breaker's origin, or calls, divided
    /// by the bucket width.
    epoch: AtomicU64,
    /// The base of calls of each bucket.
    calls: [AtomicU64; BUCKETS],
    /// The calls of the thread in slot `home` (its failures and slow calls
    /// are in `rest`).
    first: AtomicU64,
}

impl SlidingWindow {
    /// A window with a stripe for each thread that owns one (see
    /// [`owner`](super::owner)) once more than one thread counts, and one
    /// more for the others.
    pub(crate) fn new() -> SlidingWindow {
        SlidingWindow {
            first: AtomicU64::new(0),
            home: AtomicU8::new(HOMELESS),
            stripes: OnceBox::new(),
            #[cfg(loom)]
            owned: OWNED as u8,
            calls: std::array::from_fn(|_| AtomicU64::new(0)),
            rest: OnceBox::new(),
            epoch: AtomicU64::new(0),
            rotating: AtomicBool::new(false),
        }
    }

    /// A window whose slots from `owned` up count on the shared stripe.
    #[cfg(loom)]
    pub(crate) fn with_owned(owned: usize) -> SlidingWindow {
        SlidingWindow {
            owned: owned.clamp(1, OWNED) as u8,
            ..SlidingWindow::new()
        }
    }

    #[inline(always)]
    fn owned(&self) -> usize {
        #[cfg(loom)]
        return usize::from(self.owned);
        #[cfg(not(loom))]
        OWNED
    }

    /// Whether the thread in `slot` counts on the window's first counter.
    #[inline(always)]
    fn is_home(&self, slot: usize) -> bool {
        usize::from(self.home.load(Relaxed)) == slot
    }

    /// The stripe the thread in `slot` writes alone, if it has one.
    #[inline(always)]
    fn stripe<'a>(&self, stripes: &'a Stripes, slot: usize) -> Option<&'a Counters> {
        match slot < self.owned() {
            true => stripes.owned.get(slot).map(|s| &s.0),
            false => None,
        }
    }

    /// Counts one successful call.
    #[inline]
    pub(crate) fn add_success(&self) {
        self.add_success_at(owner::slot());
    }

    /// [`add_success`](Self::add_success) for the thread in `slot`.
    #[inline(always)]
    pub(crate) fn add_success_at(&self, slot: usize) {
        if self.is_home(slot) {
            return bump(&self.first);
        }
        self.add_success_striped(slot);
    }

    /// [`add_striped`](Self::add_striped) of a success: the path of every
    /// thread but the home one, out of line for the same reason, as short
    /// as it can be.
    #[inline(never)]
    fn add_success_striped(&self, slot: usize) {
        match self
            .stripes
            .get()
            .and_then(|stripes| self.stripe(stripes, slot))
        {
            Some(stripe) => bump(&stripe.calls),
            None => self.add_unowned(slot, false, false),
        }
    }

    /// Counts a call that failed, was slow, or both.
    pub(crate) fn add(&self, failed: bool, slow: bool) {
        self.add_at(owner::slot(), failed, slow);
    }

    /// [`add`](Self::add) for the thread in `slot`.
    pub(crate) fn add_at(&self, slot: usize, failed: bool, slow: bool) {
        if self.is_home(slot) {
            return self.count_first(failed, slow);
        }
        self.add_striped(slot, failed, slow);
    }

    /// A call of a thread other than the home one. Not inlined: reading
    /// `stripes` is an `Acquire` load, and inlined after a call's result is
    /// written it keeps the optimizer from seeing through that result on
    /// every path that joins it (a closed call 3.1 -> 6.0 ns, an open one
    /// 3.5 -> 9.0).
    #[inline(never)]
    fn add_striped(&self, slot: usize, failed: bool, slow: bool) {
        match self
            .stripes
            .get()
            .and_then(|stripes| self.stripe(stripes, slot))
        {
            Some(stripe) => stripe.count(failed, slow),
            None => self.add_unowned(slot, failed, slow),
        }
    }

    /// A call of the home thread, on the window's first counters.
    fn count_first(&self, failed: bool, slow: bool) {
        bump(&self.first);
        if failed || slow {
            let rest = self.rest();
            if failed {
                bump(&rest.first_failures);
            }
            if slow {
                bump(&rest.first_slow);
            }
        }
    }

    fn rest(&self) -> &Rest {
        self.rest.get_or_init(|| Box::new(Rest::new()))
    }

    /// A thread without counters of its own on this window yet: it claims a
    /// slot if it has none, makes its slot the window's home if no thread
    /// with a slot has counted yet, and otherwise counts on the stripes
    /// (allocating them), on its own or, without a slot, on the shared one.
    #[cold]
    fn add_unowned(&self, slot: usize, failed: bool, slow: bool) {
        let owned = self.owned();
        let slot = match slot < owned {
            true => slot,
            false => owner::claim()
                .filter(|&claimed| claimed < owned)
                .unwrap_or(slot),
        };
        if slot < owned {
            // `Relaxed`: only the owner of `slot` writes `first`, and slots
            // change hands with `Acquire`/`Release`.
            let mine = slot as u8;
            match self.home.compare_exchange(HOMELESS, mine, Relaxed, Relaxed) {
                Ok(_) => return self.count_first(failed, slow),
                // Home already: a slot freed by the first thread, claimed
                // just now.
                Err(home) if home == mine => return self.count_first(failed, slow),
                Err(_) => {}
            }
        }
        let stripes = self.stripes.get_or_init(|| Box::new(Stripes::new()));
        match self.stripe(stripes, slot) {
            Some(stripe) => stripe.count(failed, slow),
            None => stripes.shared.0.count_shared(failed, slow),
        }
    }

    /// The sums of all counters since the breaker was created.
    pub(crate) fn totals(&self) -> Counts {
        let (failures, slow) = match self.rest.get() {
            Some(rest) => (
                rest.first_failures.load(Relaxed),
                rest.first_slow.load(Relaxed),
            ),
            None => (0, 0),
        };
        let first = Counts {
            calls: self.first.load(Relaxed),
            failures,
            slow,
        };
        match self.stripes.get() {
            None => first,
            Some(stripes) => stripes
                .owned
                .iter()
                .chain([&stripes.shared])
                .fold(first, |sum, stripe| sum.plus(stripe.0.load())),
        }
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Acquire)
    }

    fn base(&self, bucket: usize) -> Counts {
        let (failures, slow) = match self.rest.get() {
            Some(rest) => (
                rest.failures[bucket].load(Relaxed),
                rest.slow[bucket].load(Relaxed),
            ),
            None => (0, 0),
        };
        Counts {
            calls: self.calls[bucket].load(Relaxed),
            failures,
            slow,
        }
    }

    fn set_base(&self, bucket: usize, totals: Counts) {
        self.calls[bucket].store(totals.calls, Relaxed);
        let rest = match totals.failures != 0 || totals.slow != 0 {
            true => Some(self.rest()),
            false => self.rest.get(),
        };
        if let Some(rest) = rest {
            rest.failures[bucket].store(totals.failures, Relaxed);
            rest.slow[bucket].store(totals.slow, Relaxed);
        }
    }

    /// The counts of the window, given the totals now.
    pub(crate) fn counts(&self, totals: Counts) -> Counts {
        let base = self.base((self.epoch() as usize + 1) % BUCKETS);
        Counts {
            calls: totals.calls.wrapping_sub(base.calls),
            failures: totals.failures.wrapping_sub(base.failures),
            slow: totals.slow.wrapping_sub(base.slow),
        }
    }

    /// Moves the window to bucket `epoch`, recording `totals` as the base of
    /// every bucket it enters. Another thread already rotating wins; this
    /// one skips.
    pub(crate) fn rotate(&self, epoch: u64, totals: Counts) {
        let current = self.epoch.load(Acquire);
        if epoch <= current
            || self
                .rotating
                .compare_exchange(false, true, Acquire, Relaxed)
                .is_err()
        {
            return;
        }
        let current = self.epoch.load(Acquire);
        if epoch > current {
            let first = (current + 1).max(epoch.saturating_sub(BUCKETS as u64 - 1));
            for k in first..=epoch {
                self.set_base(k as usize % BUCKETS, totals);
            }
            self.epoch.store(epoch, Release);
        }
        self.rotating.store(false, Release);
    }

    /// Empties the window: every base becomes the totals now.
    pub(crate) fn clear(&self) {
        let totals = self.totals();
        for bucket in 0..BUCKETS {
            self.set_base(bucket, totals);
        }
    }

    /// The bytes this window has allocated.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn heap(&self) -> usize {
        self.stripes.get().map_or(0, |_| size_of::<Stripes>())
            + self.rest.get().map_or(0, |_| size_of::<Rest>())
    }
}

/// A count window: exactly the last `n` calls.
///
/// Successes are only counted, on the stripes, as in a time window: the
/// closed path stays one plain store. Failures and slow calls, which take
/// the slow path anyway, are logged here by their call number (the sum of
/// the stripes once they are counted), so that the window is "the last `n`
/// call numbers" and a failure leaves it exactly `n` calls later
/// (resilience4j's fixed-size window), not a bucket at a time.
#[derive(Debug)]
pub(crate) struct LastCalls {
    n: u64,
    log: Mutex<Log>,
}

#[derive(Debug, Default)]
struct Log {
    /// The call number at the start of the current state period.
    base: u64,
    failures: VecDeque<u64>,
    slow: VecDeque<u64>,
}

impl Log {
    /// Forgets what left the window: calls `<= first`.
    fn trim(&mut self, first: u64) {
        for log in [&mut self.failures, &mut self.slow] {
            while log.front().is_some_and(|&number| number <= first) {
                log.pop_front();
            }
        }
    }

    fn counts(&mut self, n: u64, calls: u64) -> Counts {
        let first = calls.saturating_sub(n).max(self.base);
        self.trim(first);
        Counts {
            calls: calls.saturating_sub(first),
            failures: self.failures.len() as u64,
            slow: self.slow.len() as u64,
        }
    }
}

impl LastCalls {
    pub(crate) fn new(n: u32) -> LastCalls {
        LastCalls {
            n: u64::from(n),
            log: Mutex::new(Log::default()),
        }
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Logs call number `number` (already counted on the stripes), failed,
    /// slow or both, and returns the counts of the window with it.
    pub(crate) fn record(&self, number: u64, failed: bool, slow: bool) -> Counts {
        let mut log = self.log();
        if number > log.base {
            // Call numbers arrive out of order under concurrency; keep each
            // log sorted so that trimming from the front stays right.
            let insert = |log: &mut VecDeque<u64>| {
                let at = log.partition_point(|&other| other <= number);
                log.insert(at, number);
            };
            if failed {
                insert(&mut log.failures);
            }
            if slow {
                insert(&mut log.slow);
            }
        }
        log.counts(self.n, number)
    }

    /// The counts of the window when `calls` calls were made in all.
    pub(crate) fn counts(&self, calls: u64) -> Counts {
        self.log().counts(self.n, calls)
    }

    /// Empties the window: it starts after call number `calls`.
    pub(crate) fn clear(&self, calls: u64) {
        let mut log = self.log();
        log.base = calls;
        log.failures.clear();
        log.slow.clear();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn failures_leave_the_window_one_bucket_at_a_time() {
        let w = SlidingWindow::new();
        w.add(true, false); // bucket 0
        w.rotate(1, w.totals());
        w.add(true, false); // bucket 1
        w.add_success();
        assert_eq!(
            w.counts(w.totals()),
            Counts {
                calls: 3,
                failures: 2,
                slow: 0
            }
        );
        // Bucket 10: bucket 0 left, bucket 1 still in.
        w.rotate(10, w.totals());
        assert_eq!(w.counts(w.totals()).failures, 1);
        w.rotate(11, w.totals());
        assert_eq!(w.counts(w.totals()), Counts::default());
        w.add(false, true);
        assert_eq!(w.counts(w.totals()).slow, 1);
        // A long jump forgets everything.
        w.rotate(500, w.totals());
        assert_eq!(w.counts(w.totals()), Counts::default());
        w.add_success();
        w.clear();
        assert_eq!(w.counts(w.totals()), Counts::default());
    }

    /// A window counted on by one thread allocates nothing until a call
    /// fails or is slow; a second thread brings the stripes; no count is
    /// lost on the way.
    #[test]
    fn memory_comes_when_a_second_thread_counts_or_a_call_fails() {
        let w = SlidingWindow::new();
        for _ in 0..5 {
            w.add_success_at(0);
        }
        w.rotate(1, w.totals());
        assert_eq!(w.heap(), 0);
        w.add_at(0, false, true);
        assert_eq!(w.heap(), size_of::<Rest>(), "a slow call");

        let w = SlidingWindow::new();
        for _ in 0..5 {
            w.add_success_at(2);
        }
        w.rotate(1, w.totals());
        assert_eq!(w.heap(), 0);
        w.add_at(2, true, false);
        assert_eq!(w.heap(), size_of::<Rest>(), "a failure");
        assert_eq!(
            w.counts(w.totals()),
            Counts {
                calls: 6,
                failures: 1,
                slow: 0
            }
        );

        w.rotate(2, w.totals());
        assert_eq!(w.heap(), size_of::<Rest>());
        w.add_success_at(1);
        assert_eq!(w.heap(), size_of::<Rest>() + size_of::<Stripes>());
        // The first thread keeps its own counter beside the stripes.
        w.add_at(2, true, true);
        assert_eq!(
            w.totals(),
            Counts {
                calls: 8,
                failures: 2,
                slow: 1
            }
        );
        // The bases recorded while the first thread counted alone hold.
        assert_eq!(
            w.counts(w.totals()),
            Counts {
                calls: 8,
                failures: 2,
                slow: 1
            }
        );
        w.rotate(11, w.totals());
        assert_eq!(
            w.counts(w.totals()),
            Counts {
                calls: 2,
                failures: 1,
                slow: 1
            }
        );
    }

    /// Clearing the window after failures records them in the bases: the
    /// window is empty, not "every failure since creation".
    #[test]
    fn a_clear_after_failures_records_their_bases() {
        let w = SlidingWindow::new();
        w.add_at(0, true, false);
        w.add_at(0, true, true);
        w.clear();
        assert_eq!(w.counts(w.totals()), Counts::default());
        w.add_success_at(0);
        assert_eq!(
            w.counts(w.totals()),
            Counts {
                calls: 1,
                failures: 0,
                slow: 0
            }
        );
    }

    /// More threads than owned stripes, some of them short-lived, count
    /// while the window rotates: owners write with plain stores, so two
    /// threads on one owned stripe would lose counts here.
    #[test]
    fn threads_with_and_without_a_stripe_lose_no_count() {
        let w = std::sync::Arc::new(SlidingWindow::new());
        let rotations = {
            let w = w.clone();
            std::thread::spawn(move || {
                for epoch in 1..200 {
                    let before = w.totals();
                    w.rotate(epoch, before);
                    let after = w.totals();
                    assert!(after.calls >= before.calls && after.failures >= before.failures);
                }
            })
        };
        let counters: Vec<_> = (0..3 * owner::OWNED)
            .map(|_| {
                let w = w.clone();
                std::thread::spawn(move || {
                    // Every third thread exits early, handing its stripe on.
                    for round in 0..3 {
                        let w = w.clone();
                        std::thread::spawn(move || {
                            for i in 0..20_000 {
                                w.add_success();
                                if i % 10 == round {
                                    w.add(true, false);
                                }
                            }
                        })
                        .join()
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in counters {
            t.join().unwrap();
        }
        rotations.join().unwrap();
        let threads = 3 * owner::OWNED as u64 * 3;
        assert_eq!(
            w.totals(),
            Counts {
                calls: threads * 22_000,
                failures: threads * 2_000,
                slow: 0
            }
        );
    }
}
