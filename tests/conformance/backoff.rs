//! cenkalti/backoff v4 (the guide imports it), `exponential_test.go`,
//! `retry_test.go`, `context_test.go` and `tries_test.go` at
//! `720b78985a65c0452fd37bb155c7cac4157a7c45`, ported to
//! `resilience::retry`.
//!
//! How we differ, deliberately: a jitter below 10 % is refused (the guide's
//! anti-pattern 2), so cenkalti's `RandomizationFactor = 0` cases are not
//! expressible; `MaxElapsedTime = 0` ("never stop") is refused (every chain
//! is bounded); a pause that would end exactly at `max_elapsed` gives up
//! (cenkalti stops only past it), and an attempt still in flight at
//! `max_elapsed` is cut there rather than awaited.

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::SmallRng;
use resilience::retry::{Backoff, Classify, Jitter, Policy, Verdict};

#[derive(Debug)]
enum OpError {
    /// `io.EOF`: a transport error, transient.
    Eof,
    /// `backoff.Permanent(err)`.
    Permanent,
    Runtime(resilience::Error),
}

impl Classify for OpError {
    fn classify(&self) -> Verdict {
        match self {
            OpError::Eof => io::Error::from(io::ErrorKind::UnexpectedEof).classify(),
            OpError::Permanent => Verdict::Permanent,
            OpError::Runtime(err) => err.classify(),
        }
    }
}

