//! The guide's own unit tests and the numbers of its code
//! (`shared/seed/retry-and-circuit-breaker.ru.txt`, Go): the retrying
//! client, the circuit breaker with the guide's gobreaker settings, the
//! backoff schedule and `IsRetryable`.
//!
//! How we differ, deliberately: the guide's gobreaker `Interval: 60s`
//! clears its counts every minute; ours slides a 60 s window ten buckets
//! at a time. Its Go client has no attempt cap, only `MaxElapsedTime`; ours
//! has both (3 attempts, as the guide's table says).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::SmallRng;
use resilience::breaker::{BreakerConfig, CircuitBreaker, State};
use resilience::retry::{Backoff, Classify, HttpStatus, Policy, Verdict};
use resilience::{Outcome, circuit_breaker};
use tokio::time::Instant;

use crate::TestError;

/// `TestRetryClient_RetriesOn502`: a server answering 502, 502, then 200;
/// the client built by `NewRetryClient(…, 3*time.Second)` (100 ms, ×2,
/// 2 s cap, ±25 %, 3 s in all) makes exactly 3 attempts and gets the 200.
#[tokio::test(start_paused = true)]
async fn test_retry_client_retries_on_502() {
    let policy = Policy::builder()
        .with_max_elapsed(Duration::from_secs(3))
        .build()
        .unwrap();
    let attempts = AtomicU32::new(0);
    let mut pauses = Vec::new();
    let mut last = Instant::now();
    let status = policy
        .retry(|| {
            let n = attempts.fetch_add(1, Ordering::Relaxed) + 1;
            pauses.push(last.elapsed());
            last = Instant::now();
            async move {
                if n < 3 {
                    Err(TestError::Status(502))
                } else {
                    Ok(200)
                }
            }
        })
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(attempts.load(Ordering::Relaxed), 3, "expected 3 attempts");
    // cenkalti's pauses: 100 ms and 200 ms, each ±25 %.
    assert!((75..=125).contains(&pauses[1].as_millis()), "{pauses:?}");
    assert!((150..=250).contains(&pauses[2].as_millis()), "{pauses:?}");
}

/// `TestCircuitBreaker_OpensAfterThreshold`, in the test's own shape: 25
/// calls failing with an opaque error (`errors.New("downstream fail")`,
/// here `io::Error::other`), then a call the breaker must not run.
#[tokio::test(start_paused = true)]
async fn test_circuit_breaker_opens_after_threshold() {
    let cb = CircuitBreaker::new("test", BreakerConfig::new()).unwrap();
    let calls = AtomicU32::new(0);
    for _ in 0..25 {
        let _ = cb
            .call(async {
                calls.fetch_add(1, Ordering::Relaxed);
                Err::<(), _>(std::io::Error::other("downstream fail"))
            })
            .await;
    }
    // It tripped at the 20th failure (20 requests, all failed).
    assert_eq!(calls.load(Ordering::Relaxed), 20);
    let err = cb
        .call(async {
            unreachable!("CB should not invoke fn when open");
            #[allow(unreachable_code)]
            Ok::<(), std::io::Error>(())
        })
        .await
        .unwrap_err();
    let down = err
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<resilience::Error>());
    assert!(
        matches!(down, Some(resilience::Error::DependencyDown(down)) if down.state() == "open"),
        "{err:?}"
    );
}

// The same test through the attribute, as the guide's client method would
// be annotated.
#[circuit_breaker(name = "guide_opens_after_threshold")]
async fn downstream(calls: &AtomicU32) -> Result<(), std::io::Error> {
    calls.fetch_add(1, Ordering::Relaxed);
    tokio::task::yield_now().await; // the request
    Err(std::io::Error::other("downstream fail"))
}

#[tokio::test(start_paused = true)]
async fn test_circuit_breaker_opens_after_threshold_through_the_attribute() {
    let calls = AtomicU32::new(0);
    for _ in 0..25 {
        assert!(downstream(&calls).await.is_err());
    }
    assert_eq!(calls.load(Ordering::Relaxed), 20);
    let breaker = resilience::registry::global()
        .find_breaker("guide_opens_after_threshold")
        .unwrap();
    assert_eq!(breaker.state(), State::Open);
}

