//! The retry budget against a dependency that is down: 5 replicas of a
//! service, each with its own budget, under a paused clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use resilience::Error;
use resilience::retry::{Budget, BudgetConfig, Classify, Policy, Verdict};

#[derive(Debug)]
struct Down;

impl Classify for Down {
    fn classify(&self) -> Verdict {
        Verdict::Transient
    }
}

impl From<Error> for Down {
    fn from(_: Error) -> Self {
        Down
    }
}

const REPLICAS: usize = 5;
/// Logical calls per replica and second, for `SECONDS`.
const RATE: u64 = 200;
const SECONDS: u64 = 30;

/// Downstream requests per logical call, over every replica, when each
/// replica's calls draw on `budget(replica)`.
async fn amplification(budget: impl Fn() -> Option<&'static Budget>) -> f64 {
    let requests = Arc::new(AtomicU64::new(0));
    let mut calls = Vec::new();
    for _ in 0..REPLICAS {
        let policy = match budget() {
            Some(budget) => Policy::http().with_budget(budget),
            None => Policy::http(),
        };
        for tick in 0..SECONDS * 10 {
            for _ in 0..RATE / 10 {
                let requests = Arc::clone(&requests);
                calls.push(tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(tick * 100)).await;
                    policy
                        .retry(|| {
                            requests.fetch_add(1, Ordering::Relaxed);
                            async { Err::<(), _>(Down) }
                        })
                        .await
                }));
            }
        }
    }
    let logical = calls.len() as f64;
    for call in calls {
        assert!(call.await.unwrap().is_err());
    }
    requests.load(Ordering::Relaxed) as f64 / logical
}

fn leak(config: BudgetConfig) -> &'static Budget {
    Box::leak(Box::new(config.build().unwrap()))
}

#[tokio::test(start_paused = true)]
async fn a_budget_caps_the_load_on_a_dependency_that_is_down() {
    let without = amplification(|| None).await;
    let with_default = amplification(|| Some(leak(BudgetConfig::new()))).await;
    let ratio_only = amplification(|| Some(leak(BudgetConfig::new().with_min_per_second(0)))).await;
    println!(
        "{REPLICAS} replicas × 3 attempts, {RATE} calls/s each for {SECONDS} s, dependency down: \
         downstream requests per logical call: {without:.3} without a budget, \
         {with_default:.3} with the default budget (20 % + 10/s), {ratio_only:.3} with 20 % and no floor"
    );
    assert_eq!(without, 3.0);
    // The floor adds at most `min_per_second / RATE` per call.
    assert!(
        with_default <= 1.2 + 10.0 / RATE as f64 + 0.01,
        "{with_default}"
    );
    assert!(ratio_only <= 1.2, "{ratio_only}");
    assert!(
        ratio_only > 1.15,
        "the budget is spent, not hoarded: {ratio_only}"
    );
}

/// Deposits made while nothing was retried are sorted into the window at
/// the next withdrawal, as made then: a failure after a quiet spell finds
/// them, and the budget still runs dry under failures alone.
#[tokio::test(start_paused = true)]
async fn a_call_after_a_quiet_spell_is_retried_until_the_budget_is_empty() {
    let budget = leak(BudgetConfig::new().with_min_per_second(0));
    let policy = Policy::http().with_budget(budget);
    for _ in 0..20 {
        policy.retry(|| async { Ok::<_, Down>(()) }).await.unwrap();
    }
    tokio::time::advance(Duration::from_secs(60)).await;
    let mut per_call = Vec::new();
    for _ in 0..10 {
        let mut attempts = 0;
        let result = policy
            .retry(|| {
                attempts += 1;
                async { Err::<(), _>(Down) }
            })
            .await;
        assert!(result.is_err());
        per_call.push(attempts);
    }
    // 20 % of the 20 quiet calls and of the failing calls themselves.
    assert_eq!(per_call[0], 3);
    assert_eq!(per_call.iter().sum::<u32>(), 10 + 6, "{per_call:?}");
    assert!(
        per_call.contains(&1),
        "the budget ran dry: one attempt, its error: {per_call:?}"
    );
}
