//! The hot path of the load limiters: acquire + release
//! uncontended, beside the breaker's closed path in the same run (the
//! target: within 2× of it), and what the adaptive limit's latency sample
//! costs (two clock reads), and the floor of any exact count of calls in
//! flight (two shared read-modify-writes). Counts allocations per call.
//!
//! `cargo bench --bench limit -- --warm-up-time 1 --measurement-time 3`

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};

use common::poll_once;
use criterion::{Criterion, criterion_group, criterion_main};
use resilience::breaker::{BreakerConfig, CircuitBreaker};
use resilience::limit::{AdaptiveLimit, Bulkhead, Priority, Throttle, ThrottleConfig, VegasConfig};
use resilience::retry::HttpStatus;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

async fn get_user(id: u32) -> Result<u32, HttpStatus> {
    Ok(id)
}

fn allocations_per_call(mut call: impl FnMut()) -> f64 {
    call();
    let before = ALLOCATIONS.load(Relaxed);
    for _ in 0..10_000 {
        call();
    }
    (ALLOCATIONS.load(Relaxed) - before) as f64 / 10_000.0
}

fn limit(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = runtime.enter();
    let breaker = CircuitBreaker::new("bench", BreakerConfig::new()).unwrap();
    let bulkhead = Bulkhead::new("bench", 64).unwrap();
    let adaptive = AdaptiveLimit::new("bench", VegasConfig::new()).unwrap();
    let throttle = Throttle::new("bench", ThrottleConfig::new()).unwrap();

    let mut breaker_call = || match breaker.try_acquire() {
        Ok(permit) => {
            let out = poll_once(get_user(black_box(7)));
            permit.record(&out);
            out.is_ok()
        }
        Err(_) => false,
    };
    let mut bulkhead_call = || match bulkhead.try_acquire(black_box(Priority::Default)) {
        Ok(_slot) => poll_once(get_user(black_box(7))).is_ok(),
        Err(_) => false,
    };
    let mut adaptive_call = || match adaptive.try_acquire(black_box(Priority::Default)) {
        Ok(permit) => {
            let out = poll_once(get_user(black_box(7)));
            permit.record(&out);
            out.is_ok()
        }
        Err(_) => false,
    };
    let mut throttle_call = || match throttle.try_acquire(black_box(Priority::Default)) {
        Ok(ticket) => {
            let out = poll_once(get_user(black_box(7)));
            ticket.record(&out);
            out.is_ok()
        }
        Err(_) => false,
    };

    let mut group = c.benchmark_group("limit");
    group.bench_function("baseline: the call alone", |b| {
        b.iter(|| poll_once(get_user(black_box(7))).is_ok())
    });
    group.bench_function("breaker closed: try_acquire + success", |b| {
        b.iter(&mut breaker_call)
    });
    group.bench_function("bulkhead: try_acquire + release", |b| {
        b.iter(&mut bulkhead_call)
    });
    // The floor of an exact count of calls in flight: one shared
    // read-modify-write in, one out, and nothing else.
    let count = AtomicU64::new(0);
    group.bench_function("floor: compare_exchange + fetch_sub", |b| {
        b.iter(|| {
            let before = count.load(SeqCst);
            let admitted = count
                .compare_exchange(before, before + 1, SeqCst, SeqCst)
                .is_ok();
            count.fetch_sub(u64::from(admitted), SeqCst);
            admitted
        })
    });
    group.bench_function("adaptive: try_acquire + record (sample)", |b| {
        b.iter(&mut adaptive_call)
    });
    group.bench_function("throttle: try_acquire + record", |b| {
        b.iter(&mut throttle_call)
    });
    group.bench_function("clock: tokio::time::Instant::now", |b| {
        b.iter(tokio::time::Instant::now)
    });
    group.finish();

    println!(
        "allocations per call: breaker {}, bulkhead {}, adaptive {}, throttle {}",
        allocations_per_call(|| {
            breaker_call();
        }),
        allocations_per_call(|| {
            bulkhead_call();
        }),
        allocations_per_call(|| {
            adaptive_call();
        }),
        allocations_per_call(|| {
            throttle_call();
        }),
    );
}

criterion_group!(benches, limit);
criterion_main!(benches);
