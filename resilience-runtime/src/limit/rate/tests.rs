//! The GCRA against the numbers of `governor`'s and `redis-cell`'s own
//! test suites, on tokio's paused clock.

use std::time::Duration;

use tokio::time::{Instant, advance};

use super::{Rate, RateLimit};
use crate::error::ShedBy;
use crate::limit::Priority;

const MS: Duration = Duration::from_millis(1);
const C: Priority = Priority::Critical;

fn limit(rate: Rate) -> RateLimit {
    RateLimit::new("partner", rate).unwrap()
}

/// governor `tests/direct.rs`, `rejects_too_many`: a quota of 2 a second
/// admits 2 (its burst), refuses the third, and admits 2 again a second
/// later.
#[tokio::test(start_paused = true)]
async fn governor_rejects_too_many() {
    let lb = limit(Rate::per_second(2));
    assert!(lb.try_acquire(C).is_ok());
    advance(MS).await;
    assert!(lb.try_acquire(C).is_ok());
    advance(MS).await;
    assert!(lb.try_acquire(C).is_err());
    advance(MS * 1000).await;
    assert!(lb.try_acquire(C).is_ok());
    advance(MS).await;
    assert!(lb.try_acquire(C).is_ok());
    advance(MS).await;
    assert!(lb.try_acquire(C).is_err());
}

/// governor `does_not_allow_one_extra_cell_after_longer_interval` (its
/// issues 107 and 249): a long quiet spell saves up no more than the burst.
#[tokio::test(start_paused = true)]
async fn governor_no_extra_cell_after_a_longer_interval() {
    let lb = limit(Rate::per_second(5));
    for _ in 1..=5 {
        assert!(lb.try_acquire(C).is_ok());
    }
    assert!(lb.try_acquire(C).is_err());
    advance(Duration::from_secs(2)).await;
    for _ in 1..=5 {
        assert!(lb.try_acquire(C).is_ok());
    }
    assert!(lb.try_acquire(C).is_err());
}

/// governor `correct_wait_time`: a call refused and retried after the
/// time it was told is admitted, 20 out of 20.
#[tokio::test(start_paused = true)]
async fn governor_correct_wait_time() {
    let lb = limit(Rate::per_second(5));
    let mut conforming = 0;
    for _ in 0..20 {
        advance(MS).await;
        match lb.try_acquire(C) {
            Ok(()) => conforming += 1,
            Err(refused) => {
                advance(refused.retry_after().unwrap()).await;
                assert!(lb.try_acquire(C).is_ok());
                conforming += 1;
            }
        }
    }
    assert_eq!(conforming, 20);
}

/// governor `actual_threadsafety`: 20 threads at once on a quota of 20
/// are all admitted, and the 21st call is refused. (A rate of 20 an hour
/// keeps the real clock out of it: these threads run outside the paused
/// runtime.)
#[test]
fn governor_actual_threadsafety() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let lim = runtime.block_on(async { limit(Rate::per_hour(20)) });
    std::thread::scope(|scope| {
        for _ in 0..20 {
            scope.spawn(|| assert!(lim.try_acquire(C).is_ok()));
        }
    });
    assert!(lim.try_acquire(C).is_err());
}

