//! sony/gobreaker v2 (`v2/gobreaker_test.go`, `v2/twostep_gobreaker_test.go`
//! at fed8e9e), the breaker the guide uses.
//!
//! How we differ, deliberately:
//! - gobreaker's closed state counts in a fixed `Interval` that it clears
//!   (a new generation); ours is a sliding window (time buckets or the last
//!   n calls), so a result is never dropped because an interval passed,
//!   only because the breaker changed state since the call was admitted.
//! - gobreaker's default `ReadyToTrip` is "more than 5 consecutive
//!   failures"; ours has no consecutive rule, and the same trip is a count
//!   window of 6 that must be all failures.
//! - gobreaker clears its counts on every state change; ours keeps the
//!   counts that tripped it while open (for the operator) and starts fresh
//!   in half-open and closed.

use std::time::Duration;

use resilience::Outcome;
use resilience::breaker::{BreakerConfig, CircuitBreaker, State};
use resilience::retry::Verdict;
use tokio::time::sleep;

use crate::TestError;

fn breaker(name: &'static str, config: BreakerConfig) -> CircuitBreaker {
    CircuitBreaker::new(name, config).unwrap()
}

async fn succeed(b: &CircuitBreaker) -> Result<(), TestError> {
    b.call(async { Ok(()) }).await
}

async fn fail(b: &CircuitBreaker) -> Result<(), TestError> {
    b.call(async { Err(TestError::Status(503)) }).await
}

async fn exclude(b: &CircuitBreaker) -> Result<(), TestError> {
    b.call(async { Err(TestError::Excluded) }).await
}

fn counts(b: &CircuitBreaker) -> (u64, u64) {
    let snapshot = b.snapshot();
    (snapshot.calls, snapshot.failures)
}

/// gobreaker's `Settings{}`: trip after more than 5 consecutive failures,
/// one probe, 60 s open. Ours: the last 6 calls all failed.
fn default_settings() -> BreakerConfig {
    BreakerConfig::new()
        .with_count_window(6)
        .with_min_requests(6)
        .with_failure_ratio(1.0)
        .with_cooldown(Duration::from_secs(60))
        .with_half_open(1)
}

/// `TestDefaultCircuitBreaker`.
#[tokio::test(start_paused = true)]
async fn test_default_circuit_breaker() {
    let b = breaker("default", default_settings());
    for _ in 0..5 {
        assert!(fail(&b).await.is_err());
    }
    assert_eq!(b.state(), State::Closed);
    assert_eq!(counts(&b), (5, 5));

    assert!(succeed(&b).await.is_ok());
    assert_eq!(b.state(), State::Closed);
    assert_eq!(counts(&b), (6, 5));

    assert!(fail(&b).await.is_err());
    assert_eq!(b.state(), State::Closed);

    // Five more: six consecutive failures.
    for _ in 0..5 {
        assert!(fail(&b).await.is_err());
    }
    assert_eq!(b.state(), State::Open);
    assert_eq!(succeed(&b).await.unwrap_err().rejected_as(), Some("open"));
    assert_eq!(fail(&b).await.unwrap_err().rejected_as(), Some("open"));

    sleep(Duration::from_secs(60) - Duration::from_millis(1)).await;
    assert_eq!(b.state(), State::Open);
    sleep(Duration::from_secs(1)).await;
    assert_eq!(b.state(), State::HalfOpen);

    assert!(fail(&b).await.is_err());
    assert_eq!(b.state(), State::Open);

    sleep(Duration::from_secs(60) + Duration::from_nanos(1)).await;
    assert_eq!(b.state(), State::HalfOpen);
    assert!(succeed(&b).await.is_ok());
    assert_eq!(b.state(), State::Closed);
    assert_eq!(counts(&b), (0, 0));
}

/// `newRollingWindow`: 30 s in buckets of 3 s, 3 probes, 90 s open, trip
/// at 3 valid calls of which 60 % failed, exclusions not counted.
fn rolling_window() -> BreakerConfig {
    BreakerConfig::new()
        .with_window(Duration::from_secs(30))
        .with_min_requests(3)
        .with_failure_ratio(0.6)
        .with_cooldown(Duration::from_secs(90))
        .with_half_open(3)
}

