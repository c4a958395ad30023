//! The sliding window: striped cumulative counters plus a ring of bucket
//! bases.
//!
//! A call adds to the counters of its thread's stripe, a cache line of its
//! own, so threads do not fight over one line. Nothing is ever reset on the
//! hot path: at each bucket boundary the window records the sums of all
//! stripes as the base of the new bucket, and the counts of the window are
//! "sums now − base of the oldest bucket still in the window". A failure
//! thus leaves the window one bucket (a tenth of it) at a time.

use std::cell::Cell;

use super::config::BUCKETS;
use super::sync::{AtomicBool, AtomicU64, Ordering::*};

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
pub(crate) struct Stripe {
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
    stripes: Box<[Stripe]>,
    bases: [Base; BUCKETS],
    /// The current bucket: time since the breaker's origin, or calls, divided
    /// by the bucket width.
    epoch: AtomicU64,
    rotating: AtomicBool,
}

// Each thread starts on its own stripe (round robin) and moves on when it
// finds its stripe contended, as `LongAdder` does.
static NEXT_THREAD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
thread_local! {
    static PROBE: Cell<usize> = const { Cell::new(usize::MAX) };
}

#[inline]
fn probe() -> usize {
    PROBE.with(|p| {
        let v = p.get();
        if v != usize::MAX {
            v
        } else {
            let v =
                NEXT_THREAD.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & (usize::MAX >> 1);
            p.set(v);
            v
        }
    })
}

#[cold]
fn rehash() -> usize {
    PROBE.with(|p| {
        // xorshift: a contended thread jumps to a pseudo-random stripe.
        let mut v = p.get() | 1;
        v ^= v << 13;
        v ^= v >> 7;
        v ^= v << 17;
        let v = v & (usize::MAX >> 1);
        p.set(v);
        v
    })
}

impl SlidingWindow {
    pub(crate) fn new(stripes: usize) -> SlidingWindow {
        let stripes = stripes.next_power_of_two();
        SlidingWindow {
            stripes: (0..stripes)
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

    /// The number of stripes for this machine: one per core, 2 to 4.
    ///
    /// Four is the cap that keeps a breaker within 1 KiB on any machine
    /// (each stripe is a cache line); beyond four cores, threads that
    /// collide on a stripe move to another one (see `rehash`), and a
    /// breaker guards network calls, so four lines absorb the contention.
    pub(crate) fn default_stripes() -> usize {
        // Asking the OS reads cgroup files: once per process is enough.
        static STRIPES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *STRIPES.get_or_init(|| {
            std::thread::available_parallelism()
                .map_or(4, |n| n.get())
                .clamp(2, 4)
                .next_power_of_two()
        })
    }

    #[inline]
    fn stripe(&self) -> &Stripe {
        &self.stripes[probe() & (self.stripes.len() - 1)]
    }

    /// Counts one successful call: one uncontended read-modify-write.
    #[inline]
    pub(crate) fn add_success(&self) {
        let stripe = self.stripe();
        let calls = stripe.calls.load(Relaxed);
        if stripe
            .calls
            .compare_exchange_weak(calls, calls + 1, Relaxed, Relaxed)
            .is_err()
        {
            self.add_success_contended();
        }
    }

    #[cold]
    fn add_success_contended(&self) {
        let stripe = &self.stripes[rehash() & (self.stripes.len() - 1)];
        stripe.calls.fetch_add(1, Relaxed);
    }

    /// Counts a call that failed, was slow, or both.
    pub(crate) fn add(&self, failed: bool, slow: bool) {
        let stripe = self.stripe();
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
    /// every bucket it enters (`base_calls(k)` overrides the calls of bucket
    /// `k`'s base, for count windows, where the bucket starts at a known
    /// call number). Another thread already rotating wins; this one skips.
    pub(crate) fn rotate(&self, epoch: u64, totals: Counts, base_calls: impl Fn(u64) -> u64) {
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
                base.calls.store(base_calls(k).min(totals.calls), Relaxed);
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn failures_leave_the_window_one_bucket_at_a_time() {
        let w = SlidingWindow::new(2);
        w.add(true, false); // bucket 0
        w.rotate(1, w.totals(), |_| u64::MAX);
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
        w.rotate(10, w.totals(), |_| u64::MAX);
        assert_eq!(w.counts(w.totals()).failures, 1);
        w.rotate(11, w.totals(), |_| u64::MAX);
        assert_eq!(w.counts(w.totals()), Counts::default());
        w.add(false, true);
        assert_eq!(w.counts(w.totals()).slow, 1);
        // A long jump forgets everything.
        w.rotate(500, w.totals(), |_| u64::MAX);
        assert_eq!(w.counts(w.totals()), Counts::default());
        w.add_success();
        w.clear();
        assert_eq!(w.counts(w.totals()), Counts::default());
    }
}
