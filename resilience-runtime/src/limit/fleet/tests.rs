//! The local parts of a fleet limit: lease sizing, a lease's pace and
//! expiry, the fallback share and the return to leasing. The numbers are
//! the module docs' (quota 1,000/s, burst 1,000: a lease lives 600 ms,
//! comes every 550 ms, Redis banks 400 ms of quota).

use std::time::Duration;

use super::stock::{Plan, Stock};
use super::*;

const MS: u64 = 1_000_000;

fn plan() -> Plan {
    Plan::new(Rate::per_second(1000), 1000)
}

#[test]
fn the_plan_follows_the_burst_and_bounds_a_second_at_rate_plus_burst() {
    let plan = plan();
    assert_eq!(plan.life, 600 * MS);
    assert_eq!(plan.period, 550 * MS);
    assert_eq!(plan.timeout, 50 * MS);
    assert_eq!(plan.bank, 400 * MS);
    // Q (1 s + E) + K = Q + B.
    let per_ms = 1.0;
    let bound = per_ms * (1000.0 + 600.0) + (plan.bank / MS) as f64 * per_ms;
    assert_eq!(bound, 1000.0 + 1000.0);
    // Round trips: one per replica per period, five replicas: under 10
    // per 1,000 calls at 95 % of the quota.
    let per_second = 5.0 * 1000.0 / 550.0;
    assert!(per_second / 0.95 < 10.0, "{per_second}");
}

#[test]
fn a_lease_is_a_period_of_the_recent_rate_grown_by_at_most_a_quarter() {
    let plan = plan();
    let period = plan.period;
    // Idle: nothing asked.
    assert_eq!(plan.ask(period, 0, 0, 5, false), 0);
    // Offered 100 calls a period, all admitted: 100 + a tenth.
    assert_eq!(plan.ask(period, 100, 100, 5, false), 110);
    // Offered 400/s, admitted its share (200/s of 1,000 among five): at
    // most 1.25 x the admitted rate, 137.5 a period, plus a tenth.
    assert_eq!(plan.ask(period, 220, 110, 5, false), 152);
    // The same when its last lease came short: the fleet wants more than
    // the quota, so its share (110 a period), plus a tenth.
    assert_eq!(plan.ask(period, 220, 110, 5, true), 121);
    // A replica admitted little may still ask for its share.
    assert_eq!(plan.ask(period, 1000, 10, 5, false), 121);
    // Never more than the burst.
    assert_eq!(plan.ask(period, 100_000, 100_000, 1, false), 1000);
}

#[tokio::test(start_paused = true)]
async fn a_lease_is_spent_at_its_pace_and_void_after_its_life() {
    let plan = plan();
    let mut stock = Stock::new();
    stock.lease(&plan, 100, 0, MS, 0);
    // A quarter at once, then one every 5.5 ms.
    let at_once = (0..100)
        .take_while(|_| stock.take(MS, Priority::Critical, 0).is_ok())
        .count();
    assert_eq!(at_once, 25);
    let refused = stock.take(MS, Priority::Critical, 0).unwrap_err();
    assert_eq!(refused.after, 5_500_000);
    assert!(!refused.empty);
    // Default calls leave the last tenth of the quarter to critical ones.
    let mut stock = Stock::new();
    stock.lease(&plan, 100, 0, 0, 0);
    let default = (0..100)
        .take_while(|_| stock.take(0, Priority::Default, 0).is_ok())
        .count();
    assert_eq!(default, 23);
    assert!(stock.take(0, Priority::Critical, 0).is_ok());
    // Over the period the whole lease is spent, and nothing after its life.
    let mut admitted = 0;
    let mut now = 0;
    while now < 700 * MS {
        if stock.take(now, Priority::Default, 0).is_ok() {
            admitted += 1;
        }
        now += MS / 2;
    }
    assert_eq!(admitted + default + 1, 100);
    let mut stock = Stock::new();
    stock.lease(&plan, 100, 0, 0, 0);
    assert!(
        stock.take(600 * MS, Priority::Critical, 0).is_err(),
        "void at its life's end"
    );
    assert_eq!(stock.held(600 * MS), 0);
}

#[tokio::test(start_paused = true)]
async fn redis_down_the_replica_admits_its_share_alone_then_leases_again() {
    let plan = plan();
    let mut stock = Stock::new();
    stock.lease(&plan, 110, 0, 0, 0);
    // Spent at its pace until the lease period ends.
    let mut now = 0;
    let mut admitted = 0;
    while now < 550 * MS {
        admitted += u32::from(stock.take(now, Priority::Default, 0).is_ok());
        now += MS / 4;
    }
    assert_eq!(admitted, 110);
    // The next request times out: alone at 1,000 / 5 = 200/s, from when
    // the lease's pace ran out, without a saved-up burst.
    stock.alone(&plan, 5, 600 * MS);
    assert!(stock.is_alone());
    let mut per_second = 0;
    let mut now = 600 * MS;
    while now < 1600 * MS {
        per_second += u32::from(stock.take(now, Priority::Default, 0).is_ok());
        now += MS / 4;
    }
    assert_eq!(per_second, 200, "the share: never unlimited, never zero");
    // Still alone a minute later: the same share.
    let mut later = 0;
    let mut now = 60_000 * MS;
    let first = (0..1000)
        .take_while(|_| stock.take(now, Priority::Default, 0).is_ok())
        .count();
    while now < 61_000 * MS {
        now += MS / 4;
        later += u32::from(stock.take(now, Priority::Default, 0).is_ok());
    }
    assert_eq!(
        first, 180,
        "the share's burst (200) but the critical reserve"
    );
    assert_eq!(later, 200);
    // Redis answers: a lease ends deciding alone. Its first quarter (28)
    // counts as taken by the calls admitted alone just before it.
    let alone_before = stock.requested();
    stock.lease(&plan, 110, 61_000 * MS, 61_000 * MS, alone_before);
    assert!(!stock.is_alone());
    let mut leased = 0;
    let mut now = 61_000 * MS;
    while now < 62_000 * MS {
        leased += u32::from(stock.take(now, Priority::Default, 0).is_ok());
        now += MS / 4;
    }
    assert_eq!(leased, 110 - 28, "only the lease, nothing of the share");
}

