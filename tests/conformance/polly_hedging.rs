//! Polly v8's hedging (App-vNext/Polly at 173d6d1):
//! `test/Polly.Core.Tests/Hedging/HedgingResilienceStrategyTests.cs` and
//! `HedgingStrategyOptionsTests.cs`, against
//! `Policy::hedge(Hedge::new(name, delay, max), op)`.
//!
//! The mapping: Polly's `MaxHedgedAttempts = k` is our `max = k + 1` (ours
//! counts the first attempt, as gRPC's `maxAttempts`); an exception its
//! `ShouldHandle` accepts is an error whose verdict is transient (the next
//! attempt starts at once), one it does not is a permanent error (the
//! call ends with it); the `ActionGenerator`'s n-th action is the n-th
//! call of `op`; the caller's cancellation is a
//! [`deadline`](resilience::deadline); `TimeProvider.Advance` is tokio's
//! paused clock. Every hedged call is bounded by the policy's
//! `max_elapsed` (5 s by default), so the ports of tests with hour and day
//! delays set a longer one.
//!
//! How we differ, deliberately:
//!
//! - **When every attempt fails, the caller gets the last failure**;
//!   Polly returns the primary's (`ShouldThrowLastException` expects the
//!   first exception). The last one to arrive is the freshest word on the
//!   dependency, and a retry chain returns its last failure too.
//! - **`max` counts the first attempt and is 2 to 10** (Polly: 1 to 10
//!   hedges, so 11 attempts at most): each attempt is one more request in
//!   flight.
//! - **The delay is at least 1 ms**: Polly's parallel mode (`Delay = 0`)
//!   sends every call `max` times at once, and its fallback mode
//!   (`Delay < 0`) is a retry (`Policy::retry`). Neither is expressible.
//! - **No per-attempt hook or delay generator**: each hedge is counted in
//!   `http_client_hedges_total` instead of an `OnHedging` callback.
//!
//! Not ported: Polly's context, property and telemetry tests, the
//! cancellation-token identity checks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use resilience::deadline;
use resilience::retry::{Classify, Hedge, Policy, Verdict};
use tokio::time::{Instant, sleep};