/// redis-cell `it_rate_limits` (`CL.THROTTLE` with `max_burst = 4`, one a
/// second: a limit of 5), the cases of one cell each: limited or not, and
/// the `retry_after` of the refused one.
#[tokio::test(start_paused = true)]
async fn redis_cell_rate_limits() {
    let lb = limit(Rate::per_second(1));
    let start = Instant::now();
    // (case, at ms after the start, limited, retry_after)
    let cases: [(u32, u64, bool, Option<Duration>); 11] = [
        (1, 0, false, None),
        (2, 0, false, None),
        (3, 0, false, None),
        (4, 0, false, None),
        (5, 0, false, None),
        (6, 0, true, Some(Duration::from_secs(1))),
        (7, 3000, false, None),
        (8, 3100, false, None),
        (9, 4000, false, None),
        (10, 8000, false, None),
        (11, 9500, false, None),
    ];
    assert_eq!(
        lb.burst(),
        1,
        "a count of 1 a second is a burst of 1 by default"
    );
    let lb = lb.with_burst(5).unwrap();
    for (case, at, limited, retry_after) in cases {
        tokio::time::sleep_until(start + MS * at as u32).await;
        let result = lb.try_acquire(C);
        assert_eq!(result.is_err(), limited, "case {case}");
        assert_eq!(
            result.err().and_then(|r| r.retry_after()),
            retry_after,
            "case {case}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_refusal_names_the_limit_and_when_to_come_back() {
    let lb = limit(Rate::per_second(25)).with_burst(1).unwrap();
    lb.try_acquire(C).unwrap();
    let refused = lb.try_acquire(C).unwrap_err();
    assert_eq!(refused.by(), ShedBy::RateLimit);
    assert_eq!(refused.limiter(), "partner");
    assert_eq!(
        refused.to_string(),
        "overloaded: the rate limit of `partner` is reached (the next call is admitted in 40ms); the call was not sent"
    );
}

/// Each priority may use its share of the burst (the same table as the
/// concurrency limits): with a burst of 20, sheddable calls take 10,
/// default calls 18, critical calls all 20.
#[tokio::test(start_paused = true)]
async fn priorities_keep_a_reserve_of_the_burst() {
    for (priority, admitted) in [
        (Priority::Sheddable, 10),
        (Priority::Default, 18),
        (Priority::Critical, 20),
    ] {
        let lb = limit(Rate::per_second(20));
        let n = std::iter::repeat_with(|| lb.try_acquire(priority))
            .take(30)
            .filter(Result::is_ok)
            .count();
        assert_eq!(n, admitted, "{priority:?}");
    }
    // After the default calls have taken their share, critical calls still
    // find the reserve.
    let lb = limit(Rate::per_second(20));
    while lb.try_acquire(Priority::Default).is_ok() {}
    assert!(lb.try_acquire(C).is_ok());
    assert!(lb.try_acquire(C).is_ok());
    assert!(lb.try_acquire(C).is_err());
    // A refused default call is told when a default call goes through,
    // later than a critical one.
    let default = lb.try_acquire(Priority::Default).unwrap_err();
    let critical = lb.try_acquire(C).unwrap_err();
    assert_eq!(critical.retry_after(), Some(MS * 50));
    assert_eq!(default.retry_after(), Some(MS * 150));
}

/// A call over the rate takes the next place in the schedule and sleeps
/// until it; one whose place is beyond `max_wait` is refused at once.
#[tokio::test(start_paused = true)]
async fn waiting_calls_take_the_next_places_in_the_schedule() {
    let lb = limit(Rate::per_second(25))
        .with_burst(5)
        .unwrap()
        .with_max_wait(MS * 100);
    for _ in 0..5 {
        lb.try_acquire(C).unwrap();
    }
    let start = Instant::now();
    let timed = |lb: &'static RateLimit| async move {
        let result = lb.acquire(C).await;
        (result, start.elapsed())
    };
    let lb: &'static RateLimit = Box::leak(Box::new(lb));
    let (a, b, c) = tokio::join!(timed(lb), timed(lb), timed(lb));
    assert_eq!((a.0.is_ok(), a.1), (true, MS * 40));
    assert_eq!((b.0.is_ok(), b.1), (true, MS * 80));
    let refused = c.0.unwrap_err();
    assert_eq!(c.1, Duration::ZERO, "refused at once, not after waiting");
    assert_eq!(refused.retry_after(), Some(MS * 120));
}

#[tokio::test(start_paused = true)]
async fn the_wait_stays_within_the_callers_deadline() {
    let lb = limit(Rate::per_second(25))
        .with_burst(1)
        .unwrap()
        .with_max_wait(MS * 100);
    lb.try_acquire(C).unwrap();
    let start = Instant::now();
    let refused = crate::deadline::with_timeout(MS * 30, lb.acquire(C))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(refused.retry_after(), Some(MS * 40));
    crate::deadline::with_timeout(MS * 50, lb.acquire(C))
        .await
        .unwrap();
    assert_eq!(start.elapsed(), MS * 40);
}

#[tokio::test(start_paused = true)]
async fn sheddable_calls_never_wait() {
    let lb = limit(Rate::per_second(25))
        .with_burst(1)
        .unwrap()
        .with_max_wait(MS * 100);
    lb.try_acquire(C).unwrap();
    let start = Instant::now();
    assert!(lb.acquire(Priority::Sheddable).await.is_err());
    assert_eq!(start.elapsed(), Duration::ZERO);
}

/// A waiting call that is cancelled keeps its place, so that callers that
/// give up cannot make the dependency see more than the rate.
#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_keeps_its_place() {
    let lb = limit(Rate::per_second(25))
        .with_burst(1)
        .unwrap()
        .with_max_wait(MS * 100);
    lb.try_acquire(C).unwrap();
    assert!(
        tokio::time::timeout(MS, lb.acquire(C)).await.is_err(),
        "cancelled while waiting"
    );
    let refused = lb.try_acquire(C).unwrap_err();
    assert_eq!(
        refused.retry_after(),
        Some(MS * 79),
        "after the cancelled call's place"
    );
}