/// Five replicas coming back from deciding alone must stay within the
/// quota (and at 80 % of it at least) in the second Redis answers again:
/// each within its share, 200 calls in any 1 s window (one more for the
/// GCRA's count, `r t + 1`), the window holding both what it admitted
/// alone and its first leases. Offered a call every millisecond (five
/// times its share), alone at 1,000 / 5, then leases of its share (110 a
/// period) from the answer on, as the fleet's bucket grants them.
#[tokio::test(start_paused = true)]
async fn the_second_redis_answers_again_a_replica_stays_within_its_share() {
    let plan = plan();
    let run = |answer: u64| {
        let mut stock = Stock::new();
        stock.alone(&plan, 5, 0);
        let mut admitted = Vec::new();
        let mut at_answer = 0;
        for ms in 0..answer + 3000 {
            let now = ms * MS;
            // The task's requests every period: failed until the answer,
            // then each answered with a share.
            if ms % 550 == answer % 550 {
                let alone_before = stock.requested();
                if ms == answer {
                    at_answer = alone_before;
                }
                if ms >= answer {
                    stock.lease(&plan, 110, now, now, alone_before);
                }
            }
            if stock.take(now, Priority::Default, 0).is_ok() {
                admitted.push(ms);
            }
        }
        assert_eq!(at_answer, 110, "alone at its share over the last period");
        admitted
    };
    for answer in [3000, 3137, 3412, 3549] {
        let admitted = run(answer);
        let window = |from: u64| {
            admitted
                .iter()
                .filter(|&&ms| (from..from + 1000).contains(&ms))
                .count()
        };
        // Every 1 s window holding the answer.
        let most = (answer - 999..=answer).map(window).max().unwrap();
        let least = (answer - 999..=answer).map(window).min().unwrap();
        assert!(
            most <= 201 && least >= 160,
            "answered at {answer} ms: 1 s windows from {least} to {most}, the share is 200"
        );
        // Alone before and leasing after, each at its share.
        assert_eq!(window(answer - 1000), 200);
        assert!(
            (195..=221).contains(&window(answer + 1100)),
            "{}",
            window(answer + 1100)
        );
    }
}

#[tokio::test(start_paused = true)]
async fn with_no_stock_a_call_is_told_when_the_next_lease_comes() {
    let plan = plan();
    let mut stock = Stock::new();
    stock.lease(&plan, 0, 0, MS, 0);
    assert_eq!(
        stock.take(10 * MS, Priority::Critical, 0),
        Err(super::stock::Refused {
            after: 540 * MS,
            empty: true
        })
    );
}

#[test]
fn settings_that_make_no_sense_are_refused_naming_them() {
    let url = "redis://127.0.0.1:6379/";
    let err = FleetRateLimit::new("partner", Rate::per_second(1000), "http://cache").unwrap_err();
    assert_eq!(err.field(), "shared", "{err}");
    assert!(err.to_string().contains("http://cache"), "{err}");
    let err = FleetRateLimit::new("partner", Rate::per_second(1000), url)
        .unwrap()
        .with_burst(50)
        .unwrap_err();
    assert_eq!(err.field(), "burst", "{err}");
    assert!(err.reason().contains("at least 100"), "{err}");
    assert!(FleetRateLimit::new("partner", Rate::per_second(0), url).is_err());
    let limit = FleetRateLimit::new("partner", Rate::per_second(1000), url)
        .unwrap()
        .with_max_wait(Duration::from_millis(5))
        .with_burst(500)
        .unwrap();
    assert_eq!(
        (limit.burst(), limit.max_wait()),
        (500, Duration::from_millis(5))
    );
}

/// No Redis at all: the task says so, and the replica admits the whole
/// quota alone (it saw no other replica), never more.
#[tokio::test(flavor = "current_thread")]
async fn without_redis_a_lone_replica_admits_the_quota_alone() {
    let limit = FleetRateLimit::new("lone", Rate::per_second(100), "redis://127.0.0.1:1/").unwrap();
    assert!(
        limit.try_acquire(Priority::Default).is_err(),
        "no lease yet"
    );
    let start = tokio::time::Instant::now();
    while limit.link.with_stock(|s| !s.is_alone()) {
        assert!(start.elapsed() < Duration::from_secs(2));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!limit.is_leasing());
    assert!(limit.round_trips() >= 1);
}
