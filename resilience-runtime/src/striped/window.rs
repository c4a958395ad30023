//! The sliding window: striped cumulative counters plus a ring of bucket
//! bases.
//!
//! A call adds to the counters of its thread's stripe, a cache line that
//! no other thread writes (see [`owner`](super::owner)): counting is a
//! plain load and store, and threads do not fight over a line. Nothing is
//! ever reset on the hot path: at each bucket boundary the window records
//! the sums of all stripes as the base of the new bucket, and the counts
//! of the window are "sums now − base of the oldest bucket still in the
//! window". A failure
//! thus leaves the window one bucket (a tenth of it) at a time.

use super::BUCKETS;
use super::owner::{self, OWNED};

/// The owned stripes of a window with one per owning thread.
pub(crate) const OWNED_STRIPES: usize = OWNED;
use super::sync::{AtomicBool, AtomicU64, Ordering::*};
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Counts of the calls in a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) calls: u64,
    pub(crate) failures: u64,
    pub(crate) slow: u64,
}

// One cache line each. (128 bytes would also keep x86's pair prefetcher
// from pulling a neighbour's line; it doubles the breaker's memory for a
// gain this machine could not measure, so 64 it is.)
#[repr(align(64))]
#[derive(Debug)]
struct Stripe {
    calls: AtomicU64,
    failures: AtomicU64,
    slow: AtomicU64,
}

#[derive(Debug)]
struct Base {
    calls: AtomicU64,
    failures: AtomicU64,
    slow: AtomicU64,
}

#[derive(Debug)]
pub(crate) struct SlidingWindow {
    /// One stripe per owning thread, then the one the others share.
    stripes: Box<[Stripe]>,
    bases: [Base; BUCKETS],
    /// The current bucket: time since the breaker's origin, or calls, divided
    /// by the bucket width.
    epoch: AtomicU64,
    rotating: AtomicBool,
}

/// One more call on a counter only this thread writes: a plain load and
/// store, where `fetch_add` would be a locked instruction.
#[inline(always)]
fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Relaxed).wrapping_add(1), Relaxed);
}

impl SlidingWindow {
    /// A window with `owned` stripes for the threads that own one (see
    /// [`owner`](super::owner)), and one more for the others.
    pub(crate) fn new(owned: usize) -> SlidingWindow {
        SlidingWindow {
            stripes: (0..=owned.clamp(1, OWNED))
                .map(|_| Stripe {
                    calls: AtomicU64::new(0),
                    failures: AtomicU64::new(0),
                    slow: AtomicU64::new(0),
                })
                .collect(),
            bases: std::array::from_fn(|_| Base {
                calls: AtomicU64::new(0),
                failures: AtomicU64::new(0),
                slow: AtomicU64::new(0),
            }),
            epoch: AtomicU64::new(0),
            rotating: AtomicBool::new(false),
        }
    }

    /// The stripe owned by the thread in `slot`, if this window has it.
    #[inline(always)]
    fn owned(&self, slot: usize) -> Option<&Stripe> {
        let owned = self.stripes.len() - 1;
        self.stripes[..owned].get(slot)
    }

    /// Counts one successful call.
    #[inline]
    pub(crate) fn add_success(&self) {
        self.add_success_at(owner::slot());
    }

    /// [`add_success`](Self::add_success) for the thread in `slot`.
    #[inline(always)]
    pub(crate) fn add_success_at(&self, slot: usize) {
        match self.owned(slot) {
            Some(stripe) => bump(&stripe.calls),
            None => self.add_unowned(false, false),
        }
    }

    /// Counts a call that failed, was slow, or both.
    pub(crate) fn add(&self, failed: bool, slow: bool) {
        self.add_at(owner::slot(), failed, slow);
    }

    /// [`add`](Self::add) for the thread in `slot`.
    pub(crate) fn add_at(&self, slot: usize, failed: bool, slow: bool) {
        match self.owned(slot) {
            Some(stripe) => {
                bump(&stripe.calls);
                if failed {
                    bump(&stripe.failures);
                }
                if slow {
                    bump(&stripe.slow);
                }
            }
            None => self.add_unowned(failed, slow),
        }
    }

    /// A thread without a stripe of its own: it claims one if it can,
    /// otherwise counts on the shared stripe, atomically.
    #[cold]
    fn add_unowned(&self, failed: bool, slow: bool) {
        if let Some(slot) = owner::claim().filter(|&slot| self.owned(slot).is_some()) {
            return self.add_at(slot, failed, slow);
        }
        let Some(stripe) = self.stripes.last() else {
            return;
        };
        stripe.calls.fetch_add(1, Relaxed);
        if failed {
            stripe.failures.fetch_add(1, Relaxed);
        }
        if slow {
            stripe.slow.fetch_add(1, Relaxed);
        }
    }

    /// The sums of all stripes since the breaker was created.
    pub(crate) fn totals(&self) -> Counts {
        let mut c = Counts::default();
        for s in self.stripes.iter() {
            c.calls = c.calls.wrapping_add(s.calls.load(Relaxed));
            c.failures = c.failures.wrapping_add(s.failures.load(Relaxed));
            c.slow = c.slow.wrapping_add(s.slow.load(Relaxed));
        }
        c
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Acquire)
    }

    /// The counts of the window, given the totals now.
    pub(crate) fn counts(&self, totals: Counts) -> Counts {
        let base = &self.bases[(self.epoch() as usize + 1) % BUCKETS];
        Counts {
            calls: totals.calls.wrapping_sub(base.calls.load(Relaxed)),
            failures: totals.failures.wrapping_sub(base.failures.load(Relaxed)),
            slow: totals.slow.wrapping_sub(base.slow.load(Relaxed)),
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
                let base = &self.bases[k as usize % BUCKETS];
                base.calls.store(totals.calls, Relaxed);
                base.failures.store(totals.failures, Relaxed);
                base.slow.store(totals.slow, Relaxed);
            }
            self.epoch.store(epoch, Release);
        }
        self.rotating.store(false, Release);
    }

    /// Empties the window: every base becomes the totals now.
    pub(crate) fn clear(&self) {
        let totals = self.totals();
        for base in &self.bases {
            base.calls.store(totals.calls, Relaxed);
            base.failures.store(totals.failures, Relaxed);
            base.slow.store(totals.slow, Relaxed);
        }
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
        let w = SlidingWindow::new(owner::OWNED);
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

    /// More threads than owned stripes, some of them short-lived, count
    /// while the window rotates: owners write with plain stores, so two
    /// threads on one owned stripe would lose counts here.
    #[test]
    fn threads_with_and_without_a_stripe_lose_no_count() {
        let w = std::sync::Arc::new(SlidingWindow::new(owner::OWNED));
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