/// `TestRollingWindowCircuitBreaker`: our time window has gobreaker's
/// rolling geometry (ten buckets aligned to the breaker's start), so every
/// count is gobreaker's `Requests − TotalExclusions` and `TotalFailures`.
#[tokio::test(start_paused = true)]
async fn test_rolling_window_circuit_breaker() {
    let b = breaker("rw", rolling_window());
    let changes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    {
        let changes = std::sync::Arc::clone(&changes);
        b.on_state_change(move |name, from, to| changes.lock().unwrap().push((name, from, to)));
    }
    for _ in 0..5 {
        assert!(succeed(&b).await.is_ok());
        assert!(fail(&b).await.is_err());
        assert!(exclude(&b).await.is_err());
    }
    assert_eq!(counts(&b), (10, 5));

    sleep(Duration::from_secs(3)).await; // t = 3
    succeed(&b).await.unwrap();
    assert_eq!(counts(&b), (11, 5));

    sleep(Duration::from_secs(2)).await; // t = 5
    succeed(&b).await.unwrap();
    assert!(exclude(&b).await.is_err());
    assert_eq!(counts(&b), (12, 5));

    sleep(Duration::from_secs(2)).await; // t = 7
    assert!(exclude(&b).await.is_err());
    succeed(&b).await.unwrap();
    assert_eq!(counts(&b), (13, 5));

    sleep(Duration::from_secs(2)).await; // t = 9
    assert!(fail(&b).await.is_err());
    assert_eq!(counts(&b), (14, 6));

    for i in 0..6 {
        sleep(Duration::from_secs(3)).await; // t = 12, 15, …, 27
        succeed(&b).await.unwrap();
        assert!(fail(&b).await.is_err());
        assert_eq!(counts(&b), (14 + 2 * (i + 1), 6 + (i + 1)));
    }

    sleep(Duration::from_secs(3)).await; // t = 30: the first bucket leaves
    assert!(fail(&b).await.is_err());
    assert_eq!(counts(&b), (17, 8));

    for i in 0..5 {
        assert!(fail(&b).await.is_err());
        assert_eq!(counts(&b), (18 + i, 9 + i));
        assert_eq!(b.state(), State::Closed);
    }
    // 14 of 23 = 0.6087 ≥ 0.6.
    assert!(fail(&b).await.is_err());
    assert_eq!(b.state(), State::Open);
    assert_eq!(
        changes.lock().unwrap().last(),
        Some(&("rw", State::Closed, State::Open))
    );

    sleep(Duration::from_secs(90) + Duration::from_nanos(1)).await;
    assert_eq!(b.state(), State::HalfOpen);
    succeed(&b).await.unwrap();
    succeed(&b).await.unwrap();
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(counts(&b), (2, 0), "half-open counts its own calls");

    // A third probe in flight: the fourth call is one too many.
    let slow = b.try_acquire().unwrap();
    assert_eq!(
        succeed(&b).await.unwrap_err().rejected_as(),
        Some("half-open")
    );
    slow.success();
    assert_eq!(b.state(), State::Closed);
    assert_eq!(counts(&b), (0, 0));
    assert_eq!(
        changes.lock().unwrap().last(),
        Some(&("rw", State::HalfOpen, State::Closed))
    );
}

/// `TestPanicInRequest`: a request that panics is a failure, and the
/// panic goes on to the caller.
#[tokio::test(start_paused = true)]
async fn test_panic_in_request() {
    let b = breaker("panic", default_settings());
    let panicking = b.clone();
    let joined = tokio::spawn(async move {
        panicking
            .call(async {
                if true {
                    panic!("oops");
                }
                Ok::<(), TestError>(())
            })
            .await
    })
    .await;
    assert!(joined.unwrap_err().is_panic(), "the panic goes on");
    assert_eq!(counts(&b), (1, 1));

    // The same through a permit held across the panic.
    let b = breaker("panic-permit", default_settings());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _permit = b.try_acquire().unwrap();
        panic!("oops");
    }));
    assert!(result.is_err());
    assert_eq!(counts(&b), (1, 1));
}

