//! The cost of a circuit breaker on the closed path, on the open path and
//! under two threads, each against a baseline measured in the same run: the
//! same call plus one `fetch_add` on a shared `AtomicU64` (what the
//! cheapest hand-rolled breaker would pay). Also checks that neither path
//! allocates and reports the memory one breaker takes.
//!
//! `cargo bench --bench breaker -- --warm-up-time 1 --measurement-time 3`

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use resilience::breaker::{
    BreakerConfig, BreakerFamily, CircuitBreaker, FamilyConfig, FamilyKey, MAX_MEMBERS, State,
};
use resilience::registry::Registry;
use resilience::retry::{Classify, HttpStatus, Verdict};

mod common;
use common::poll_once;

/// Counts heap allocations, to check the paths measured here make none.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
/// Bytes allocated and not freed yet.
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        LIVE_BYTES.fetch_add(layout.size(), Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size(), Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Debug)]
enum ClientError {
    Status(u16),
    Resilience(resilience::Error),
}

impl Classify for ClientError {
    fn classify(&self) -> Verdict {
        match self {
            ClientError::Status(code) => HttpStatus(*code).classify(),
            ClientError::Resilience(err) => err.classify(),
        }
    }
}

impl From<resilience::Error> for ClientError {
    fn from(err: resilience::Error) -> Self {
        ClientError::Resilience(err)
    }
}

#[inline(never)]
async fn get_user(id: u64) -> Result<u64, ClientError> {
    Ok(black_box(id) + 1)
}

/// The same call for callers without a runtime: a plain fn.
#[inline(never)]
fn get_user_blocking(id: u64) -> Result<u64, ClientError> {
    Ok(black_box(id) + 1)
}

#[inline(never)]
async fn broken(_: u64) -> Result<u64, ClientError> {
    Err(ClientError::Status(503))
}

static SHARED: AtomicU64 = AtomicU64::new(0);

// Every benchmarked closure returns whether the call succeeded rather than
// the whole `Result`: criterion's `black_box` of a 40-byte error written
// field by field costs a store-forwarding stall that would swamp what is
// measured here (a caller matches on the result, it does not copy it).
#[inline(always)]
fn baseline() -> bool {
    let out = poll_once(get_user(black_box(7)));
    SHARED.fetch_add(1, Relaxed);
    out.is_ok()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .unwrap()
}

fn closed() -> CircuitBreaker {
    CircuitBreaker::new("bench", BreakerConfig::new()).unwrap()
}

fn open() -> CircuitBreaker {
    let breaker = CircuitBreaker::new(
        "bench",
        BreakerConfig::new().with_cooldown(Duration::from_secs(3600)),
    )
    .unwrap();
    for _ in 0..20 {
        let _ = poll_once(breaker.call(broken(1)));
    }
    assert_eq!(breaker.state(), State::Open);
    breaker
}

fn allocations_per_call(f: impl Fn()) -> f64 {
    let before = ALLOCATIONS.load(Relaxed);
    for _ in 0..10_000 {
        f();
    }
    (ALLOCATIONS.load(Relaxed) - before) as f64 / 10_000.0
}

fn single_thread(c: &mut Criterion) {
    let rt = runtime();
    let _guard = rt.enter();
    let closed = closed();
    let open = open();
    // The first call starts the ticker; from then on no clock is read.
    let _ = poll_once(closed.call(get_user(1)));
    let _ = poll_once(open.call(get_user(1)));

    let mut group = c.benchmark_group("breaker");
    group.bench_function("baseline: call + shared fetch_add", |b| b.iter(baseline));
    group.bench_function("closed: call", |b| {
        b.iter(|| poll_once(closed.call(get_user(black_box(7)))).is_ok())
    });
    group.bench_function("closed: try_acquire + success", |b| {
        b.iter(|| match closed.try_acquire() {
            Ok(permit) => {
                let out = poll_once(get_user(black_box(7)));
                permit.record(&out);
                out.is_ok()
            }
            Err(_) => false,
        })
    });
    group.bench_function("open: rejection", |b| {
        b.iter(|| poll_once(open.call(get_user(black_box(7)))).is_ok())
    });
    group.finish();

    println!(
        "allocations per call: baseline {}, closed {}, open {}",
        allocations_per_call(|| {
            black_box(baseline());
        }),
        allocations_per_call(|| drop(poll_once(closed.call(get_user(7))))),
        allocations_per_call(|| drop(poll_once(open.call(get_user(7))))),
    );
}

