//! A rate quota shared by five replicas (five limits, each with its own
//! connection) through the real Redis: at 127.0.0.1:6379, and on a
//! `redis-server` of the test's own that is killed and frozen by its PID.
//! Ignored by default; run with
//! `cargo test -p resilience-runtime --features limit-redis --test limit_redis -- --ignored --test-threads 1`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use resilience_runtime::limit::{FleetRateLimit, Priority, Rate};
use tokio::time::{Instant, sleep};

mod redis_common;

use redis_common::OwnRedis;

const QUOTA: u32 = 1000;
const REPLICAS: usize = 5;
/// The admissions of the whole fleet, per 10 ms.
const SLOTS: usize = 4000;

fn unique(name: &str) -> &'static str {
    use std::hash::{BuildHasher, RandomState};
    let n = RandomState::new().hash_one(std::time::SystemTime::now()) as u32;
    Box::leak(format!("{name}-{n:08x}").into_boxed_str())
}

/// Five replicas offered a call every millisecond each (five times their
/// share), counting the fleet's admissions per 10 ms, the longest time a
/// call spent in its limiter, and the longest a replica went without
/// being offered a call (its task not run: the machine's scheduler, not
/// the limiter).
struct Fleet {
    limits: Vec<Arc<FleetRateLimit>>,
    slots: Arc<Vec<AtomicU32>>,
    slowest: Arc<AtomicU64>,
    stalled: Arc<AtomicU64>,
    start: Instant,
}

