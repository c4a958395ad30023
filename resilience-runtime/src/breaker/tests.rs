use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::time::sleep;

use super::*;
use crate::retry::{HttpStatus, Verdict};

#[derive(Debug, PartialEq)]
enum TestError {
    Status(u16),
    Down(&'static str, &'static str),
    Runtime(Error),
}

impl Classify for TestError {
    fn classify(&self) -> Verdict {
        match self {
            TestError::Status(code) => HttpStatus(*code).classify(),
            TestError::Runtime(err) => err.classify(),
            TestError::Down(..) => Verdict::Ignored,
        }
    }
}

impl From<Error> for TestError {
    fn from(err: Error) -> Self {
        match err {
            Error::DependencyDown(down) => TestError::Down(down.breaker(), down.state()),
            err => TestError::Runtime(err),
        }
    }
}

fn breaker(config: BreakerConfig) -> CircuitBreaker {
    CircuitBreaker::new("user", config).unwrap()
}

async fn fail(b: &CircuitBreaker, calls: &AtomicU32) -> Result<(), TestError> {
    b.call(async {
        calls.fetch_add(1, Ordering::Relaxed);
        Err(TestError::Status(503))
    })
    .await
}

async fn succeed(b: &CircuitBreaker, calls: &AtomicU32) -> Result<(), TestError> {
    b.call(async {
        calls.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn opens_after_a_failure_series_and_never_calls_while_open() {
    let b = breaker(BreakerConfig::new());
    let calls = AtomicU32::new(0);
    for _ in 0..25 {
        let _ = fail(&b, &calls).await;
    }
    // It tripped at the 20th failure (min 20, ratio 1.0 ≥ 0.5).
    assert_eq!(calls.load(Ordering::Relaxed), 20);
    assert_eq!(b.state(), State::Open);
    let err = succeed(&b, &calls).await.unwrap_err();
    assert_eq!(err, TestError::Down("user", "open"));
    assert_eq!(calls.load(Ordering::Relaxed), 20);
    let snap = b.snapshot();
    assert_eq!(snap.until_half_open, Some(Duration::from_secs(30)));
    assert_eq!((snap.calls, snap.failures), (20, 20));
}

#[tokio::test(start_paused = true)]
async fn after_the_cooldown_exactly_one_probe_then_closed_on_success() {
    let b = breaker(BreakerConfig::new());
    let calls = AtomicU32::new(0);
    for _ in 0..20 {
        let _ = fail(&b, &calls).await;
    }
    sleep(Duration::from_secs(29)).await;
    assert!(succeed(&b, &calls).await.is_err());
    sleep(Duration::from_secs(1)).await;
    // Cooldown over: one probe in flight, every other call rejected.
    let probe = b.try_acquire().expect("the probe");
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(
        succeed(&b, &calls).await.unwrap_err(),
        TestError::Down("user", "half-open")
    );
    assert_eq!(b.snapshot().probes_in_flight, 1);
    probe.success();
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.snapshot().calls, 0, "closing empties the window");
    succeed(&b, &calls).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_opens_for_another_cooldown() {
    let b = breaker(BreakerConfig::new());
    let calls = AtomicU32::new(0);
    for _ in 0..20 {
        let _ = fail(&b, &calls).await;
    }
    sleep(Duration::from_secs(30)).await;
    assert_eq!(fail(&b, &calls).await, Err(TestError::Status(503)));
    assert_eq!(calls.load(Ordering::Relaxed), 21);
    assert_eq!(b.state(), State::Open);
    sleep(Duration::from_secs(29)).await;
    assert!(succeed(&b, &calls).await.is_err());
    assert_eq!(calls.load(Ordering::Relaxed), 21);
    sleep(Duration::from_secs(1)).await;
    succeed(&b, &calls).await.unwrap();
    assert_eq!(b.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn the_ticker_moves_an_idle_breaker_to_half_open() {
    let b = breaker(BreakerConfig::new());
    let calls = AtomicU32::new(0);
    for _ in 0..20 {
        let _ = fail(&b, &calls).await;
    }
    sleep(Duration::from_secs(31)).await;
    assert_eq!(b.state(), State::HalfOpen);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_probe_frees_its_slot() {
    let b = breaker(BreakerConfig::new().with_cooldown(Duration::from_secs(1)));
    let calls = AtomicU32::new(0);
    for _ in 0..20 {
        let _ = fail(&b, &calls).await;
    }
    sleep(Duration::from_secs(1)).await;
    // A probe that hangs, then is cancelled by the caller before its
    // probe timeout: it counts for nothing.
    let hung = tokio::time::timeout(
        Duration::from_secs(2),
        b.call(std::future::pending::<Result<(), TestError>>()),
    );
    assert!(hung.await.is_err());
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(b.snapshot().probes_in_flight, 0);
    succeed(&b, &calls).await.unwrap();
    assert_eq!(b.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_hung_probe_is_cut_by_its_probe_timeout_and_reopens_the_breaker() {
    let b = breaker(
        BreakerConfig::new()
            .with_cooldown(Duration::from_secs(1))
            .with_probe_timeout(Duration::from_millis(300)),
    );
    let calls = AtomicU32::new(0);
    for _ in 0..20 {
        let _ = fail(&b, &calls).await;
    }
    sleep(Duration::from_secs(1)).await;
    let start = tokio::time::Instant::now();
    let hung = b
        .call(std::future::pending::<Result<(), TestError>>())
        .await;
    assert_eq!(
        hung,
        Err(TestError::Runtime(Error::AttemptTimeout(
            Duration::from_millis(300)
        )))
    );
    assert_eq!(start.elapsed(), Duration::from_millis(300));
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.snapshot().probes_in_flight, 0);
}

#[tokio::test(start_paused = true)]
async fn the_callers_deadline_cuts_a_call_and_counts_it_failed() {
    let b = breaker(BreakerConfig::new().with_min_requests(2));
    for _ in 0..2 {
        let start = tokio::time::Instant::now();
        let hung = deadline::with_timeout(
            Duration::from_millis(100),
            b.call(std::future::pending::<Result<(), TestError>>()),
        )
        .await;
        assert_eq!(hung, Err(TestError::Runtime(Error::deadline_exceeded(1))));
        assert_eq!(start.elapsed(), Duration::from_millis(100));
    }
    assert_eq!(b.state(), State::Open);
    assert_eq!((b.snapshot().calls, b.snapshot().failures), (2, 2));
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_deadline_passed_before_it_started_counts_for_nothing() {
    let b = breaker(BreakerConfig::new().with_min_requests(1));
    let ignored = deadline::with_timeout(Duration::ZERO, async {
        b.call(async { Err::<(), _>(TestError::Runtime(Error::deadline_exceeded(0))) })
            .await
    })
    .await;
    assert!(ignored.is_err());
    assert_eq!((b.snapshot().calls, b.state()), (0, State::Closed));
}

#[tokio::test(start_paused = true)]
async fn failures_older_than_the_window_no_longer_count() {
    let b = breaker(BreakerConfig::new());
    let calls = AtomicU32::new(0);
    for _ in 0..15 {
        let _ = fail(&b, &calls).await;
    }
    // Exactly one window later, the 15 have left it.
    sleep(Duration::from_secs(60)).await;
    for _ in 0..15 {
        let _ = fail(&b, &calls).await;
    }
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.snapshot().failures, 15);
    // Half a window later they are still in: 5 more trip it.
    sleep(Duration::from_secs(30)).await;
    for _ in 0..5 {
        let _ = fail(&b, &calls).await;
    }
    assert_eq!(b.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn the_window_slides_bucket_by_bucket() {
    let b = breaker(BreakerConfig::new());
    let calls = AtomicU32::new(0);
    for _ in 0..10 {
        let _ = fail(&b, &calls).await;
    }
    sleep(Duration::from_secs(6)).await;
    for _ in 0..30 {
        succeed(&b, &calls).await.unwrap();
    }
    let _ = fail(&b, &calls).await;
    assert_eq!(b.snapshot().calls, 41);
    // 60 s after the first bucket: its 10 failures left, the rest stayed.
    sleep(Duration::from_secs(54)).await;
    let snap = b.snapshot();
    assert_eq!((snap.calls, snap.failures), (31, 1));
}

#[tokio::test(start_paused = true)]
async fn successes_lower_the_ratio_below_the_threshold() {
    let b = breaker(BreakerConfig::new());
    let calls = AtomicU32::new(0);
    for _ in 0..21 {
        succeed(&b, &calls).await.unwrap();
    }
    for _ in 0..20 {
        let _ = fail(&b, &calls).await;
    }
    assert_eq!(b.state(), State::Closed, "20 / 41 < 0.5");
    let _ = fail(&b, &calls).await;
    assert_eq!(b.state(), State::Open, "21 / 42 ≥ 0.5");
}

#[tokio::test(start_paused = true)]
async fn permanent_errors_never_trip_it() {
    let b = breaker(BreakerConfig::critical());
    for code in [400, 404, 422, 409].repeat(25) {
        let result = b
            .call(async { Err::<(), _>(TestError::Status(code)) })
            .await;
        assert_eq!(result, Err(TestError::Status(code)));
    }
    assert_eq!(b.state(), State::Closed);
    let snap = b.snapshot();
    assert_eq!((snap.calls, snap.failures), (100, 0));
}

#[tokio::test(start_paused = true)]
async fn call_with_overrides_the_classification() {
    let b = breaker(BreakerConfig::new().with_min_requests(5));
    for _ in 0..5 {
        let result = b
            .call_with(
                async { Err::<(), _>(TestError::Status(404)) },
                |_: &TestError| true,
            )
            .await;
        assert!(result.is_err());
    }
    assert_eq!(b.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn slow_calls_trip_it_with_their_own_ratio() {
    let b = breaker(
        BreakerConfig::new()
            .with_min_requests(10)
            .with_slow_call(Duration::from_secs(2), 0.8),
    );
    for i in 0..10 {
        let result = b
            .call(async {
                sleep(Duration::from_millis(if i < 2 { 10 } else { 2500 })).await;
                Ok::<_, TestError>(())
            })
            .await;
        assert!(result.is_ok());
    }
    assert_eq!(b.state(), State::Open, "8 slow out of 10");
    assert_eq!(b.snapshot().slow_calls, 8);
}

#[tokio::test(start_paused = true)]
async fn count_window_keeps_the_last_calls() {
    let b = breaker(
        BreakerConfig::new()
            .with_min_requests(20)
            .with_count_window(100),
    );
    let calls = AtomicU32::new(0);
    for _ in 0..19 {
        let _ = fail(&b, &calls).await;
    }
    for _ in 0..200 {
        succeed(&b, &calls).await.unwrap();
    }
    let snap = b.snapshot();
    assert_eq!(
        (snap.calls, snap.failures),
        (100, 0),
        "exactly the last 100"
    );
    // 50 of the last 100 calls failed at the 50th failure: ratio 0.5.
    for n in 1..=50 {
        let _ = fail(&b, &calls).await;
        assert_eq!(b.state() == State::Open, n == 50, "after {n} failures");
    }
}

#[tokio::test(start_paused = true)]
async fn operator_controls_and_hooks() {
    let b = breaker(BreakerConfig::new().with_min_requests(1));
    let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    b.on_state_change(move |name, from, to| log.lock().unwrap().push((name, from, to)));
    let calls = AtomicU32::new(0);

    b.force_open();
    assert_eq!(
        succeed(&b, &calls).await.unwrap_err(),
        TestError::Down("user", "forced open")
    );
    sleep(Duration::from_secs(3600)).await;
    assert!(
        succeed(&b, &calls).await.is_err(),
        "no cooldown when forced"
    );
    assert_eq!(b.snapshot().until_half_open, None);

    b.force_closed();
    for _ in 0..10 {
        let _ = fail(&b, &calls).await;
    }
    assert_eq!(b.state(), State::Closed, "disabled: never trips");
    assert!(b.snapshot().forced);

    b.reset();
    assert!(!b.snapshot().forced);
    assert_eq!(b.snapshot().calls, 0);
    let _ = fail(&b, &calls).await;
    assert_eq!(b.state(), State::Open);

    assert_eq!(
        *seen.lock().unwrap(),
        [
            ("user", State::Closed, State::Open),
            ("user", State::Open, State::Closed),
            ("user", State::Closed, State::Open),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn half_open_admits_exactly_the_configured_probes() {
    let b = breaker(BreakerConfig::new().with_half_open(3).with_min_requests(1));
    b.try_acquire().unwrap().failure();
    assert_eq!(b.state(), State::Open);
    sleep(Duration::from_secs(30)).await;
    let probes: Vec<_> = (0..3).map(|_| b.try_acquire().unwrap()).collect();
    assert!(b.try_acquire().is_err());
    let mut probes = probes.into_iter();
    probes.next().unwrap().success();
    // A success frees its slot but counts towards the three needed.
    assert!(b.try_acquire().is_err());
    drop(probes.next());
    let again = b.try_acquire().expect("a cancelled probe frees its slot");
    probes.next().unwrap().success();
    assert_eq!(b.state(), State::HalfOpen);
    again.success();
    assert_eq!(b.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_late_probe_of_an_earlier_half_open_is_ignored() {
    let b = breaker(BreakerConfig::new().with_half_open(2).with_min_requests(1));
    b.try_acquire().unwrap().failure();
    sleep(Duration::from_secs(30)).await;
    let late = b.try_acquire().unwrap();
    b.try_acquire().unwrap().failure();
    assert_eq!(b.state(), State::Open);
    sleep(Duration::from_secs(30)).await;
    let first = b.try_acquire().unwrap();
    late.success();
    late_check(&b);
    first.success();
    assert_eq!(b.state(), State::HalfOpen, "one success of two");
}

fn late_check(b: &CircuitBreaker) {
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(b.snapshot().probes_in_flight, 1);
}

#[test]
fn without_a_runtime_the_ticker_thread_drives_it_and_it_still_works() {
    let b = breaker(BreakerConfig::new().with_min_requests(3));
    b.try_acquire().unwrap().success();
    // Claimed by the thread in that first call: from now on no call reads
    // the clock (`NO_TICKER` is what sent every call to read it).
    let word = StateWord(b.machine.state.load(Ordering::Acquire));
    assert!(word.on_thread() && !word.unticked(), "{:#b}", word.0);
    b.try_acquire().unwrap().failure();
    assert_eq!(b.state(), State::Closed, "2 calls < min 3");
    b.try_acquire().unwrap().failure();
    assert_eq!(b.state(), State::Open, "2 failures out of 3");
    assert!(b.try_acquire().is_err());
}

/// What the ticker thread does, step by step on a paused clock: the thread
/// itself runs on the real one, so the test drives a `Driven` of its own.
#[test]
fn the_ticker_thread_ends_a_cooldown_and_lets_a_runtime_take_the_breaker_over() {
    let cooldown = Duration::from_secs(3600);
    let b = breaker(BreakerConfig::new().with_cooldown(cooldown));
    for _ in 0..20 {
        b.try_acquire().unwrap().failure();
    }
    assert_eq!(b.state(), State::Open);
    assert!(b.try_acquire().is_err(), "rejected outside a runtime too");
    let paused = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    paused.block_on(async {
        let mut driven = thread_ticker::Driven::default();
        driven.adopt(vec![Arc::downgrade(&b.machine) as _]);
        let due = driven.tick(tokio::time::Instant::now()).unwrap();
        assert!(due <= tokio::time::Instant::now() + cooldown);
        // Nothing else runs on this runtime: no ticker task to let run.
        tokio::time::advance(cooldown).await;
        driven.tick(tokio::time::Instant::now());
        assert_eq!(b.state(), State::HalfOpen, "moved by the ticker, no call");
        // A probe made inside a runtime hands the breaker to its ticker,
        // and the thread forgets it.
        let calls = AtomicU32::new(0);
        assert!(succeed(&b, &calls).await.is_ok());
        assert_eq!(b.state(), State::Closed);
        assert!(!StateWord(b.machine.state.load(Ordering::Acquire)).wants_runtime_ticker());
        driven.tick(tokio::time::Instant::now());
        assert_eq!(driven.len(), 0);
    });
}

/// A breaker first called from a plain thread, then failing inside a
/// runtime whose clock is paused, follows that clock: the first failure
/// hands it to that runtime's ticker.
#[test]
fn a_breaker_of_the_ticker_thread_follows_a_paused_runtime_it_fails_in() {
    let b = breaker(BreakerConfig::new().with_cooldown(Duration::from_secs(2)));
    b.try_acquire().unwrap().success();
    assert!(StateWord(b.machine.state.load(Ordering::Acquire)).on_thread());
    let paused = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    paused.block_on(async {
        trip(&b).await;
        assert!(!StateWord(b.machine.state.load(Ordering::Acquire)).on_thread());
        sleep(Duration::from_millis(2500)).await;
        assert_eq!(b.state(), State::HalfOpen, "2 s on the paused clock");
    });
}

#[test]
fn invalid_configs_are_refused_with_the_breaker_name() {
    let err =
        CircuitBreaker::new("user", BreakerConfig::new().with_failure_ratio(2.0)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid circuit breaker `user`: `ratio = 2`: the failure ratio is a fraction in (0, 1], e.g. 0.5"
    );
}

async fn trip(b: &CircuitBreaker) {
    let calls = AtomicU32::new(0);
    for _ in 0..20 {
        let _ = fail(b, &calls).await;
    }
    assert_eq!(b.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn one_ticker_drives_every_breaker_of_a_runtime() {
    let tasks = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let before = tasks();
    let breakers: Vec<CircuitBreaker> = (1..=8)
        .map(|secs| breaker(BreakerConfig::new().with_cooldown(Duration::from_secs(secs))))
        .collect();
    for b in &breakers {
        trip(b).await;
    }
    assert_eq!(tasks(), before + 1, "one ticker task for all the breakers");
    // No call reads the clock from here on: only the ticker moves them, each
    // at the end of its own cooldown. (Looked at half a second after each
    // end: at the very instant, the paused clock may wake this test first.)
    sleep(Duration::from_millis(500)).await;
    for secs in 1..=8 {
        sleep(Duration::from_secs(1)).await;
        let states: Vec<State> = breakers.iter().map(CircuitBreaker::state).collect();
        let expected: Vec<State> = (1..=8)
            .map(|cooldown| {
                if cooldown <= secs {
                    State::HalfOpen
                } else {
                    State::Open
                }
            })
            .collect();
        assert_eq!(states, expected, "after {secs} s");
    }
}

#[test]
fn a_breaker_outlives_the_runtime_of_its_ticker() {
    let paused = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    };
    let b = breaker(BreakerConfig::new().with_cooldown(Duration::from_secs(2)));
    paused().block_on(trip(&b));
    // That runtime and its ticker are gone; the next call, on another
    // runtime, hands the breaker to that runtime's ticker.
    paused().block_on(async {
        let calls = AtomicU32::new(0);
        assert!(succeed(&b, &calls).await.is_err());
        assert_eq!(calls.load(Ordering::Relaxed), 0);
        let tasks = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        assert_eq!(tasks, 1, "the new runtime's ticker");
        sleep(Duration::from_secs(3)).await;
        assert_eq!(b.state(), State::HalfOpen);
    });
}

/// A breaker's heap is its `Arc` (two counts, then `Machine`) and what its
/// window allocates: at most 512 bytes while one thread calls it and no
/// failure is in its bases, within 1 KiB once other threads count too (its
/// stripes) and failures are in its bases. A field added to `Machine` can
/// break the first budget.
#[test]
fn a_breaker_takes_half_a_kib_of_heap_until_a_second_thread_counts() {
    use std::alloc::Layout;
    let counts = Layout::new::<[std::sync::atomic::AtomicUsize; 2]>();
    let (arc, _) = counts.extend(Layout::new::<Machine>()).unwrap();
    let arc = arc.pad_to_align().size();
    let b = breaker(BreakerConfig::new());
    let window = &b.machine.window;
    window.add_success_at(0);
    window.clear();
    window.add_success_at(0);
    let heap = arc + window.heap();
    assert!(heap <= 512, "{heap} bytes");
    window.add_at(0, true, false);
    window.clear();
    window.add_success_at(1);
    let heap = arc + window.heap();
    assert!(heap <= 1024, "{heap} bytes");
}
