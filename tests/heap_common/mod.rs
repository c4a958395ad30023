//! A counting allocator for the tests that bound the heap: each test
//! binary that includes this module counts what its threads allocate.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Heap allocated and not freed by the current thread, so that the other
/// tests of this binary, on their own threads, do not count.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn count(bytes: isize) {
    // `try_with`: after the thread's locals are gone, nothing to count.
    let _ = LIVE.try_with(|live| live.set(live.get() + bytes));
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

pub fn live_heap() -> isize {
    LIVE.with(Cell::get)
}
