//! Which stripe of every window a thread writes.
//!
//! The first time a thread counts a call, it claims one of [`OWNED`]
//! process-wide slots and keeps it until it exits. Slot `k` is stripe `k` of
//! every breaker's window, and its owner is the only thread that ever writes
//! that stripe, so the owner counts a call with a plain load and store
//! instead of a locked read-modify-write (an uncontended `lock cmpxchg`
//! was 2 of the 3.7 ns a closed breaker added to a call; `BENCHMARKS.md`).
//! Threads without a slot, beyond the first [`OWNED`] alive at once, share
//! one more stripe with atomic read-modify-writes, and try again to claim a
//! slot when they count, so a slot freed by a thread that exits is taken up.
//!
//! The hand-over is what makes the plain writes sound: an exiting owner
//! releases its slot (`Release`) after its last write, and the next owner
//! claims it (`Acquire`) before its first, so it reads every count the
//! previous owner wrote. `loom_tests::a_stripe_changes_owner_without_losing_a_count`
//! checks that model.

use super::sync::{AtomicUsize, Ordering::*};

/// How many threads own a stripe at once: the owned stripes of every
/// window. Four, whatever the number of cores: a service has more threads
/// than cores (the runtime's workers, its main thread, blocking threads),
/// and five stripes of a cache line each (allocated when a second thread
/// counts) keep a breaker within 1 KiB.
pub(crate) const OWNED: usize = 4;

/// A thread with no slot: it writes the shared stripe.
pub(crate) const NONE: usize = usize::MAX;

/// The slots in use, one bit each.
#[derive(Debug)]
pub(crate) struct Slots(AtomicUsize);

impl Slots {
    #[cfg(not(loom))]
    const fn new() -> Slots {
        Slots(AtomicUsize::new(0))
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Slots {
        Slots(AtomicUsize::new(0))
    }

    /// The lowest free slot below `limit` (at most [`OWNED`]), now this
    /// caller's; `None` when all are taken.
    pub(crate) fn claim(&self, limit: usize) -> Option<usize> {
        let all = (1 << limit.min(OWNED)) - 1;
        let mut taken = self.0.load(Relaxed);
        loop {
            let free = !taken & all;
            if free == 0 {
                return None;
            }
            let slot = free.trailing_zeros() as usize;
            // Acquire: the previous owner's writes to the stripe.
            match self
                .0
                .compare_exchange_weak(taken, taken | 1 << slot, Acquire, Relaxed)
            {
                Ok(_) => return Some(slot),
                Err(now) => taken = now,
            }
        }
    }

    /// Gives `slot` back, after its owner's last write.
    pub(crate) fn release(&self, slot: usize) {
        self.0.fetch_and(!(1 << slot), Release);
    }
}

#[cfg(not(loom))]
mod thread {
    use std::cell::Cell;

    use super::{NONE, OWNED, Slots};

    static SLOTS: Slots = Slots::new();

    /// A thread whose slot went back at its exit: it never claims again.
    const RETIRED: usize = usize::MAX - 1;

    // Two thread-locals: the slot itself has no destructor, so reading it is
    // one load and it stays readable while other thread-locals are torn
    // down; the guard, touched only when a slot is claimed, gives the slot
    // back when the thread exits.
    std::thread_local! {
        static SLOT: Cell<usize> = const { Cell::new(NONE) };
        static GUARD: Guard = const { Guard(Cell::new(NONE)) };
    }

    struct Guard(Cell<usize>);

    impl Drop for Guard {
        fn drop(&mut self) {
            let slot = self.0.get();
            SLOT.set(RETIRED);
            if slot < OWNED {
                SLOTS.release(slot);
            }
        }
    }

    /// This thread's slot, or [`NONE`](super::NONE) (or more) without one.
    #[inline(always)]
    pub(crate) fn slot() -> usize {
        SLOT.get()
    }

    /// Claims a slot for this thread if it has none and one is free.
    #[cold]
    pub(crate) fn claim() -> Option<usize> {
        if SLOT.get() != NONE {
            return None;
        }
        // `try_with` fails while this thread's locals are torn down: too
        // late to hold a slot, since nothing would give it back.
        GUARD
            .try_with(|guard| {
                let slot = SLOTS.claim(OWNED)?;
                guard.0.set(slot);
                SLOT.set(slot);
                Some(slot)
            })
            .ok()
            .flatten()
    }
}

// The model checks exercise `Slots` directly, with explicit slots: there
// every thread writes the shared stripe.
#[cfg(loom)]
mod thread {
    pub(crate) fn slot() -> usize {
        super::NONE
    }

    pub(crate) fn claim() -> Option<usize> {
        None
    }
}

pub(crate) use thread::{claim, slot};

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn slots_are_exclusive_and_reused() {
        let slots = Slots::new();
        let claimed: Vec<_> = (0..OWNED).map(|_| slots.claim(OWNED)).collect();
        assert_eq!(claimed, (0..OWNED).map(Some).collect::<Vec<_>>());
        assert_eq!(slots.claim(OWNED), None);
        slots.release(2);
        assert_eq!(slots.claim(2), None);
        assert_eq!(slots.claim(OWNED), Some(2));
        assert_eq!(slots.claim(OWNED), None);
    }
}