/// Two threads making `iters` calls each; the time per call of one thread.
fn two_threads(iters: u64, call: &(dyn Fn() + Sync)) -> Duration {
    let barrier = Barrier::new(3);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                barrier.wait();
                for _ in 0..iters {
                    call();
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    })
}

fn contended(c: &mut Criterion) {
    let rt = runtime();
    let _guard = rt.enter();
    let breaker = closed();
    let _ = poll_once(breaker.call(get_user(1)));

    let mut group = c.benchmark_group("breaker/two-threads");
    group.bench_function("baseline: call + shared fetch_add", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|| {
                black_box(baseline());
            })
        })
    });
    group.bench_function("closed: call", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|| {
                black_box(poll_once(breaker.call(get_user(black_box(7)))).is_ok());
            })
        })
    });
    group.finish();
}

/// A dependency that answers at its second poll, as a real one does once
/// its I/O is done.
#[inline(never)]
async fn get_user_later(id: u64) -> Result<u64, ClientError> {
    tokio::task::yield_now().await;
    Ok(black_box(id) + 1)
}

/// The cost of a call that is pending once, the shape of every real call:
/// the breaker then arms its cut (the `call_timeout`, 30 s by default: a
/// clock read and a timer registered and cancelled), which a call that
/// completes at its first poll never does.
fn pending(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let breaker = closed();
    rt.block_on(async {
        let _ = breaker.call(get_user(1)).await;
    });
    let mut group = c.benchmark_group("breaker/pending");
    group.bench_function("baseline: the call, pending once", |b| {
        b.iter(|| rt.block_on(get_user_later(black_box(7))).is_ok())
    });
    group.bench_function("closed: call, pending once", |b| {
        b.iter(|| {
            rt.block_on(breaker.call(get_user_later(black_box(7))))
                .is_ok()
        })
    });
    group.finish();
}

fn memory(_: &mut Criterion) {
    let _ = closed(); // what the first breaker of a process sets up once is not its own
    let before = LIVE_BYTES.load(Relaxed);
    let breaker = closed();
    let heap = LIVE_BYTES.load(Relaxed) - before;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        // The first call on a runtime starts its ticker, shared by every
        // breaker used on that runtime; later breakers join it.
        let before = LIVE_BYTES.load(Relaxed);
        let _ = breaker.call(get_user(1)).await;
        tokio::task::yield_now().await;
        let ticker = LIVE_BYTES.load(Relaxed) - before;
        const MORE: usize = 100;
        let before = LIVE_BYTES.load(Relaxed);
        let mut more = Vec::with_capacity(MORE);
        let vec = LIVE_BYTES.load(Relaxed) - before;
        for _ in 0..MORE {
            let breaker = closed();
            let _ = breaker.call(get_user(1)).await;
            more.push(breaker);
        }
        tokio::task::yield_now().await;
        let each = (LIVE_BYTES.load(Relaxed) - before - vec) / MORE;
        println!(
            "one breaker with the default window: {heap} bytes of heap; \
             the runtime's ticker, shared by all its breakers: {ticker} bytes (the runtime's timer included); \
             each further breaker, its place on the ticker's list included: {each} bytes; the handle is {} bytes",
            std::mem::size_of::<CircuitBreaker>(),
        );
    });
}

/// The closed path with sharing on (following its fleet through the
/// Redis at 127.0.0.1:6379, syncing every second) beside the same breaker
/// unshared, in one run: `cargo bench --bench breaker --features
/// breaker-redis -- "closed, shared"`.
#[cfg(feature = "breaker-redis")]
fn shared(c: &mut Criterion) {
    use resilience::breaker::{Fleet, Sharing};
    // The sync task's Redis connection needs the runtime's IO driver.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let config = BreakerConfig::new();
    let local = CircuitBreaker::new("bench-local", config).unwrap();
    let shared = CircuitBreaker::new(
        "bench-shared",
        config.with_sharing(Sharing::redis("redis://127.0.0.1:6379/")),
    )
    .unwrap();
    let _ = poll_once(local.call(get_user(1)));
    let _ = poll_once(shared.call(get_user(1)));
    let start = std::time::Instant::now();
    while shared.snapshot().fleet != Fleet::Joined && start.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("shared breaker: {}", shared.snapshot().fleet.as_str());

    let mut group = c.benchmark_group("breaker");
    group.bench_function("closed, shared: off", |b| {
        b.iter(|| poll_once(local.call(get_user(black_box(7)))).is_ok())
    });
    group.bench_function("closed, shared: on", |b| {
        b.iter(|| poll_once(shared.call(get_user(black_box(7)))).is_ok())
    });
    group.finish();
}

