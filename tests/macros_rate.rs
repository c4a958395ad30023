//! `#[retry(limit = "…", rate = "…", burst = N)]`: the attribute declares
//! the rate limit of its limiter, and each attempt takes its place in that
//! rate (the GCRA). The figures are those of the GCRA's documented
//! examples, on tokio's paused clock: governor's `Quota::per_second(50)`
//! (50 at once, then one every 20 ms), redis-cell's `CL.THROTTLE user123
//! 15 30 60` (a burst of 16, 30 a minute: one every 2 s, the first answer
//! "16 allowed, 15 remaining, full again in 2 s"), and a partner's 100 a
//! second with 20 at once (then one every 10 ms).

use std::time::Duration;

use resilience::limit::Priority;
use resilience::{Error, circuit_breaker, retry};

#[retry(
    limit = "partner",
    rate = "100/s",
    burst = 20,
    priority = "critical",
    initial = "10ms"
)]
async fn get_quote() -> Result<u32, Error> {
    // The network call it stands for.
    tokio::task::yield_now().await;
    Ok(7)
}

// A second fn of the same partner, which declares no rate: it goes
// through the one the first declares, and shares its schedule.
#[retry(limit = "partner", priority = "critical", initial = "10ms")]
async fn get_price() -> Result<u32, Error> {
    tokio::task::yield_now().await;
    Ok(8)
}

#[retry(limit = "governor", rate = "50/s", priority = "critical")]
async fn get_governor_cell() -> Result<u32, Error> {
    tokio::task::yield_now().await;
    Ok(1)
}

// The same declaration on a breaker without a `#[retry]`: its one call
// takes the place.
#[circuit_breaker(
    name = "user123",
    limit = "user123",
    rate = "30/m",
    burst = 16,
    priority = "critical"
)]
async fn get_redis_cell() -> Result<u32, Error> {
    tokio::task::yield_now().await;
    Ok(1)
}

#[retry(limit = "partner-default", rate = "100/s", burst = 20)]
async fn get_quote_default() -> Result<u32, Error> {
    tokio::task::yield_now().await;
    Ok(7)
}

/// How long until a call would be admitted, from a refusal.
fn refused<T: std::fmt::Debug>(result: Result<T, Error>, limiter: &str) -> Duration {
    match result {
        Err(Error::Overloaded(overloaded)) => {
            assert_eq!(overloaded.limiter(), limiter);
            overloaded.retry_after().expect("a rate limit says when")
        }
        other => panic!("expected a refusal by {limiter}, got {other:?}"),
    }
}

/// 100/s with a burst of 20: 20 at once, the 21st refused and told to come
/// back in 10 ms, then one every 10 ms: 100 more in the next second, never
/// more than `burst + t × rate` in any span `t`.
#[tokio::test(start_paused = true)]
async fn the_attribute_rate_admits_the_burst_then_one_per_interval() {
    for _ in 0..20 {
        assert_eq!(get_quote().await.unwrap(), 7);
    }
    assert_eq!(
        refused(get_quote().await, "partner"),
        Duration::from_millis(10)
    );
    // The other fn of the partner is refused too: one limiter, one rate.
    assert_eq!(
        refused(get_price().await, "partner"),
        Duration::from_millis(10)
    );
    let limiter = resilience::registry::global().limiter("partner").unwrap();
    let rate = limiter.as_rate().expect("the attribute's rate limit");
    assert_eq!(
        (rate.rate().to_string(), rate.burst()),
        ("100/s".to_owned(), 20)
    );

    // Offered a call every millisecond for one second, alternating the two
    // fns: one admitted every 10 ms.
    let start = tokio::time::Instant::now();
    let mut admitted = Vec::new();
    for ms in 1..=1000u32 {
        tokio::time::advance(Duration::from_millis(1)).await;
        let result = if ms % 2 == 0 {
            get_quote().await
        } else {
            get_price().await
        };
        if result.is_ok() {
            admitted.push(start.elapsed());
        }
    }
    assert_eq!(admitted.len(), 100, "one every 10 ms for 1 s");
    for (i, at) in admitted.iter().enumerate() {
        assert_eq!(*at, Duration::from_millis(10 * (i as u64 + 1)), "call {i}");
    }
}

/// governor's `Quota::per_second(50)`: a burst of 50 cells, replenished
/// one every 20 ms.
#[tokio::test(start_paused = true)]
async fn governor_per_second_50() {
    for _ in 0..50 {
        get_governor_cell().await.unwrap();
    }
    assert_eq!(
        refused(get_governor_cell().await, "governor"),
        Duration::from_millis(20)
    );
    tokio::time::advance(Duration::from_millis(19)).await;
    assert_eq!(
        refused(get_governor_cell().await, "governor"),
        Duration::from_millis(1)
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    get_governor_cell().await.unwrap();
}

/// redis-cell's README, `CL.THROTTLE user123 15 30 60`: a max burst of 15
/// (16 at once) and 30 per 60 s. Its first answer: allowed, a limit of
/// 16, 15 remaining, full again after 2 s; the 17th at once is limited,
/// to come back after 2 s.
#[tokio::test(start_paused = true)]
async fn redis_cell_throttle_user123() {
    get_redis_cell().await.unwrap();
    let limiter = resilience::registry::global().limiter("user123").unwrap();
    let rate = limiter.as_rate().unwrap();
    assert_eq!(rate.burst(), 16);
    assert_eq!(
        rate.remaining(Priority::Critical),
        (15, Duration::from_secs(2))
    );
    for _ in 0..15 {
        get_redis_cell().await.unwrap();
    }
    assert_eq!(
        refused(get_redis_cell().await, "user123"),
        Duration::from_secs(2)
    );
    tokio::time::advance(Duration::from_secs(2)).await;
    get_redis_cell().await.unwrap();
}

/// The default priority keeps the last tenth of the burst for critical
/// calls: 18 of 20 at once.
#[tokio::test(start_paused = true)]
async fn default_calls_leave_the_reserve_of_the_burst() {
    for _ in 0..18 {
        get_quote_default().await.unwrap();
    }
    assert_eq!(
        refused(get_quote_default().await, "partner-default"),
        Duration::from_millis(10)
    );
}
