//! Hedged calls (`Policy::hedge`) on tokio's paused clock: what the caller
//! gets, when, and how many attempts reached the dependency.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use resilience_runtime::breaker::{BreakerConfig, CircuitBreaker};
use resilience_runtime::retry::{Budget, BudgetConfig, Classify, Hedge, Policy, Verdict};
use resilience_runtime::{Error, deadline};
use tokio::time::{Instant, sleep};

#[derive(Debug, Clone, PartialEq)]
enum Failure {
    Unavailable,
    BadRequest,
    Runtime(Error),
}

impl From<Error> for Failure {
    fn from(err: Error) -> Self {
        Failure::Runtime(err)
    }
}

impl Classify for Failure {
    fn classify(&self) -> Verdict {
        match self {
            Failure::Unavailable => Verdict::Transient,
            Failure::BadRequest => Verdict::Permanent,
            Failure::Runtime(err) => err.classify(),
        }
    }
}

/// Counts the attempts dropped before they finished.
struct Dropped<'a>(&'a AtomicUsize, bool);

impl Drop for Dropped<'_> {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// One attempt: answers `answer` after `after`, marking itself finished.
async fn attempt(
    after: Duration,
    answer: Result<&'static str, Failure>,
    dropped: &AtomicUsize,
) -> Result<&'static str, Failure> {
    let mut guard = Dropped(dropped, false);
    sleep(after).await;
    guard.1 = true;
    answer
}

fn hedge(delay_ms: u64, max: u32) -> Hedge {
    Hedge::new("hedge-test", Duration::from_millis(delay_ms), max).unwrap()
}

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn a_slow_first_answer_is_overtaken_by_the_hedge_and_dropped() {
    let (calls, dropped) = (Cell::new(0), AtomicUsize::new(0));
    let start = Instant::now();
    let answer = Policy::http()
        .hedge(hedge(50, 2), || {
            calls.set(calls.get() + 1);
            let after = if calls.get() == 1 { 1000 * MS } else { 10 * MS };
            attempt(after, Ok("fast"), &dropped)
        })
        .await;
    assert_eq!(answer, Ok("fast"));
    assert_eq!(start.elapsed(), 60 * MS, "delay + the second's 10 ms");
    assert_eq!(calls.get(), 2);
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "the slow attempt was dropped"
    );
}

#[tokio::test(start_paused = true)]
async fn a_fast_answer_starts_no_hedge() {
    let (calls, dropped) = (Cell::new(0), AtomicUsize::new(0));
    let answer = Policy::http()
        .hedge(hedge(50, 3), || {
            calls.set(calls.get() + 1);
            attempt(20 * MS, Ok("first"), &dropped)
        })
        .await;
    assert_eq!((answer, calls.get()), (Ok("first"), 1));
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_is_the_answer_and_ends_the_call() {
    let (calls, dropped) = (Cell::new(0), AtomicUsize::new(0));
    let start = Instant::now();
    // The first hangs; the hedge answers 400, which stands.
    let answer = Policy::http()
        .hedge(hedge(50, 3), || {
            calls.set(calls.get() + 1);
            match calls.get() {
                1 => attempt(1000 * MS, Ok("late"), &dropped),
                _ => attempt(10 * MS, Err(Failure::BadRequest), &dropped),
            }
        })
        .await;
    assert_eq!(answer, Err(Failure::BadRequest));
    assert_eq!((start.elapsed(), calls.get()), (60 * MS, 2));
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_starts_the_next_attempt_at_once() {
    let (calls, dropped) = (Cell::new(0), AtomicUsize::new(0));
    let start = Instant::now();
    let answer = Policy::http()
        .hedge(hedge(50, 3), || {
            calls.set(calls.get() + 1);
            match calls.get() {
                1 => attempt(5 * MS, Err(Failure::Unavailable), &dropped),
                _ => attempt(5 * MS, Ok("second"), &dropped),
            }
        })
        .await;
    assert_eq!(answer, Ok("second"));
    assert_eq!((start.elapsed(), calls.get()), (10 * MS, 2));
}

#[tokio::test(start_paused = true)]
async fn when_every_attempt_fails_the_caller_gets_the_last_failure() {
    let (calls, dropped) = (Cell::new(0), AtomicUsize::new(0));
    let answer = Policy::http()
        .hedge(hedge(50, 3), || {
            calls.set(calls.get() + 1);
            attempt(5 * MS, Err(Failure::Unavailable), &dropped)
        })
        .await;
    assert_eq!((answer, calls.get()), (Err(Failure::Unavailable), 3));
}

#[tokio::test(start_paused = true)]
async fn attempts_that_hang_are_cut_by_max_elapsed() {
    let (calls, dropped) = (Cell::new(0), AtomicUsize::new(0));
    let policy = Policy::builder()
        .with_max_elapsed(Duration::from_secs(2))
        .build()
        .unwrap();
    let start = Instant::now();
    let answer = policy
        .hedge(hedge(100, 3), || {
            calls.set(calls.get() + 1);
            attempt(Duration::from_secs(3600), Ok("never"), &dropped)
        })
        .await;
    assert_eq!(
        answer,
        Err(Failure::Runtime(Error::max_elapsed_exceeded(
            Duration::from_secs(2),
            3
        )))
    );
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    assert_eq!(dropped.load(Ordering::SeqCst), 3, "all three dropped");
}

#[tokio::test(start_paused = true)]
async fn the_callers_deadline_cuts_the_hedged_call() {
    let dropped = AtomicUsize::new(0);
    let answer = deadline::with_timeout(
        Duration::from_millis(120),
        Policy::http().hedge(hedge(50, 3), || {
            attempt(Duration::from_secs(3600), Ok("never"), &dropped)
        }),
    )
    .await;
    assert_eq!(answer, Err(Failure::Runtime(Error::deadline_exceeded(3))));
}

/// A dependency that is down, every answer slow and then unavailable:
/// without a budget each call makes `max` attempts; with one, the hedges
/// stop once it is empty.
#[tokio::test(start_paused = true)]
async fn hedges_stop_when_the_retry_budget_is_empty() {
    async fn load(policy: Policy) -> usize {
        let (requests, dropped) = (Cell::new(0), AtomicUsize::new(0));
        for _ in 0..100 {
            let answer = policy
                .hedge(hedge(50, 3), || {
                    requests.set(requests.get() + 1);
                    attempt(80 * MS, Err(Failure::Unavailable), &dropped)
                })
                .await;
            assert_eq!(answer, Err(Failure::Unavailable));
        }
        requests.get()
    }
    assert_eq!(load(Policy::http()).await, 300);
    let budget: &'static Budget = Box::leak(Box::new(
        BudgetConfig::new()
            .with_ratio(0.2)
            .with_min_per_second(0)
            .build()
            .unwrap(),
    ));
    let budgeted = load(Policy::http().with_budget(budget)).await;
    println!(
        "100 calls to a dependency that is down: 300 requests without a budget, {budgeted} with a 20 % one"
    );
    // 100 calls, plus at most 20 % of them as hedges.
    assert!((100..=120).contains(&budgeted), "{budgeted}");
}

