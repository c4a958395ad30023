//! The success path allocates nothing: no box, no timer, no random seed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use resilience_runtime::retry::Policy;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Only the test's own thread counts: the harness allocates on its
    // main thread meanwhile, more often on a loaded machine.
    static COUNTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTED.with(std::cell::Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

async fn succeed(n: u64) -> Result<u64, std::io::Error> {
    Ok(n + 1)
}

#[test]
fn a_first_attempt_that_succeeds_allocates_nothing() {
    let policy = Policy::http();
    let mut cx = Context::from_waker(Waker::noop());
    // Warm up lazily initialised thread-locals (the deadline's task-local).
    let warm = pin!(policy.retry(|| succeed(1)));
    assert!(matches!(warm.poll(&mut cx), Poll::Ready(Ok(2))));

    COUNTED.with(|counted| counted.set(true));
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for n in 0..1000 {
        let chain = pin!(policy.retry(|| succeed(n)));
        match chain.poll(&mut cx) {
            Poll::Ready(Ok(value)) => assert_eq!(value, n + 1),
            other => panic!("expected an immediate success, got {other:?}"),
        }
    }
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed) - before, 0);
}