/// The GCRA's bound, checked over a long irregular run: in every window
/// of length `w`, at most `burst + w / interval` calls are admitted, and
/// callers that keep asking get at least the rate.
#[tokio::test(start_paused = true)]
async fn no_window_admits_more_than_the_burst_plus_the_rate() {
    let lb = limit(Rate::per_second(100)).with_burst(10).unwrap();
    let start = Instant::now();
    let mut admitted = Vec::new();
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    while start.elapsed() < Duration::from_secs(10) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // Bursts and lulls: 0 to 7 ms between tries.
        advance(Duration::from_micros(seed % 7_000)).await;
        for _ in 0..(seed >> 60) {
            if lb.try_acquire(C).is_ok() {
                admitted.push(start.elapsed());
            }
        }
    }
    for window in [MS * 10, MS * 100, Duration::from_secs(1)] {
        let most = 10 + (window.as_millis() / 10) as usize;
        for (i, &from) in admitted.iter().enumerate() {
            let within = admitted[i..]
                .iter()
                .take_while(|&&t| t < from + window)
                .count();
            assert!(within <= most, "{within} in {window:?} from {from:?}");
        }
    }
    assert!(admitted.len() >= 900, "{} admitted in 10 s", admitted.len());
}

#[test]
fn rates_parse_and_print_as_the_file_writes_them() {
    for (text, rate) in [
        ("100/s", Rate::per_second(100)),
        ("6000/m", Rate::per_minute(6000)),
        ("3/h", Rate::per_hour(3)),
        ("25/100ms", Rate::new(25, MS * 100)),
        ("10/10s", Rate::new(10, Duration::from_secs(10))),
        (" 5 / s ", Rate::per_second(5)),
    ] {
        assert_eq!(text.parse::<Rate>().unwrap(), rate, "{text}");
    }
    assert_eq!(Rate::per_second(100).to_string(), "100/s");
    assert_eq!(Rate::new(10, Duration::from_secs(10)).to_string(), "10/10s");
    for (text, reason) in [
        ("100", "`<calls>/<period>`"),
        ("0/s", "at least 1"),
        ("-1/s", "whole number"),
        ("ten/s", "whole number"),
        ("100/fortnight", "a unit"),
        ("100/0s", "longer than 0"),
        ("2000000000/1s", "one call per nanosecond"),
    ] {
        let err = text.parse::<Rate>().unwrap_err();
        assert_eq!(err.field(), "rate", "{text}");
        assert_eq!(err.value(), format!("{text:?}"), "{text}");
        assert!(err.reason().contains(reason), "{text}: {err}");
    }
}

#[test]
fn bad_settings_are_refused_naming_the_limit() {
    let err = RateLimit::new("partner", Rate::per_second(0)).unwrap_err();
    assert_eq!(err.subject(), "rate limit `partner`");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = runtime.enter();
    let err = limit(Rate::per_second(1)).with_burst(0).unwrap_err();
    assert_eq!((err.field(), err.value()), ("burst", "0"));
}