/// The breaker counts one outcome per hedged call, whatever the attempts.
#[tokio::test(start_paused = true)]
async fn a_breaker_around_a_hedged_call_counts_it_once() {
    let breaker = CircuitBreaker::new("hedge-breaker", BreakerConfig::new()).unwrap();
    let dropped = AtomicUsize::new(0);
    for _ in 0..5 {
        let answer = breaker
            .call(Policy::http().hedge(hedge(50, 3), || {
                attempt(5 * MS, Err(Failure::Unavailable), &dropped)
            }))
            .await;
        assert_eq!(answer, Err(Failure::Unavailable));
    }
    let snapshot = breaker.snapshot();
    assert_eq!((snapshot.calls, snapshot.failures), (5, 5));
}

#[test]
fn every_value_is_checked_and_named() {
    let err = Hedge::new("h", Duration::ZERO, 2).unwrap_err();
    assert_eq!((err.field(), err.value()), ("delay", "0ns"));
    let err = Hedge::new("h", MS, 11).unwrap_err();
    assert_eq!((err.field(), err.value()), ("max", "11"));
    assert!(err.to_string().contains("hedge `h`"), "{err}");
}

/// One retrying layer: a hedged call inside a retry chain's attempt makes
/// one attempt per outer attempt (the outer chain does the retrying), and
/// a retry chain inside a hedged attempt makes one attempt per hedge.
#[tokio::test(start_paused = true)]
async fn a_hedged_call_and_a_retry_chain_nested_in_each_other_retry_at_one_layer() {
    // Down: every attempt fails after 50 ms, longer than the hedge delay.
    let calls = Cell::new(0);
    let down = || {
        calls.set(calls.get() + 1);
        async {
            sleep(Duration::from_millis(50)).await;
            Err::<&str, _>(Failure::Unavailable)
        }
    };
    // Inside a chain of 3 attempts: 3 requests, not 3 × 3.
    let http = Policy::http();
    let outer = http.retry(|| http.hedge(hedge(10, 3), down)).await;
    assert_eq!(outer, Err(Failure::Unavailable));
    assert_eq!(calls.get(), 3);

    // A retry chain in each hedged attempt: one attempt per hedge.
    calls.set(0);
    let inner = || Policy::http().retry(down);
    let hedged = http.hedge(hedge(10, 3), inner).await;
    assert_eq!(hedged, Err(Failure::Unavailable));
    assert_eq!(calls.get(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_hedged_call_whose_deadline_has_passed_sends_nothing() {
    let calls = Cell::new(0);
    let result = deadline::with_timeout(Duration::ZERO, async {
        Policy::http()
            .hedge(hedge(10, 3), || {
                calls.set(calls.get() + 1);
                async { Ok::<_, Failure>("never") }
            })
            .await
    })
    .await;
    assert_eq!(result, Err(Failure::Runtime(Error::deadline_exceeded(0))));
    assert_eq!(calls.get(), 0);
}
