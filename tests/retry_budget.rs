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

/// Deposits leave the window `ttl` after they were made, whether or not
/// anything was withdrawn meanwhile (Finagle's `RetryBudget`, tower's
/// `tps_leaky`): after a quiet minute the calls before it pay for nothing,
/// and the failing calls themselves earn 20 % of a retry each.
#[tokio::test(start_paused = true)]
async fn a_call_after_a_quiet_spell_finds_an_empty_budget() {
    let budget = leak(BudgetConfig::new().with_min_per_second(0));
    let policy = Policy::http().with_budget(budget);
    for _ in 0..20 {
        policy.retry(|| async { Ok::<_, Down>(()) }).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
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
    // The fifth and the tenth call find a whole retry (20 % of 5 and of 10
    // calls): 10 attempts and 2 retries.
    assert_eq!(per_call, [1, 1, 1, 1, 2, 1, 1, 1, 1, 2]);
}

#[resilience::retry(max = 3, initial = "100ms", budget = "after-a-quiet-spell")]
async fn get(down: bool, requests: Arc<AtomicU64>) -> Result<(), Down> {
    requests.fetch_add(1, Ordering::Relaxed);
    tokio::task::yield_now().await;
    if down { Err(Down) } else { Ok(()) }
}

/// The case through the attribute: 10,000 healthy calls over an
/// hour, a quiet minute, then 10 s of calls at 100/s to a dependency that
/// answers 503. Finagle's rule (20 % of the last 10 s of calls, plus 10
/// retries a second) allows at most 300 retries for those 1,000 calls:
/// 1.3 requests per call, where the hour's deposits used to allow 3.
#[tokio::test(start_paused = true)]
async fn an_hour_of_healthy_calls_does_not_pay_for_an_outage_after_a_quiet_minute() {
    let requests = Arc::new(AtomicU64::new(0));
    for _ in 0..10_000 {
        get(false, Arc::clone(&requests)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(360)).await;
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    requests.store(0, Ordering::Relaxed);
    let mut calls = tokio::task::JoinSet::new();
    for tick in 0..100u64 {
        for _ in 0..10 {
            let requests = Arc::clone(&requests);
            calls.spawn(async move {
                tokio::time::sleep(Duration::from_millis(tick * 100)).await;
                get(true, requests).await
            });
        }
    }
    let mut logical = 0;
    while let Some(call) = calls.join_next().await {
        assert!(call.unwrap().is_err());
        logical += 1;
    }
    let per_call = requests.load(Ordering::Relaxed) as f64 / f64::from(logical);
    println!("requests per call in the first ttl of an outage after a quiet minute: {per_call:.3}");
    // 20 % of the calls and 10 retries a second, over the 10 s of calls
    // and the half second their last retries take: 1.31 at most.
    assert!(per_call <= 1.31, "{per_call}");
    assert!(
        per_call > 1.1,
        "the budget is spent, not hoarded: {per_call}"
    );
}