/// An exception of Polly's tests: one `ShouldHandle` accepts (the next
/// attempt starts), one it does not (returned at once), or the runtime's.
#[derive(Debug)]
enum Exception {
    Handled(&'static str),
    NotHandled(&'static str),
    Runtime(resilience::Error),
}

impl Classify for Exception {
    fn classify(&self) -> Verdict {
        match self {
            Exception::Handled(_) => Verdict::Transient,
            Exception::NotHandled(_) => Verdict::Permanent,
            Exception::Runtime(error) => error.classify(),
        }
    }
}

impl From<resilience::Error> for Exception {
    fn from(error: resilience::Error) -> Self {
        Exception::Runtime(error)
    }
}

const SECOND: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// A policy whose `max_elapsed` does not cut the test's timeline.
fn policy(max_elapsed: Duration) -> Policy {
    Policy::builder()
        .with_max_elapsed(max_elapsed)
        .build()
        .unwrap()
}

/// Counts the attempts dropped before they finished (Polly's "observed
/// cancellation").
#[derive(Clone, Default)]
struct Cancellations(Arc<AtomicUsize>);

struct Running {
    cancelled: Cancellations,
    done: bool,
}

impl Cancellations {
    fn start(&self) -> Running {
        Running {
            cancelled: self.clone(),
            done: false,
        }
    }

    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.done {
            self.cancelled.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// An attempt that waits `after`, then gives `result`, counting itself
/// cancelled if dropped before.
async fn attempt<T>(
    cancelled: Cancellations,
    after: Duration,
    result: Result<T, Exception>,
) -> Result<T, Exception> {
    let mut running = cancelled.start();
    sleep(after).await;
    running.done = true;
    result
}

/// `HedgingStrategyOptionsTests.Validation` and `Ctor_EnsureDefaults`:
/// `MaxHedgedAttempts` 1 to 10 hedges, here `max` 2 to 10 attempts in all;
/// Polly's defaults (2 s, one hedge) are `Hedge::new(name, 2 s, 2)`.
#[test]
fn validation_and_defaults() {
    let defaults = Hedge::new("Hedging", 2 * SECOND, 2).unwrap();
    assert_eq!(
        (defaults.delay(), defaults.max()),
        (2 * SECOND, 1 + 1),
        "MaxHedgedAttempts 1 is 2 attempts in all"
    );
    // MaxHedgedAttempts −1 and 0 are refused by both; Polly's 10 hedges
    // (11 attempts) is ours refused, a deliberate difference.
    for max in [0, 1, 11] {
        let err = Hedge::new("Hedging", 2 * SECOND, max).unwrap_err();
        assert_eq!(err.field(), "max", "{max}");
    }
    assert_eq!(Hedge::new("Hedging", 2 * SECOND, 10).unwrap().max(), 10);
    // Polly's `Delay = 0` (parallel mode) is refused.
    let err = Hedge::new("Hedging", Duration::ZERO, 2).unwrap_err();
    assert_eq!(err.field(), "delay");
    assert!(Hedge::new("Hedging", Duration::from_millis(1), 2).is_ok());
}

/// `Execute_CancellationRequested_Throws`: cancelled before it starts,
/// the call fails and the action never runs.
#[tokio::test(start_paused = true)]
async fn execute_cancellation_requested_throws() {
    let calls = AtomicU32::new(0);
    let hedge = Hedge::new("cancelled", SECOND, 3).unwrap();
    let result = deadline::with_timeout(
        Duration::ZERO,
        policy(HOUR).hedge(hedge, || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Exception>("Success") }
        }),
    )
    .await;
    assert!(
        matches!(
            result,
            Err(Exception::Runtime(resilience::Error::DeadlineExceeded {
                attempts: 0,
                ..
            }))
        ),
        "{result:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// `ExecuteAsync_ShouldReturnAnyPossibleResult`: the primary takes a day,
/// three hedges (Delay 1 s) take 10 s ("Apples"), 2 s ("Oranges") and 3 s
/// ("Pears"); "Oranges" wins at t = 1 + 1 + 2 = 4 s.
#[tokio::test(start_paused = true)]
async fn execute_async_should_return_any_possible_result() {
    let calls = AtomicU32::new(0);
    let cancelled = Cancellations::default();
    let started = Instant::now();
    let hedge = Hedge::new("fruit", SECOND, 3 + 1).unwrap();
    let result = policy(DAY)
        .hedge(hedge, || {
            let (after, fruit) = match calls.fetch_add(1, Ordering::SeqCst) {
                0 => (DAY, "Primary"),
                1 => (10 * SECOND, "Apples"),
                2 => (2 * SECOND, "Oranges"),
                _ => (3 * SECOND, "Pears"),
            };
            attempt(cancelled.clone(), after, Ok(fruit))
        })
        .await;
    assert_eq!(result.unwrap(), "Oranges");
    assert_eq!(started.elapsed(), 4 * SECOND);
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    // The primary, "Apples" and "Pears" are dropped.
    assert_eq!(cancelled.count(), 3);
}

/// `ExecuteAsync_EnsureHedgedTasksCancelled_Ok`: MaxHedgedAttempts 2,
/// Delay 1 s; the primary answers "Success" after an hour, the hedges
/// would answer "Failure" after a day; the primary wins and both hedges
/// observe their cancellation.
#[tokio::test(start_paused = true)]
async fn execute_async_ensure_hedged_tasks_cancelled_ok() {
    let calls = AtomicU32::new(0);
    let primary = Cancellations::default();
    let hedges = Cancellations::default();
    let started = Instant::now();
    let hedge = Hedge::new("hedged-cancelled", SECOND, 2 + 1).unwrap();
    let result = policy(2 * HOUR)
        .hedge(hedge, || {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                attempt(primary.clone(), HOUR, Ok("Success"))
            } else {
                attempt(hedges.clone(), DAY, Ok("Failure"))
            }
        })
        .await;
    assert_eq!(result.unwrap(), "Success");
    assert_eq!(started.elapsed(), HOUR);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!((primary.count(), hedges.count()), (0, 2));
}

/// `ExecuteAsync_EnsurePrimaryTaskCancelled_Ok`: Delay 1 s,
/// MaxHedgedAttempts 3; the primary takes a day, every hedge answers
/// "Success" after an hour; the first hedge wins and the primary observes
/// its cancellation.
#[tokio::test(start_paused = true)]
async fn execute_async_ensure_primary_task_cancelled_ok() {
    let calls = AtomicU32::new(0);
    let primary = Cancellations::default();
    let hedges = Cancellations::default();
    let started = Instant::now();
    let hedge = Hedge::new("primary-cancelled", SECOND, 3 + 1).unwrap();
    let result = policy(2 * HOUR)
        .hedge(hedge, || {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                attempt(primary.clone(), DAY, Ok("Primary"))
            } else {
                attempt(hedges.clone(), HOUR, Ok("Success"))
            }
        })
        .await;
    assert_eq!(result.unwrap(), "Success");
    assert_eq!(started.elapsed(), HOUR + SECOND);
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    // The primary and the two later hedges.
    assert_eq!((primary.count(), hedges.count()), (1, 2));
}

/// The n-th call of `op` fails at once with `outcomes[n]`.
async fn run_failing(max: u32, outcomes: &[fn() -> Exception]) -> (Result<(), Exception>, u32) {
    let calls = AtomicU32::new(0);
    let hedge = Hedge::new("exceptions", SECOND, max).unwrap();
    let result = policy(HOUR)
        .hedge(hedge, || {
            let n = calls.fetch_add(1, Ordering::SeqCst) as usize;
            let outcome = outcomes[n]();
            async move { Err::<(), _>(outcome) }
        })
        .await;
    (result, calls.load(Ordering::SeqCst))
}

/// `ExecuteAsync_ExceptionsHandled_ShouldThrowAnyException`: InvalidCast,
/// Argument and InvalidOperation are handled, BadImageFormat is not; the
/// primary and two hedges throw the handled ones, the third hedge
/// BadImageFormat, which the caller gets; three hedges were generated.
#[tokio::test(start_paused = true)]
async fn execute_async_exceptions_handled_should_throw_any_exception() {
    let (result, calls) = run_failing(
        3 + 1,
        &[
            || Exception::Handled("InvalidCast"),
            || Exception::Handled("Argument"),
            || Exception::Handled("InvalidOperation"),
            || Exception::NotHandled("BadImageFormat"),
        ],
    )
    .await;
    assert!(
        matches!(result, Err(Exception::NotHandled("BadImageFormat"))),
        "{result:?}"
    );
    assert_eq!(calls, 1 + 3);
}

/// `ExecuteAsync_ExceptionsHandled_ShouldThrowLastException`, pinned as
/// ours: all four exceptions handled; Polly returns the primary's
/// (InvalidCast), we return the last failure (BadImageFormat, module
/// docs). Three hedges either way.
#[tokio::test(start_paused = true)]
async fn execute_async_exceptions_handled_returns_the_last_failure_where_polly_returns_the_first() {
    let (result, calls) = run_failing(
        3 + 1,
        &[
            || Exception::Handled("InvalidCast"),
            || Exception::Handled("Argument"),
            || Exception::Handled("InvalidOperation"),
            || Exception::Handled("BadImageFormat"),
        ],
    )
    .await;
    assert!(
        matches!(result, Err(Exception::Handled("BadImageFormat"))),
        "{result:?}"
    );
    assert_eq!(calls, 1 + 3);
}

/// `ExecuteAsync_PrimaryExceptionNotHandled_Rethrow`: the primary throws
/// InvalidCast, only InvalidOperation is handled: rethrown, no hedge.
#[tokio::test(start_paused = true)]
async fn execute_async_primary_exception_not_handled_rethrow() {
    let (result, calls) = run_failing(2 + 1, &[|| Exception::NotHandled("InvalidCast")]).await;
    assert!(
        matches!(result, Err(Exception::NotHandled("InvalidCast"))),
        "{result:?}"
    );
    assert_eq!(calls, 1, "the action generator is never called");
}

/// `ExecuteAsync_ExceptionsHandled_ShouldReturnLastResult`: the primary
/// and two hedges throw handled exceptions, the third hedge answers
/// "Success".
#[tokio::test(start_paused = true)]
async fn execute_async_exceptions_handled_should_return_last_result() {
    let calls = AtomicU32::new(0);
    let hedge = Hedge::new("last-result", SECOND, 3 + 1).unwrap();
    let result = policy(HOUR)
        .hedge(hedge, || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                match n {
                    0 => Err(Exception::Handled("InvalidCast")),
                    1 => Err(Exception::Handled("Argument")),
                    2 => Err(Exception::Handled("InvalidOperation")),
                    _ => Ok("Success"),
                }
            }
        })
        .await;
    assert_eq!(result.unwrap(), "Success");
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

/// `ExecuteAsync_AllAttemptsFailAndTheOriginalCallIsTheSlowest_EnsureOriginalCallsResultReturned`
/// (its Delay = 1 s case; 0 and −1 are not expressible): MaxHedgedAttempts
/// 2, every attempt answers a handled "1st" after 200 ms; "1st" comes back.
#[tokio::test(start_paused = true)]
async fn execute_async_all_attempts_fail_ensure_original_calls_result_returned() {
    let calls = AtomicU32::new(0);
    let cancelled = Cancellations::default();
    let hedge = Hedge::new("slowest", SECOND, 2 + 1).unwrap();
    let result = policy(HOUR)
        .hedge(hedge, || {
            calls.fetch_add(1, Ordering::SeqCst);
            attempt::<()>(
                cancelled.clone(),
                Duration::from_millis(200),
                Err(Exception::Handled("1st")),
            )
        })
        .await;
    assert!(
        matches!(result, Err(Exception::Handled("1st"))),
        "{result:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(cancelled.count(), 0);
}

/// `ExecuteAsync_EnsureHedgingDelayGeneratorRespected`, without a
/// generator (ours has a fixed delay): Delay 12 345 ms; the primary would
/// throw an unhandled InvalidCast after a day, the hedge answers
/// "Success": it starts, and wins, at 12 345 ms.
#[tokio::test(start_paused = true)]
async fn execute_async_ensure_hedging_delay_respected() {
    let calls = AtomicU32::new(0);
    let cancelled = Cancellations::default();
    let started = Instant::now();
    let hedge = Hedge::new("delay", Duration::from_millis(12_345), 2).unwrap();
    let result = policy(5 * HOUR)
        .hedge(hedge, || {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                attempt(
                    cancelled.clone(),
                    DAY,
                    Err(Exception::NotHandled("InvalidCast")),
                )
            } else {
                attempt(cancelled.clone(), Duration::ZERO, Ok("Success"))
            }
        })
        .await;
    assert_eq!(result.unwrap(), "Success");
    assert_eq!(started.elapsed(), Duration::from_millis(12_345));
    assert_eq!(cancelled.count(), 1);
}

/// `ExecuteAsync_EnsureOnHedgingCalled`: the primary and the hedges all
/// answer a handled "Failure"; with MaxHedgedAttempts 3, `OnHedging` is
/// called 3 times: here `http_client_hedges_total` counts 3.
#[cfg(feature = "metrics")]
#[tokio::test(start_paused = true)]
async fn execute_async_ensure_on_hedging_called() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let calls = AtomicU32::new(0);
    let hedge = Hedge::new("polly_on_hedging", SECOND, 3 + 1).unwrap();
    let result = policy(HOUR)
        .hedge(hedge, || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>(Exception::Handled("Failure")) }
        })
        .await;
    assert!(
        matches!(result, Err(Exception::Handled("Failure"))),
        "{result:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    let text = handle.render();
    let hedges = text
        .lines()
        .find(|line| {
            line.starts_with("http_client_hedges_total{") && line.contains("polly_on_hedging")
        })
        .and_then(|line| line.rsplit(' ').next()?.parse::<f64>().ok());
    assert_eq!(hedges, Some(3.0), "{text}");
}