#[cfg(not(feature = "breaker-redis"))]
fn shared(_: &mut Criterion) {}

/// A breaker used from plain threads, no Tokio runtime anywhere, beside
/// recloser (whose `call` is synchronous) on the same fn, in one run.
fn no_runtime(c: &mut Criterion) {
    assert!(tokio::runtime::Handle::try_current().is_err());
    let breaker = closed();
    let recloser = recloser::Recloser::default();
    let ours = || match breaker.try_acquire() {
        Ok(permit) => {
            let out = get_user_blocking(black_box(7));
            permit.record(&out);
            out.is_ok()
        }
        Err(_) => false,
    };
    let peer = || recloser.call(|| get_user_blocking(black_box(7))).is_ok();
    // The first calls set up what a process sets up once.
    ours();
    peer();

    let mut group = c.benchmark_group("breaker/no-runtime");
    group.bench_function("closed: try_acquire + record", |b| b.iter(ours));
    group.bench_function("closed: call, polled once", |b| {
        b.iter(|| poll_once(breaker.call(get_user(black_box(7)))).is_ok())
    });
    group.bench_function("recloser (peer): call", |b| b.iter(peer));
    let open = open();
    let open_recloser = recloser::Recloser::custom()
        .closed_len(1)
        .open_wait(Duration::from_secs(3600))
        .build();
    for _ in 0..2 {
        let _ = open_recloser.call(|| Err::<u64, _>(ClientError::Status(503)));
    }
    assert!(matches!(
        open_recloser.call(|| get_user_blocking(7)),
        Err(recloser::Error::Rejected)
    ));
    group.bench_function("open: try_acquire rejected", |b| {
        b.iter(|| open.try_acquire().is_err())
    });
    group.bench_function("recloser (peer): open, rejected", |b| {
        b.iter(|| {
            open_recloser
                .call(|| get_user_blocking(black_box(7)))
                .is_err()
        })
    });
    group.bench_function("two threads, closed: try_acquire + record", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|| {
                black_box(ours());
            })
        })
    });
    group.bench_function("two threads, recloser (peer): call", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|| {
                black_box(peer());
            })
        })
    });
    group.finish();
}

/// CPU time of every thread of the process, from
/// `/proc/self/task/*/schedstat` (nanoseconds on a CPU).
fn process_cpu() -> Duration {
    let mut nanos = 0;
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        nanos += stat
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Duration::from_nanos(nanos)
}

/// `n` names of their own, leaked as a registry's names are.
fn names(prefix: &str, n: usize) -> Vec<&'static str> {
    (0..n)
        .map(|i| &*Box::leak(format!("{prefix}-{i}").into_boxed_str()))
        .collect()
}

/// Idle breakers on a runtime: each called once (which puts it on the
/// runtime's ticker) at its own moment over one second, as a service meets
/// its dependencies; then the CPU the process spends over 6 s, one bucket
/// of the default 60 s window, with nothing else running. Returns the heap
/// each took on the ticker and the CPU in ms per second.
fn idle_ticker(breakers: &[&CircuitBreaker]) -> (usize, f64) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let before = LIVE_BYTES.load(Relaxed);
    rt.block_on(async {
        let spread = Duration::from_secs(1) / u32::try_from(breakers.len()).unwrap_or(u32::MAX);
        for breaker in breakers {
            let _ = breaker.call(get_user(1)).await;
            tokio::time::sleep(spread).await;
        }
    });
    let on_ticker = (LIVE_BYTES.load(Relaxed) - before) / breakers.len();
    std::thread::sleep(Duration::from_secs(1));
    let (cpu, start) = (process_cpu(), Instant::now());
    std::thread::sleep(Duration::from_secs(6));
    let ms_per_s = (process_cpu() - cpu).as_secs_f64() * 1e3 / start.elapsed().as_secs_f64();
    drop(rt);
    (on_ticker, ms_per_s)
}