/// The schedule of `NewRetryClient`: 100, 200, 400, 800, 1600, then the
/// 2 s cap, each drawn within ±25 % (`RandomizationFactor = 0.25`).
#[test]
fn the_backoff_schedule() {
    let nominal = [100u64, 200, 400, 800, 1600, 2000, 2000];
    for seed in 0..200 {
        let pauses = Backoff::new().delays(SmallRng::seed_from_u64(seed));
        for (pause, nominal) in pauses.zip(nominal) {
            let ms = pause.as_secs_f64() * 1000.0;
            let (low, high) = (nominal as f64 * 0.75, nominal as f64 * 1.25);
            assert!(
                low <= ms && ms <= high,
                "seed {seed}: {ms} ms for {nominal}"
            );
        }
    }
}

/// The guide's `ReadyToTrip` (at least 20 requests, ≥ 50 % failed) runs on
/// a failure only: 19 failures and a success leave it closed, the next
/// failure trips it; and the ratio's boundary is `>=`.
#[tokio::test(start_paused = true)]
async fn ready_to_trip_runs_on_failures_with_a_closed_boundary() {
    let cb = CircuitBreaker::new("ready_to_trip", BreakerConfig::new()).unwrap();
    for _ in 0..19 {
        cb.try_acquire().unwrap().failure();
    }
    cb.try_acquire().unwrap().success();
    assert_eq!(cb.state(), State::Closed);
    cb.try_acquire().unwrap().failure();
    assert_eq!(cb.state(), State::Open);

    let cb = CircuitBreaker::new("ratio_boundary", BreakerConfig::new()).unwrap();
    for _ in 0..20 {
        cb.try_acquire().unwrap().success();
    }
    for _ in 0..19 {
        cb.try_acquire().unwrap().failure();
    }
    assert_eq!(cb.state(), State::Closed);
    cb.try_acquire().unwrap().failure(); // 20 of 40: 0.5 >= 0.5
    assert_eq!(cb.state(), State::Open);
}

/// `IsRetryable`: 408, 429, 500, 502, 503, 504 are retried, every other
/// status is not; every transport error but a cancellation is.
#[test]
fn is_retryable() {
    for status in [408, 429, 500, 502, 503, 504] {
        assert!(HttpStatus(status).classify().is_retryable(), "{status}");
    }
    for status in [200, 201, 204, 400, 401, 403, 404, 409, 422, 501, 505] {
        assert_eq!(
            HttpStatus(status).classify(),
            Verdict::Permanent,
            "{status}"
        );
        assert_eq!(HttpStatus(status).classify().outcome(), Outcome::Success);
    }
    use std::io::{Error, ErrorKind};
    for kind in [
        ErrorKind::ConnectionReset,
        ErrorKind::ConnectionRefused,
        ErrorKind::BrokenPipe,
        ErrorKind::TimedOut,
        ErrorKind::UnexpectedEof,
        ErrorKind::HostUnreachable,
    ] {
        assert_eq!(Error::from(kind).classify(), Verdict::Transient, "{kind:?}");
    }
    // "Network errors are mostly transient": an error nobody can judge.
    assert_eq!(Error::other("no such host").classify(), Verdict::Transient);
    // The caller's cancellation and passed deadline are not retried.
    assert!(
        !resilience::Error::deadline_exceeded(1)
            .classify()
            .is_retryable()
    );
}

/// The guide's per-client tuning: critical 0.3 / 10, relaxed 0.7 / 30,
/// and the defaults 0.5 / 20, 60 s window, 30 s open, one probe.
#[test]
fn the_guides_breaker_settings() {
    let default = BreakerConfig::new();
    assert_eq!((default.failure_ratio(), default.min_requests()), (0.5, 20));
    assert_eq!(default.cooldown(), Duration::from_secs(30));
    assert_eq!(default.half_open(), 1);
    let critical = BreakerConfig::critical();
    assert_eq!(
        (critical.failure_ratio(), critical.min_requests()),
        (0.3, 10)
    );
    let relaxed = BreakerConfig::relaxed();
    assert_eq!((relaxed.failure_ratio(), relaxed.min_requests()), (0.7, 30));
    // A call that hangs must end: the 30 s handler deadline.
    let cb = CircuitBreaker::new("hangs", BreakerConfig::new().with_min_requests(1)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let started = Instant::now();
        let err = cb
            .call(std::future::pending::<Result<(), TestError>>())
            .await
            .unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        assert!(matches!(
            err,
            TestError::Runtime(resilience::Error::AttemptTimeout(_))
        ));
        assert_eq!(cb.state(), State::Open);
    });
}
