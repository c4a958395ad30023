//! One admission of a rate limit shared by a fleet through Redis
//! (`FleetRateLimit`), holding a lease, beside a local `RateLimit`'s in
//! the same run; and the same admission from 2 and 4 threads at once on
//! one limit, since a replica admits under one lock.
//!
//! `cargo bench --features limit-redis --bench fleet_rate -- --warm-up-time 1 --measurement-time 3`
//!
//! The fleet rows need the Redis at 127.0.0.1:6379, reached only by the
//! lease task in the background (setup waits for the first lease); they
//! are skipped, saying so, when it does not answer. No call on the
//! measured path reaches Redis.
//!
//! A fleet limit admits at most its rate, and a lease at most its pace
//! (a quarter of it at once): a loop admitting as fast as it can would
//! soon time refusals instead. So calls are timed in chunks of
//! `CHUNK` per thread, with a pause between chunks (not timed) in which
//! the lease's pace makes room again; the calls refused all the same
//! (at the lease's pace, or between two leases) are counted and printed
//! per row, so that a row is known to be admissions but for that share.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use resilience::limit::{FleetRateLimit, Priority, Rate, RateLimit};

const URL: &str = "redis://127.0.0.1:6379/";
/// Calls timed back to back, then a pause.
const CHUNK: u64 = 2_000;
/// The pause after a chunk, per thread admitting: a chunk of 2,000 at a
/// lease's pace of at least 100 ns a call takes 0.2 ms.
const PAUSE: Duration = Duration::from_micros(400);

/// The limit, once it holds a lease; `None` when Redis does not answer
/// within 3 s.
fn leased(runtime: &tokio::runtime::Runtime) -> Option<FleetRateLimit> {
    let name = Box::leak(format!("bench-fleet-{}", std::process::id()).into_boxed_str());
    // The fastest fleet limit: a burst of 10⁶ (the largest) spanning the
    // shortest lease span, 100 ms.
    let limit = FleetRateLimit::new(name, Rate::new(1_000_000, Duration::from_millis(100)), URL)
        .expect("valid");
    let start = Instant::now();
    runtime.block_on(async {
        while !(limit.is_leasing() && limit.last_lease() > 0) {
            if start.elapsed() > Duration::from_secs(3) {
                return None;
            }
            // Offered calls give the lease task a demand to size by.
            for _ in 0..1000 {
                let _ = limit.try_acquire(Priority::Default);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Some(())
    })?;
    Some(limit)
}

/// Times `iters` admissions on each of `threads` threads, in chunks with a
/// pause between them; the slowest thread's sum of its chunks.
fn admit(limit: &FleetRateLimit, threads: u64, iters: u64, refused: &AtomicU64) -> Duration {
    let run = || {
        let mut spent = Duration::ZERO;
        let mut left = iters;
        while left > 0 {
            let n = left.min(CHUNK);
            let mut missed = 0u64;
            let start = Instant::now();
            for _ in 0..n {
                missed +=
                    u64::from(black_box(limit.try_acquire(black_box(Priority::Default))).is_err());
            }
            spent += start.elapsed();
            if missed > 0 {
                refused.fetch_add(missed, Relaxed);
            }
            left -= n;
            std::thread::sleep(PAUSE * threads as u32);
        }
        spent
    };
    if threads == 1 {
        return run();
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads).map(|_| scope.spawn(run)).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .max()
            .unwrap_or_default()
    })
}

fn fleet(c: &mut Criterion) {
    // The lease task runs on this runtime's worker; the measured calls
    // are made outside it, as a request handler's thread would.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let local = RateLimit::new("bench", Rate::per_second(1_000_000_000)).expect("valid");

    let mut group = c.benchmark_group("fleet_rate");
    group.bench_function("RateLimit: try_acquire, admitted", |b| {
        b.iter(|| black_box(local.try_acquire(black_box(Priority::Default))))
    });
    let Some(limit) = leased(&runtime) else {
        println!(
            "fleet_rate: skipping the FleetRateLimit rows: no lease from the Redis at {URL} within 3 s (is it running?)"
        );
        group.finish();
        return;
    };
    for threads in [1u64, 2, 4] {
        let row = if threads == 1 {
            "FleetRateLimit: try_acquire, admitted from a lease".to_owned()
        } else {
            format!("FleetRateLimit: try_acquire, admitted from a lease, {threads} threads at once")
        };
        let refused = AtomicU64::new(0);
        let mut calls = 0u64;
        group.bench_function(&row, |b| {
            b.iter_custom(|iters| {
                calls += iters * threads;
                admit(&limit, threads, iters, &refused)
            })
        });
        println!(
            "fleet_rate: {row}: {} of {calls} timed calls refused (at the lease's pace, or between two leases)",
            refused.load(Relaxed)
        );
    }
    group.finish();
    println!(
        "fleet_rate: {} Redis round trips in all, none on the calls' path",
        limit.round_trips(),
    );
}

criterion_group!(benches, fleet);
criterion_main!(benches);