impl From<resilience::Error> for OpError {
    fn from(err: resilience::Error) -> Self {
        OpError::Runtime(err)
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `exponential_test.go` `TestBackOff`: initial 500 ms, randomization 0.1,
/// multiplier 2.0, max interval 5 s: the pauses 500, 1000, 2000, 4000, then
/// 5000 ms six times, each within ±10 %.
#[test]
fn test_back_off() {
    let backoff = Backoff::new()
        .with_initial(ms(500))
        .with_multiplier(2.0)
        .with_max_interval(Duration::from_secs(5))
        .with_jitter(Jitter::Symmetric(0.1));
    backoff.validate().unwrap();
    let expected = [500, 1000, 2000, 4000, 5000, 5000, 5000, 5000, 5000, 5000];
    for seed in 0..200 {
        let delays: Vec<Duration> = backoff
            .delays(SmallRng::seed_from_u64(seed))
            .take(10)
            .collect();
        for (delay, expected) in delays.iter().zip(expected) {
            let low = ms(expected).mul_f64(0.9) - Duration::from_nanos(1);
            let high = ms(expected).mul_f64(1.1) + Duration::from_nanos(1);
            assert!((low..=high).contains(delay), "seed {seed}: {delays:?}");
        }
    }
}

/// `TestGetRandomizedInterval`, as a property (ours draws a factor, not an
/// integer nanosecond): with randomization 0.5 around 2 ms every pause lies
/// in [1 ms, 3 ms].
#[test]
fn test_get_randomized_interval() {
    let backoff = Backoff::new()
        .with_initial(ms(2))
        .with_multiplier(1.0)
        .with_max_interval(ms(2))
        .with_jitter(Jitter::Symmetric(0.5));
    for delay in backoff.delays(SmallRng::seed_from_u64(7)).take(1000) {
        assert!((ms(1)..=ms(3)).contains(&delay), "{delay:?}");
    }
}

/// `TestBackOffOverflow`: initial `MaxInt64 / 2` ns, max interval
/// `MaxInt64` ns, multiplier 2.1: the next interval is capped, no overflow.
#[test]
fn test_back_off_overflow() {
    let max = Duration::from_nanos(i64::MAX as u64);
    let backoff = Backoff::new()
        .with_initial(Duration::from_nanos(i64::MAX as u64 / 2))
        .with_max_interval(max)
        .with_multiplier(2.1);
    backoff.validate().unwrap();
    let mut rng = SmallRng::seed_from_u64(1);
    let delay = backoff.delay(1, Duration::ZERO, &mut rng);
    // The cap, randomized by the default ±25 % (jitter applies on top of
    // the cap in cenkalti too).
    assert!(
        delay >= max.mul_f64(0.75) && delay <= max.mul_f64(1.25),
        "{delay:?}"
    );
}

/// `TestNewExponentialBackOff`: options read back: initial 1 s, multiplier
/// 2.0, max interval 10 s, max elapsed 30 s.
#[test]
fn test_new_exponential_back_off() {
    let policy = Policy::builder()
        .with_initial(Duration::from_secs(1))
        .with_multiplier(2.0)
        .with_max_interval(Duration::from_secs(10))
        .with_max_elapsed(Duration::from_secs(30))
        .build()
        .unwrap();
    assert_eq!(policy.backoff().initial(), Duration::from_secs(1));
    assert_eq!(policy.backoff().multiplier(), 2.0);
    assert_eq!(policy.backoff().max_interval(), Duration::from_secs(10));
    assert_eq!(policy.max_elapsed(), Duration::from_secs(30));
}

/// `TestMaxElapsedTime`: an operation still running after the chain's
/// `MaxElapsedTime` (15 min) gets no further attempt. Ours cuts the attempt
/// in flight at 900 s exactly (`MaxElapsedExceeded`, 1 attempt).
#[tokio::test(start_paused = true)]
async fn test_max_elapsed_time() {
    let policy = Policy::builder()
        .with_max_elapsed(Duration::from_secs(900))
        .build()
        .unwrap();
    let calls = AtomicU32::new(0);
    let started = tokio::time::Instant::now();
    let err = policy
        .retry(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<Result<(), OpError>>()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            OpError::Runtime(resilience::Error::MaxElapsedExceeded { .. })
        ),
        "{err:?}"
    );
    assert_eq!(started.elapsed(), Duration::from_secs(900));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// `retry_test.go` `TestRetry` and `TestRetryWithData`: an operation that
/// fails until its 3rd call succeeds with its value after exactly 3 calls.
#[tokio::test(start_paused = true)]
async fn test_retry_with_data() {
    let policy = Policy::builder().with_max_attempts(5).build().unwrap();
    let calls = AtomicU32::new(0);
    let value = policy
        .retry(|| async {
            match calls.fetch_add(1, Ordering::SeqCst) + 1 {
                n if n < 3 => Err(OpError::Eof),
                _ => Ok(42),
            }
        })
        .await
        .unwrap();
    assert_eq!(value, 42);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

/// `TestRetryContext`: the context is cancelled during the 3rd call, which
/// fails: the chain ends with the context's error after exactly 3 calls.
/// Ours: the caller's deadline passes during the 3rd attempt
/// (`DeadlineExceeded`), with a constant 1 ms pause (the closest to
/// `ConstantBackOff(1ms)` our jitter floor allows).
#[tokio::test(start_paused = true)]
async fn test_retry_context() {
    let policy = Policy::builder()
        .with_initial(ms(1))
        .with_multiplier(1.0)
        .with_max_interval(ms(1))
        .with_max_attempts(10)
        .build()
        .unwrap();
    let calls = AtomicU32::new(0);
    let err = resilience::deadline::with_timeout(ms(100), async {
        policy
            .retry(|| async {
                if calls.fetch_add(1, Ordering::SeqCst) + 1 == 3 {
                    // The caller's context ends while this attempt runs.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err::<(), _>(OpError::Eof)
            })
            .await
    })
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            OpError::Runtime(resilience::Error::DeadlineExceeded { .. })
        ),
        "{err:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

/// `TestRetryPermanent`, with `maxRetries = 1` (2 calls): `io.EOF` is
/// retried; `Permanent(io.EOF)`, wrapped or not, is not.
#[tokio::test(start_paused = true)]
async fn test_retry_permanent() {
    let policy = Policy::builder().with_max_attempts(2).build().unwrap();
    for (name, first, should_retry) in [
        ("io.EOF", (|| OpError::Eof) as fn() -> OpError, true),
        ("Permanent(io.EOF)", || OpError::Permanent, false),
    ] {
        let calls = AtomicU32::new(0);
        let err = policy
            .retry(|| async {
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0 => Err::<(), _>(first()),
                    _ => Err(OpError::Permanent),
                }
            })
            .await
            .unwrap_err();
        let expected = if should_retry { 2 } else { 1 };
        assert_eq!(calls.load(Ordering::SeqCst), expected, "{name}");
        assert!(
            matches!(err, OpError::Permanent | OpError::Eof),
            "{name}: {err:?}"
        );
    }
}

/// `context_test.go` `TestContext`: once the context is done no further
/// attempt starts. Ours: a deadline already passed starts none.
#[tokio::test(start_paused = true)]
async fn test_context() {
    let calls = AtomicU32::new(0);
    let err = resilience::deadline::with_timeout(Duration::ZERO, async {
        Policy::http()
            .retry(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(OpError::Eof)
            })
            .await
    })
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            OpError::Runtime(resilience::Error::DeadlineExceeded { .. })
        ),
        "{err:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// `tries_test.go` `TestMaxTriesHappy`: `WithMaxRetries(b, max)` with max
/// in 17..=29 allows exactly max retries, max + 1 calls (a 1 ms pause:
/// ours refuses a zero backoff).
#[tokio::test(start_paused = true)]
async fn test_max_tries_happy() {
    for max in 17..=29 {
        let policy = Policy::builder()
            .with_initial(ms(1))
            .with_multiplier(1.0)
            .with_max_interval(ms(1))
            .with_max_attempts(max + 1)
            .build()
            .unwrap();
        let calls = AtomicU32::new(0);
        let _ = policy
            .retry(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(OpError::Eof)
            })
            .await;
        assert_eq!(calls.load(Ordering::SeqCst), max + 1, "max retries {max}");
    }
}

/// `TestMaxTriesZero`: no retry allowed: one call, and its error.
#[tokio::test(start_paused = true)]
async fn test_max_tries_zero() {
    let policy = Policy::builder().with_max_attempts(1).build().unwrap();
    let calls = AtomicU32::new(0);
    let err = policy
        .retry(|| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(OpError::Eof)
        })
        .await
        .unwrap_err();
    assert!(matches!(err, OpError::Eof), "{err:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