impl Fleet {
    fn start(url: &'static str, name: &'static str) -> Fleet {
        let slots: Arc<Vec<AtomicU32>> = Arc::new((0..SLOTS).map(|_| AtomicU32::new(0)).collect());
        let slowest = Arc::new(AtomicU64::new(0));
        let stalled = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let limits: Vec<Arc<FleetRateLimit>> = (0..REPLICAS)
            .map(|_| Arc::new(FleetRateLimit::new(name, Rate::per_second(QUOTA), url).unwrap()))
            .collect();
        for limit in &limits {
            let (limit, slots, slowest, stalled) = (
                limit.clone(),
                slots.clone(),
                slowest.clone(),
                stalled.clone(),
            );
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(1));
                let mut last = std::time::Instant::now();
                loop {
                    tick.tick().await;
                    let before = std::time::Instant::now();
                    let gap = before.duration_since(last).as_nanos() as u64;
                    stalled.fetch_max(gap, Ordering::Relaxed);
                    last = before;
                    let admitted = limit.try_acquire(Priority::Default).is_ok();
                    let after = std::time::Instant::now();
                    let spent = after.duration_since(before).as_nanos() as u64;
                    slowest.fetch_max(spent, Ordering::Relaxed);
                    if admitted {
                        let slot = after.duration_since(start.into_std()).as_millis() as usize / 10;
                        if let Some(slot) = slots.get(slot) {
                            slot.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
        Fleet {
            limits,
            slots,
            slowest,
            stalled,
            start,
        }
    }

    /// Admissions in each 1 s window starting at every 10 ms from `from`
    /// to `to` seconds.
    fn windows(&self, from: f64, to: f64) -> Vec<u32> {
        let counts: Vec<u32> = self
            .slots
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .collect();
        let (from, to) = ((from * 100.0) as usize, (to * 100.0) as usize);
        (from..to.saturating_sub(100))
            .map(|start| counts[start..start + 100].iter().sum())
            .collect()
    }

    fn all(&self, what: impl Fn(&FleetRateLimit) -> bool) -> bool {
        self.limits.iter().all(|l| what(l))
    }

    async fn until(&self, what: &str, limit: Duration, done: impl Fn(&Fleet) -> bool) {
        let start = Instant::now();
        while !done(self) {
            assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
            sleep(Duration::from_millis(5)).await;
        }
    }

    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }
}

/// One quota of 1,000/s (burst 1,000) for five replicas each offered
/// 1,000 calls a second: no 1 s window above quota + burst, and most of
/// the quota used once every replica leases; far fewer Redis round trips
/// than calls; no call waits on Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Redis at 127.0.0.1:6379"]
async fn five_replicas_share_one_quota_without_overshoot() {
    let fleet = Fleet::start("redis://127.0.0.1:6379/", unique("five"));
    fleet
        .until("all lease", Duration::from_secs(3), |f| {
            f.all(|l| l.is_leasing() && l.replicas() == 5)
        })
        .await;
    let settled = fleet.now() + 1.0;
    sleep(Duration::from_secs_f64(settled + 8.0 - fleet.now())).await;
    let windows = fleet.windows(0.0, fleet.now());
    let max = windows.iter().max().copied().unwrap();
    assert!(
        max <= 2 * QUOTA,
        "a 1 s window admitted {max} > quota + burst"
    );
    let steady = fleet.windows(settled, settled + 8.0);
    let used: u32 = steady.iter().step_by(100).sum::<u32>() / 7;
    assert!(
        used >= QUOTA * 9 / 10,
        "{used} a second used of {QUOTA}: {steady:?}"
    );
    let round_trips: u64 = fleet.limits.iter().map(|l| l.round_trips()).sum();
    let admitted: u32 = fleet.windows(0.0, fleet.now()).iter().step_by(100).sum();
    assert!(
        (round_trips as f64) < f64::from(admitted) / 50.0,
        "{round_trips} round trips for {admitted} calls"
    );
    let slowest = Duration::from_nanos(fleet.slowest.load(Ordering::Relaxed));
    assert!(
        slowest < Duration::from_millis(5),
        "a call spent {slowest:?} in its limiter"
    );
}

/// The fleet's windows while Redis is away: each replica at its share,
/// the fleet between 80 % and 100 % of the quota. A GCRA at a rate `r`
/// admits `r t + 1` calls in a span `t` (both ends of the span may hold
/// one), so a 1 s window of five replicas each at its share may count
/// one call more per replica than the quota: the 100 % is `QUOTA +
/// REPLICAS` in calls counted.
///
/// A replica whose task the scheduler left unrun for `g` beyond its 1 ms
/// tick was offered nothing for `g`, and its GCRA, saturated until then,
/// admits the calls it missed when it runs again (a GCRA's tolerance is
/// there to be caught up); a window that starts in that gap counts them.
/// So each replica may count `g × share` more, `g` the longest stall
/// measured in this run: on an idle machine a millisecond or two, a
/// call or two.
fn assert_alone(fleet: &Fleet, from: f64, to: f64, what: &str) {
    let windows = fleet.windows(from, to);
    let (min, max) = (
        windows.iter().min().copied().unwrap(),
        windows.iter().max().copied().unwrap(),
    );
    let stalled = Duration::from_nanos(fleet.stalled.load(Ordering::Relaxed))
        .saturating_sub(Duration::from_millis(1));
    let share = f64::from(QUOTA) / REPLICAS as f64;
    let caught_up = (stalled.as_secs_f64() * share).ceil() as u32 * REPLICAS as u32;
    assert!(
        min >= QUOTA * 8 / 10 && max <= QUOTA + REPLICAS as u32 + caught_up,
        "{what}: 1 s windows between {min} and {max}, not within 80-100 % of {QUOTA} \
         (with {caught_up} calls for replicas the scheduler left unrun up to {stalled:?})"
    );
}

/// Redis killed, then restarted; frozen (SIGSTOP), then woken (SIGCONT):
/// each time every replica falls back to its share (a fifth of the quota)
/// without any call waiting on Redis, and leases again once Redis answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server on the PATH"]
async fn redis_killed_or_frozen_each_replica_admits_its_share_then_leases_again() {
    const PORT: u16 = 6393;
    let url = "redis://127.0.0.1:6393/";
    let mut server = OwnRedis::start(PORT).await;
    let fleet = Fleet::start(url, unique("outage"));
    fleet
        .until("all lease", Duration::from_secs(3), |f| {
            f.all(|l| l.is_leasing() && l.replicas() == 5)
        })
        .await;
    sleep(Duration::from_secs(2)).await;

    // Killed: every replica alone within a lease period.
    drop(server);
    let killed = fleet.now();
    fleet
        .until("all alone after the kill", Duration::from_secs(1), |f| {
            f.all(|l| !l.is_leasing())
        })
        .await;
    sleep(Duration::from_secs(4)).await;
    assert_alone(&fleet, killed + 1.0, fleet.now(), "Redis killed");
    server = OwnRedis::start(PORT).await;
    fleet
        .until("all lease after the restart", Duration::from_secs(3), |f| {
            f.all(|l| l.is_leasing())
        })
        .await;
    sleep(Duration::from_secs(2)).await;

    // Frozen: detected by the lease request's timeout.
    server.signal("-STOP");
    let frozen = fleet.now();
    fleet
        .until("all alone after the freeze", Duration::from_secs(1), |f| {
            f.all(|l| !l.is_leasing())
        })
        .await;
    sleep(Duration::from_secs(4)).await;
    assert_alone(&fleet, frozen + 1.0, fleet.now(), "Redis frozen");
    server.signal("-CONT");
    fleet
        .until("all lease after SIGCONT", Duration::from_secs(3), |f| {
            f.all(|l| l.is_leasing())
        })
        .await;
    let windows = fleet.windows(0.0, fleet.now());
    let max = windows.iter().max().copied().unwrap();
    assert!(
        max <= 2 * QUOTA,
        "a 1 s window admitted {max} > quota + burst"
    );
    let slowest = Duration::from_nanos(fleet.slowest.load(Ordering::Relaxed));
    assert!(
        slowest < Duration::from_millis(5),
        "a call spent {slowest:?} in its limiter"
    );
}

/// The guide's three metrics of a shared rate limit
/// (`resilience::guide`, *Metrics and alerts*), each with exactly the
/// labels `service` and `target`, as a recorder of this thread (the
/// runtime runs the lease task here too) holds them: the last value of
/// each gauge set, the counter's increments, `None` for what was not
/// emitted.
#[cfg(feature = "metrics")]
fn fleet_metrics(
    recorder: &metrics_util::debugging::DebuggingRecorder,
    target: &str,
) -> (Option<f64>, Option<u64>, Option<f64>) {
    use metrics_util::debugging::DebugValue;
    let (mut lease, mut round_trips, mut fallback) = (None, None, None);
    for (key, _, _, value) in recorder.snapshotter().snapshot().into_vec() {
        let key = key.key();
        let mut labels: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        if labels
            != [
                ("service".to_owned(), "unknown_service".to_owned()),
                ("target".to_owned(), target.to_owned()),
            ]
        {
            continue;
        }
        match (key.name(), value) {
            ("http_client_rate_limit_lease_tokens", DebugValue::Gauge(v)) => {
                lease = Some(v.into_inner())
            }
            ("http_client_rate_limit_redis_round_trips_total", DebugValue::Counter(n)) => {
                round_trips = Some(n)
            }
            ("http_client_rate_limit_shared_fallback", DebugValue::Gauge(v)) => {
                fallback = Some(v.into_inner())
            }
            ("http_client_rate_limit_admitted_total" | "http_client_shed_total", _) => {}
            (name, value) => panic!("unexpected {name} = {value:?} for {target}"),
        }
    }
    (lease, round_trips, fallback)
}

/// A lease taken sets `http_client_rate_limit_lease_tokens` to its tokens;
/// every lease request counts one in
/// `http_client_rate_limit_redis_round_trips_total`;
/// `http_client_rate_limit_shared_fallback` is 1 before the first answer
/// and once Redis is killed, 0 from the first answer and again from the
/// first answer after the restart. Each phase has a recorder of its own
/// (a snapshot empties the debugging recorder), so a value read was
/// emitted in that phase.
#[cfg(feature = "metrics")]
#[tokio::test(flavor = "current_thread")]
#[ignore = "needs redis-server on the PATH"]
async fn a_lease_a_round_trip_and_the_fallback_are_metrics() {
    use metrics_util::debugging::DebuggingRecorder;
    const PORT: u16 = 6395;
    let name = unique("metrics");
    let mut server = OwnRedis::start(PORT).await;

    let built = DebuggingRecorder::new();
    let local = metrics::set_default_local_recorder(&built);
    let limit = FleetRateLimit::new(name, Rate::per_second(QUOTA), "redis://127.0.0.1:6395/")
        .unwrap()
        .with_burst(200)
        .unwrap();
    drop(local);
    assert_eq!(fleet_metrics(&built, name), (None, None, Some(1.0)));

    // Offered a call a millisecond until a lease with tokens came.
    let offer = || async {
        for _ in 0..5 {
            let _ = limit.try_acquire(Priority::Default);
            sleep(Duration::from_millis(1)).await;
        }
    };
    let leasing = DebuggingRecorder::new();
    let local = metrics::set_default_local_recorder(&leasing);
    let start = Instant::now();
    while !(limit.is_leasing() && limit.last_lease() > 0) {
        assert!(start.elapsed() < Duration::from_secs(3), "no lease");
        offer().await;
    }
    drop(local);
    let sent = limit.round_trips();
    assert!(sent >= 2, "an announcement, then a lease");
    assert_eq!(
        fleet_metrics(&leasing, name),
        (Some(f64::from(limit.last_lease())), Some(sent), Some(0.0))
    );

    // Killed: the fallback is entered, each request still counted.
    drop(server);
    let killed = DebuggingRecorder::new();
    let local = metrics::set_default_local_recorder(&killed);
    let start = Instant::now();
    while limit.is_leasing() || limit.round_trips() < sent + 3 {
        assert!(start.elapsed() < Duration::from_secs(3), "still leasing");
        offer().await;
    }
    drop(local);
    let (lease, round_trips, fallback) = fleet_metrics(&killed, name);
    assert_eq!(fallback, Some(1.0));
    assert_eq!(round_trips, Some(limit.round_trips() - sent));
    assert!(lease.is_none() || lease == Some(f64::from(limit.last_lease())));
    let sent = limit.round_trips();

    // Back: left at the first answer, the new lease's tokens shown.
    let back = DebuggingRecorder::new();
    let local = metrics::set_default_local_recorder(&back);
    server = OwnRedis::start(PORT).await;
    let start = Instant::now();
    while !(limit.is_leasing() && limit.last_lease() > 0) {
        assert!(start.elapsed() < Duration::from_secs(3), "no lease again");
        offer().await;
    }
    drop(local);
    assert_eq!(
        fleet_metrics(&back, name),
        (
            Some(f64::from(limit.last_lease())),
            Some(limit.round_trips() - sent),
            Some(0.0)
        )
    );
    drop(server);
}