#[test]
fn clocks_parse_and_print_as_the_file_writes_them() {
    use super::RateClock;

    assert_eq!("tokio".parse::<RateClock>().unwrap(), RateClock::Tokio);
    assert_eq!(RateClock::default(), RateClock::Tokio);
    #[cfg(feature = "limit-tsc")]
    assert_eq!("tsc".parse::<RateClock>().unwrap().to_string(), "tsc");
    #[cfg(not(feature = "limit-tsc"))]
    {
        let err = "tsc".parse::<RateClock>().unwrap_err();
        assert!(err.reason().contains("limit-tsc"), "{err}");
    }
    let err = "rdtsc".parse::<RateClock>().unwrap_err();
    assert_eq!((err.field(), err.value()), ("clock", "\"rdtsc\""));
    assert!(err.reason().contains("\"tokio\""), "{err}");
}

/// A limit on the CPU's counter: the same GCRA on another clock. These run
/// on the real clock (tokio's paused clock cannot drive the counter), with
/// rates slow enough that the time the test takes does not matter.
#[cfg(feature = "limit-tsc")]
mod tsc {
    use super::*;
    use crate::limit::RateClock;

    fn on_tsc(rate: Rate) -> RateLimit {
        limit(rate).with_clock(RateClock::Tsc)
    }

    /// governor `actual_threadsafety`, on governor's own clock: 20
    /// threads at once on a quota of 20 are all admitted, the 21st call is
    /// refused, and told to come back after about one interval (3 minutes
    /// at 20 an hour), as governor's `NotUntil::wait_time_from` tells it.
    #[test]
    fn governor_actual_threadsafety() {
        let lim = on_tsc(Rate::per_hour(20));
        assert_eq!(lim.clock(), RateClock::Tsc);
        std::thread::scope(|scope| {
            for _ in 0..20 {
                scope.spawn(|| assert!(lim.try_acquire(C).is_ok()));
            }
        });
        let refused = lim.try_acquire(C).unwrap_err();
        let wait = refused.retry_after().unwrap();
        let interval = Duration::from_secs(180);
        assert!(
            wait <= interval && wait > interval - Duration::from_secs(5),
            "{wait:?}"
        );
    }

    /// The counter, read inline and scaled by `quanta`'s calibration,
    /// keeps the system's time: over 20 ms of the system's clock it counts
    /// 20 ms, to within 1 % (a scale off by a factor would admit calls
    /// faster or slower than the rate).
    #[test]
    fn the_counter_keeps_the_systems_time() {
        let clock = super::super::Clock::of(RateClock::Tsc);
        let (counter, system) = (clock.now(), std::time::Instant::now());
        while system.elapsed() < Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        let (counted, elapsed) = (clock.now() - counter, system.elapsed());
        let ratio = counted as f64 / elapsed.as_nanos() as f64;
        assert!(
            (0.99..=1.01).contains(&ratio),
            "{counted} ns in {elapsed:?}"
        );
    }

    /// tokio's paused clock does not move the counter: time advanced in a
    /// test frees no place (what the docs tell a user to expect).
    #[tokio::test(start_paused = true)]
    async fn tokios_paused_clock_does_not_drive_it() {
        let lim = on_tsc(Rate::per_hour(1));
        lim.try_acquire(C).unwrap();
        advance(Duration::from_secs(7200)).await;
        assert!(lim.try_acquire(C).is_err());
        let tokio = limit(Rate::per_hour(1));
        tokio.try_acquire(C).unwrap();
        advance(Duration::from_secs(3600)).await;
        assert!(tokio.try_acquire(C).is_ok());
    }

    /// A waiting call sleeps until its place: at 1,000 a second with a
    /// burst of 1, the third of three calls is admitted no sooner than
    /// 2 ms after the first (redis-cell's and governor's schedule: one
    /// interval between calls once the burst is spent).
    #[tokio::test]
    async fn a_waiting_call_sleeps_until_its_place() {
        let lim = on_tsc(Rate::per_second(1000))
            .with_burst(1)
            .unwrap()
            .with_max_wait(Duration::from_millis(50));
        let start = std::time::Instant::now();
        lim.try_acquire(C).unwrap();
        lim.acquire(C).await.unwrap();
        lim.acquire(C).await.unwrap();
        let waited = start.elapsed();
        // The counter is calibrated against the system's clock: allow a
        // tenth of the intervals for the two to disagree.
        assert!(waited >= Duration::from_micros(1800), "{waited:?}");
    }
}