/// `TestGeneration`, for our state periods: a call admitted while closed
/// that comes back after the breaker tripped, went half-open and closed
/// again counts for nothing in the new closed period. (gobreaker also
/// starts a generation when its fixed interval clears the counts; our
/// window slides instead, see the module docs.)
#[tokio::test(start_paused = true)]
async fn test_generation() {
    for late in [Outcome::Failure, Outcome::Success] {
        let b = breaker(
            "generation",
            BreakerConfig::new()
                .with_min_requests(2)
                .with_cooldown(Duration::from_secs(1)),
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<Outcome>();
        let stale = b.clone();
        let in_flight = tokio::spawn(async move {
            stale
                .call(async {
                    match rx.await.unwrap() {
                        Outcome::Failure => Err(TestError::Status(503)),
                        _ => Ok(()),
                    }
                })
                .await
        });
        tokio::task::yield_now().await;
        assert!(fail(&b).await.is_err());
        assert!(fail(&b).await.is_err());
        assert_eq!(b.state(), State::Open);
        sleep(Duration::from_secs(1)).await;
        succeed(&b).await.unwrap();
        assert_eq!(b.state(), State::Closed);
        assert_eq!(counts(&b), (0, 0));

        tx.send(late).unwrap();
        let _ = in_flight.await.unwrap();
        assert_eq!(
            counts(&b),
            (0, 0),
            "the {late:?} of a past period counts for nothing"
        );
        assert_eq!(b.state(), State::Closed);
    }
}

/// `TestCustomIsSuccessful`: what the classifier calls a success is one,
/// error or not; with the default classification the same errors trip it.
#[tokio::test(start_paused = true)]
async fn test_custom_is_successful() {
    let b = breaker("custom", default_settings());
    for _ in 0..5 {
        let result = b
            .call_with(
                async { Err::<(), _>(TestError::Status(503)) },
                |_: &TestError| false,
            )
            .await;
        assert!(result.is_err());
    }
    assert_eq!(b.state(), State::Closed);
    assert_eq!(counts(&b), (5, 0));

    b.reset();
    for _ in 0..6 {
        assert!(fail(&b).await.is_err());
    }
    assert_eq!(b.state(), State::Open);
}

/// `TestIsExcludedAndIsSuccessfulCombination`: excluded calls count for
/// nothing, successes and failures as such.
#[tokio::test(start_paused = true)]
async fn test_is_excluded_and_is_successful_combination() {
    let b = breaker("combination", BreakerConfig::new());
    for _ in 0..3 {
        assert!(exclude(&b).await.is_err());
    }
    assert_eq!(counts(&b), (0, 0));
    for _ in 0..3 {
        succeed(&b).await.unwrap();
    }
    assert_eq!(counts(&b), (3, 0));
    for _ in 0..2 {
        assert!(fail(&b).await.is_err());
    }
    assert_eq!(counts(&b), (5, 2));
    // The same through a classifier closure returning `Ignored`.
    let ignored = b
        .call_with(
            async { Err::<(), _>(TestError::Status(503)) },
            |_: &TestError| Verdict::Ignored,
        )
        .await;
    assert!(ignored.is_err());
    assert_eq!(counts(&b), (5, 2));
}

/// `TestTwoStepCircuitBreaker`: `Allow()`/`done(err)` are our
/// `try_acquire()` and the permit's outcome.
#[tokio::test(start_paused = true)]
async fn test_two_step_circuit_breaker() {
    let b = breaker("tscb", default_settings().with_half_open(2));
    for _ in 0..5 {
        b.try_acquire().unwrap().failure();
    }
    assert_eq!(b.state(), State::Closed);
    b.try_acquire().unwrap().success();
    b.try_acquire().unwrap().failure();
    for _ in 0..5 {
        b.try_acquire().unwrap().failure();
    }
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.try_acquire().unwrap_err().state(), "open");

    sleep(Duration::from_secs(60) - Duration::from_millis(1)).await;
    assert_eq!(b.state(), State::Open);
    sleep(Duration::from_secs(1)).await;
    assert_eq!(b.state(), State::HalfOpen);

    // Two excluded calls in flight take both probe slots.
    let first = b.try_acquire().unwrap();
    let second = b.try_acquire().unwrap();
    assert_eq!(b.try_acquire().unwrap_err().state(), "half-open");
    first.settle(Outcome::Ignored);
    second.settle(Outcome::Ignored);
    assert_eq!(b.state(), State::HalfOpen);

    b.try_acquire().unwrap().success();
    assert_eq!(b.state(), State::HalfOpen, "one success of two");
    b.try_acquire().unwrap().failure();
    assert_eq!(b.state(), State::Open);

    sleep(Duration::from_secs(60) + Duration::from_nanos(1)).await;
    assert_eq!(b.state(), State::HalfOpen);
    b.try_acquire().unwrap().success();
    b.try_acquire().unwrap().success();
    assert_eq!(b.state(), State::Closed);
    assert_eq!(counts(&b), (0, 0));
}
