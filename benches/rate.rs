//! One admission of a rate limit, ours beside `governor`'s `check()` in the
//! same run, and what an admission allocates (nothing).
//!
//! `cargo bench --bench rate --features limit-tsc -- --warm-up-time 1 --measurement-time 3`
//!
//! Both limits are far from full (a rate of 10⁹ a second with a burst of
//! as many), so every call is admitted and each row is the admission
//! path: a clock read and one compare-and-swap of the word. governor
//! reads `quanta`'s clock (the TSC); ours reads tokio's `Instant`, so that
//! tokio's paused clock drives it in tests (`std::time::Instant` outside
//! a test build of tokio). With the `limit-tsc` feature, a third row: ours
//! on the CPU's counter (`RateClock::Tsc`), governor's clock. The refusal
//! rows are the other path: a limit at its rate, every call refused and
//! told when to come back.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use resilience::limit::{KeyedRateLimit, Priority, Rate, RateLimit};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
/// Bytes held now (allocated less freed).
static HELD: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        HELD.fetch_add(layout.size(), Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size(), Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_per_call(mut call: impl FnMut()) -> f64 {
    call();
    let before = ALLOCATIONS.load(Relaxed);
    for _ in 0..10_000 {
        call();
    }
    (ALLOCATIONS.load(Relaxed) - before) as f64 / 10_000.0
}

fn rate(c: &mut Criterion) {
    // Outside any runtime: tokio's clock is the system's here, as in a
    // user's build without tokio's `test-util`.
    const FAST: u32 = 1_000_000_000;
    let ours = RateLimit::new("bench", Rate::per_second(FAST)).unwrap();
    let theirs = RateLimiter::direct(Quota::per_second(NonZeroU32::new(FAST).unwrap()));
    let ours_full = RateLimit::new("bench", Rate::per_hour(1)).unwrap();
    ours_full.try_acquire(Priority::Critical).unwrap();
    let theirs_full = RateLimiter::direct(Quota::per_hour(NonZeroU32::new(1).unwrap()));
    theirs_full.check().unwrap();

    println!(
        "allocations per admission: ours {}, governor {}",
        allocations_per_call(|| {
            black_box(ours.try_acquire(Priority::Default)).unwrap();
        }),
        allocations_per_call(|| {
            black_box(theirs.check()).unwrap();
        }),
    );

    let mut group = c.benchmark_group("rate");
    group.bench_function("resilience: try_acquire, admitted", |b| {
        b.iter(|| black_box(ours.try_acquire(black_box(Priority::Default))))
    });
    #[cfg(feature = "limit-tsc")]
    {
        let ours_tsc = RateLimit::new("bench", Rate::per_second(FAST))
            .unwrap()
            .with_clock(resilience::limit::RateClock::Tsc);
        println!(
            "allocations per admission on the counter: {}",
            allocations_per_call(|| {
                black_box(ours_tsc.try_acquire(Priority::Default)).unwrap();
            })
        );
        group.bench_function("resilience: try_acquire on the TSC, admitted", |b| {
            b.iter(|| black_box(ours_tsc.try_acquire(black_box(Priority::Default))))
        });
    }
    group.bench_function("governor: check, admitted", |b| {
        b.iter(|| black_box(theirs.check()))
    });
    group.bench_function("resilience: try_acquire, refused", |b| {
        b.iter(|| black_box(ours_full.try_acquire(black_box(Priority::Default))))
    });
    group.bench_function("governor: check, refused", |b| {
        b.iter(|| black_box(theirs_full.check()))
    });
    group.bench_function("clock: tokio::time::Instant::now", |b| {
        b.iter(tokio::time::Instant::now)
    });
    group.bench_function("clock: std::time::Instant::now", |b| {
        b.iter(std::time::Instant::now)
    });
    group.finish();

    // Keyed: a table of 10⁶ `u64` keys (each admitted once), the
    // admission of a known key, and of a new key at the cap (which
    // forgets an idle one).
    const KEYS: u64 = 1_000_000;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = runtime.enter();
    let before = HELD.load(Relaxed);
    let keyed = KeyedRateLimit::<u64>::new("bench", Rate::per_second(FAST))
        .unwrap()
        .with_max_keys(KEYS as usize)
        .unwrap();
    let filled = std::time::Instant::now();
    for key in 0..KEYS {
        keyed.try_acquire(&key, Priority::Default).unwrap();
    }
    println!(
        "keyed: {} keys in {:?}, {} B of heap per key",
        keyed.len(),
        filled.elapsed(),
        (HELD.load(Relaxed) - before) / KEYS as usize
    );
    let mut group = c.benchmark_group("rate/keyed");
    let mut known = 0u64;
    group.bench_function("try_acquire, a known key of 10^6", |b| {
        b.iter(|| {
            known = (known + 7919) % KEYS;
            black_box(keyed.try_acquire(&known, Priority::Default))
        })
    });
    let mut fresh = KEYS;
    group.bench_function("try_acquire, a new key at the cap of 10^6", |b| {
        b.iter(|| {
            fresh += 1;
            black_box(keyed.try_acquire(&fresh, Priority::Default))
        })
    });
    group.finish();
    black_box(Duration::ZERO);
}

criterion_group!(benches, rate);
criterion_main!(benches);