/// `ExecuteAsync_ZeroHedgingDelay_EnsureAllTasksSpawnedAtOnce`, pinned as
/// ours: a zero delay is refused (see `validation_and_defaults`); the
/// shortest, 1 ms, starts all `max` attempts within (max − 1) ms, before
/// any of them answers.
#[tokio::test(start_paused = true)]
async fn the_shortest_delay_starts_every_attempt_before_any_answers() {
    let starts = std::sync::Mutex::new(Vec::new());
    let origin = Instant::now();
    let cancelled = Cancellations::default();
    let hedge = Hedge::new("parallel", Duration::from_millis(1), 10).unwrap();
    let result = policy(HOUR)
        .hedge(hedge, || {
            let mut starts = starts.lock().unwrap();
            starts.push(origin.elapsed());
            let answer = if starts.len() == 10 {
                Ok("Success")
            } else {
                Err(Exception::Handled("Failure"))
            };
            attempt(cancelled.clone(), SECOND, answer)
        })
        .await;
    assert_eq!(result.unwrap(), "Success");
    let starts = starts.into_inner().unwrap();
    let expected: Vec<Duration> = (0..10).map(Duration::from_millis).collect();
    assert_eq!(starts, expected);
    // The first nine answer first, and fail: nothing was left to cancel.
    assert_eq!(cancelled.count(), 0);
}