/// Thousands of breakers: heap per breaker, what the ticker costs while
/// they sit idle, and the registry's and a family's lookups, at 10, 1,000
/// and 10,000.
fn scale(c: &mut Criterion) {
    let mut group = c.benchmark_group("breaker/scale");
    for n in [10, 1_000, 10_000] {
        let registry = Registry::builder().build().unwrap();
        let names = names(&format!("scale{n}"), n);
        let before = LIVE_BYTES.load(Relaxed);
        for &name in &names {
            registry.breaker(name, BreakerConfig::new());
        }
        let heap = (LIVE_BYTES.load(Relaxed) - before) / n;
        group.bench_function(format!("registry find_breaker, {n} breakers"), |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 7919) % n;
                black_box(registry.find_breaker(black_box(names[i])).is_some())
            })
        });
        let breakers: Vec<_> = names
            .iter()
            .map(|name| registry.find_breaker(name).unwrap())
            .collect();
        let (on_ticker, ticker) = idle_ticker(&breakers);
        // The same with 1 s windows: a bucket boundary every 100 ms each.
        let short: Vec<_> = names
            .iter()
            .map(|name| {
                let config = BreakerConfig::new().with_window(Duration::from_secs(1));
                CircuitBreaker::new(name, config).unwrap()
            })
            .collect();
        let (_, short_ticker) = idle_ticker(&short.iter().collect::<Vec<_>>());
        println!(
            "{n} breakers: {heap} bytes of heap each in the registry, {on_ticker} more once called on a runtime; \
             the ticker, all idle: {ticker:.2} ms of CPU per second with the default 60 s window, \
             {short_ticker:.1} ms with a 1 s window"
        );
    }

    let family =
        BreakerFamily::new("scale-hosts", FamilyConfig::new().with_max_members(10_000)).unwrap();
    let keys: Vec<String> = (0..10_000).map(|i| format!("host-{i}.internal")).collect();
    let before = LIVE_BYTES.load(Relaxed);
    for key in &keys {
        family.get(key);
    }
    println!(
        "a family of 10,000 members: {} bytes of heap each",
        (LIVE_BYTES.load(Relaxed) - before) / keys.len()
    );
    group.bench_function("family get, 10,000 members", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 7919) % keys.len();
            black_box(family.get(black_box(&keys[i])))
        })
    });
    group.finish();
}

/// A family of 1,000,000 members, the most one may hold (#31): the time
/// to fill it, its heap, a lookup of a member, and a new key at the cap,
/// which evicts one. Keys are integers, formatted on the stack by
/// [`FamilyKey`]; the first row is that formatting alone.
fn family(c: &mut Criterion) {
    let n = u64::from(MAX_MEMBERS);
    let config = FamilyConfig::new().with_max_members(MAX_MEMBERS);
    let family = BreakerFamily::new("million", config).unwrap();
    let before = LIVE_BYTES.load(Relaxed);
    let start = Instant::now();
    for key in 0..n {
        drop(key.with_key(|key| family.get(key)));
    }
    let filled = start.elapsed();
    let heap = LIVE_BYTES.load(Relaxed) - before;
    assert_eq!(family.len() as u64, n);
    println!(
        "a family of {n} members: {heap} bytes of heap, {} each (the breaker's state and window, \
         its key, its place in the ring and its share of the key table, sized for twice the cap); \
         filled in {:.2} s",
        heap / family.len(),
        filled.as_secs_f64(),
    );
    let mut group = c.benchmark_group("breaker/family");
    group.bench_function("baseline: the key formatted", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 7919) % n;
            black_box(black_box(i).with_key(str::len))
        })
    });
    group.bench_function("get, a member of 1,000,000", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 7919) % n;
            black_box(black_box(i).with_key(|key| family.get(key)))
        })
    });
    let mut next = n;
    group.bench_function("get, a new key at the cap of 1,000,000 (evicts one)", |b| {
        b.iter(|| {
            next += 1;
            black_box(black_box(next).with_key(|key| family.get(key)))
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    single_thread,
    pending,
    contended,
    memory,
    shared,
    no_runtime,
    scale,
    family
);
criterion_main!(benches);
