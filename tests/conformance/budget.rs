//! The retry budget: Finagle's `RetryBudgetTest` (twitter/finagle
//! `finagle-core/src/test/scala/com/twitter/finagle/service/RetryBudgetTest.scala`
//! at 4feb34c) and tower's `TpsBudget` tests (`tower/src/retry/budget/tps_budget.rs`
//! at 8358ee7), whose design and defaults ours follows.
//!
//! How we differ, deliberately: a budget that never allows a retry
//! (Finagle's `Empty`: no floor and 0 %) is refused when built, since a
//! policy that must never retry says so with `max_attempts = 1`; the share
//! of calls is capped at 10 (1000 %), as Finagle caps it at 1000 (but in
//! per cent).

use std::time::Duration;

use resilience::retry::{Budget, BudgetConfig};
use tokio::time::sleep;

fn leak(config: BudgetConfig) -> &'static Budget {
    Box::leak(Box::new(config.build().unwrap()))
}

/// Finagle's `testBudget` under frozen time: 10,000 × (deposit, try to
/// withdraw); the retries are `floor(10000 × percent) + minRetries`, ± 1.
fn finagle(ttl: Duration, min_per_second: u32, percent: f64) {
    let budget = leak(
        BudgetConfig::new()
            .with_ttl(ttl)
            .with_min_per_second(min_per_second)
            .with_ratio(percent),
    );
    let min_retries = ttl.as_secs() * u64::from(min_per_second);
    assert_eq!(budget.balance(), min_retries);
    if min_retries == 0 {
        assert!(!budget.withdraw());
    }
    let mut retried = 0u64;
    for _ in 0..10_000 {
        budget.deposit();
        if budget.withdraw() {
            retried += 1;
        } else {
            assert_eq!(budget.balance(), 0);
        }
    }
    let expected = (10_000.0 * percent).floor() as u64 + min_retries;
    assert!(
        retried.abs_diff(expected) <= 1,
        "ttl {ttl:?}, min {min_per_second}/s, {percent}: {retried} retries, expected {expected} ± 1"
    );
}

/// `apply minRetriesPerSec=0`.
#[tokio::test(start_paused = true)]
async fn apply_min_retries_per_sec_0() {
    for percent in [
        0.1, 0.5, 0.25, 0.75, 0.99, 0.999, 0.9999, 0.01, 0.001, 0.0001,
    ] {
        finagle(Duration::from_secs(60), 0, percent);
    }
}

/// `apply minRetries=0 maxPercentOver greater than 1.0`.
#[tokio::test(start_paused = true)]
async fn apply_percent_greater_than_one() {
    let budget = leak(
        BudgetConfig::new()
            .with_ttl(Duration::from_secs(60))
            .with_min_per_second(0)
            .with_ratio(2.0),
    );
    assert_eq!(budget.balance(), 0);
    assert!(!budget.withdraw());
    for _ in 0..10_000 {
        budget.deposit();
    }
    assert_eq!(budget.balance(), 20_000);
}

/// `apply with minRetries and maxPercentOver=0`.
#[tokio::test(start_paused = true)]
async fn apply_with_min_retries_and_no_percent() {
    finagle(Duration::from_secs(1), 10, 0.0);
    finagle(Duration::from_secs(2), 5, 0.0);
}

/// `apply with minRetries and maxPercentOver`.
#[tokio::test(start_paused = true)]
async fn apply_with_min_retries_and_percent() {
    finagle(Duration::from_secs(1), 10, 0.1);
    finagle(Duration::from_secs(2), 5, 0.5);
}

/// `apply ttl bounds check`, `apply maxPercentOver bounds`, and `Empty`
/// (refused here, see the module docs).
#[test]
fn bounds_are_checked() {
    let field = |config: BudgetConfig| config.build().unwrap_err().field().to_owned();
    assert_eq!(field(BudgetConfig::new().with_ttl(Duration::ZERO)), "ttl");
    assert_eq!(
        field(BudgetConfig::new().with_ttl(Duration::from_secs(61))),
        "ttl"
    );
    assert_eq!(field(BudgetConfig::new().with_ratio(-1.0)), "ratio");
    assert_eq!(
        field(BudgetConfig::new().with_ratio(0.0).with_min_per_second(0)),
        "min_per_second"
    );
}

/// tower `tps_empty`.
#[tokio::test(start_paused = true)]
async fn tps_empty() {
    let budget = leak(
        BudgetConfig::new()
            .with_ttl(Duration::from_secs(1))
            .with_min_per_second(0)
            .with_ratio(1.0),
    );
    assert!(!budget.withdraw());
}

/// tower `tps_leaky`: a deposit leaves the window after `ttl`, though
/// nothing was withdrawn meanwhile.
#[tokio::test(start_paused = true)]
async fn tps_leaky() {
    let budget = leak(
        BudgetConfig::new()
            .with_ttl(Duration::from_secs(1))
            .with_min_per_second(0)
            .with_ratio(1.0),
    );
    budget.deposit();
    sleep(Duration::from_secs(3)).await;
    assert!(!budget.withdraw());
}

/// tower `tps_slots`, and the same steps at 40 %, where the first deposit
/// having expired is what decides.
#[tokio::test(start_paused = true)]
async fn tps_slots() {
    for (ratio, last) in [(0.5, true), (0.4, false)] {
        let budget = leak(
            BudgetConfig::new()
                .with_ttl(Duration::from_secs(1))
                .with_min_per_second(0)
                .with_ratio(ratio),
        );
        budget.deposit();
        budget.deposit();
        sleep(Duration::from_millis(901)).await;
        // 900 ms later the deposits are still valid.
        assert_eq!(budget.withdraw(), ratio == 0.5);
        sleep(Duration::from_millis(2001)).await; // a blank slate
        budget.deposit();
        sleep(Duration::from_millis(301)).await;
        budget.deposit();
        sleep(Duration::from_millis(801)).await;
        budget.deposit();
        // The first of the three expired; the other two count.
        assert_eq!(budget.withdraw(), last, "at {ratio}");
    }
}

/// tower `tps_reserve`: the floor allows 5 retries in a second of no
/// traffic, not a sixth.
#[tokio::test(start_paused = true)]
async fn tps_reserve() {
    let budget = leak(
        BudgetConfig::new()
            .with_ttl(Duration::from_secs(1))
            .with_min_per_second(5)
            .with_ratio(1.0),
    );
    for _ in 0..5 {
        assert!(budget.withdraw());
    }
    assert!(!budget.withdraw());
}

/// Finagle's rule after a quiet spell: an hour of healthy calls, a quiet
/// minute, and the budget holds only its floor (10/s × 10 s): the calls
/// of an hour ago do not pay for the retries of now.
#[tokio::test(start_paused = true)]
async fn deposits_of_an_hour_ago_do_not_pay_for_retries_now() {
    let budget = leak(BudgetConfig::new());
    for _ in 0..3_600 {
        for _ in 0..3 {
            budget.deposit();
        }
        sleep(Duration::from_secs(1)).await;
    }
    // 20 % of the calls of the last 8 to 10 s (the window moves a tenth
    // of `ttl` at a time, and calls made at the very instant of a bucket
    // boundary may fall on either side of it): 24 to 30 calls.
    let balance = budget.balance();
    assert!((104..=106).contains(&balance), "{balance}");
    sleep(Duration::from_secs(60)).await;
    assert_eq!(budget.balance(), 100, "the floor, nothing more");
}