/// `ExecuteAsync_CancellationLinking_Ok`: MaxHedgedAttempts 2; the primary
/// takes a day, the hedges 12 h; the caller cancels after 4 h: the call
/// fails, and the primary and both hedges observe their cancellation.
#[tokio::test(start_paused = true)]
async fn execute_async_cancellation_linking_ok() {
    let calls = AtomicU32::new(0);
    let cancelled = Cancellations::default();
    let started = Instant::now();
    let hedge = Hedge::new("linking", SECOND, 2 + 1).unwrap();
    let result = deadline::with_timeout(
        4 * HOUR,
        policy(DAY).hedge(hedge, || {
            let after = if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                DAY
            } else {
                12 * HOUR
            };
            attempt(cancelled.clone(), after, Ok("Success"))
        }),
    )
    .await;
    assert!(
        matches!(
            result,
            Err(Exception::Runtime(resilience::Error::DeadlineExceeded {
                attempts: 3,
                ..
            }))
        ),
        "{result:?}"
    );
    assert_eq!(started.elapsed(), 4 * HOUR);
    assert_eq!(cancelled.count(), 3);
}

/// Polly's loop loads the next action as soon as one completes with a
/// handled outcome, without waiting for the rest of the delay: Delay 1 s,
/// the primary fails at 100 ms, the hedge starts at 100 ms and answers.
#[tokio::test(start_paused = true)]
async fn a_handled_failure_starts_the_next_attempt_at_once() {
    let starts = std::sync::Mutex::new(Vec::new());
    let origin = Instant::now();
    let cancelled = Cancellations::default();
    let hedge = Hedge::new("at-once", SECOND, 3).unwrap();
    let result = policy(HOUR)
        .hedge(hedge, || {
            let mut starts = starts.lock().unwrap();
            starts.push(origin.elapsed());
            if starts.len() == 1 {
                attempt(
                    cancelled.clone(),
                    Duration::from_millis(100),
                    Err(Exception::Handled("Failure")),
                )
            } else {
                attempt(cancelled.clone(), Duration::from_millis(50), Ok("Success"))
            }
        })
        .await;
    assert_eq!(result.unwrap(), "Success");
    assert_eq!(origin.elapsed(), Duration::from_millis(150));
    assert_eq!(
        starts.into_inner().unwrap(),
        [Duration::ZERO, Duration::from_millis(100)]
    );
}

/// The last `max` attempt is the last: MaxHedgedAttempts 2 against a
/// dependency that never answers makes 3 attempts, at 0, 1 and 2 s, then
/// waits for them until the policy's `max_elapsed` (5 s) drops them all.
#[tokio::test(start_paused = true)]
async fn max_hedged_attempts_bound_the_attempts() {
    let starts = std::sync::Mutex::new(Vec::new());
    let origin = Instant::now();
    let cancelled = Cancellations::default();
    let hedge = Hedge::new("bounded", SECOND, 2 + 1).unwrap();
    let result = Policy::http()
        .hedge(hedge, || {
            starts.lock().unwrap().push(origin.elapsed());
            attempt(cancelled.clone(), DAY, Ok("never"))
        })
        .await;
    assert!(
        matches!(
            result,
            Err(Exception::Runtime(resilience::Error::MaxElapsedExceeded {
                attempts: 3,
                ..
            }))
        ),
        "{result:?}"
    );
    assert_eq!(origin.elapsed(), 5 * SECOND);
    assert_eq!(
        starts.into_inner().unwrap(),
        [Duration::ZERO, SECOND, 2 * SECOND]
    );
    assert_eq!(cancelled.count(), 3);
}
