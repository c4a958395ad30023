//! A breaker shared by five replicas (five registries) through the real
//! Redis at 127.0.0.1:6379, and three replicas in processes of their own.
//! Ignored by default; run with
//! `cargo test -p resilience-runtime --features breaker-redis --test breaker_redis -- --ignored`.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use resilience_runtime::breaker::{BreakerConfig, CircuitBreaker, Fleet, Sharing, State};
use resilience_runtime::registry::Registry;
use resilience_runtime::{Error, Outcome};
use tokio::time::{Instant, sleep};

mod redis_common;

use redis_common::{OwnRedis, redis_cli};

const URL: &str = "redis://127.0.0.1:6379/";
const INTERVAL: Duration = Duration::from_millis(100);
/// Scheduling and round-trip slack on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(150);

/// A service name no other test run uses; its keys are removed on drop.
struct Service(String, u16);

impl Service {
    fn new(test: &str, port: u16) -> Service {
        Service(format!("{test}-{:08x}", rand_u32()), port)
    }
    fn key(&self, suffix: &str) -> String {
        format!("resilience:breaker:{{{}/user}}:{suffix}", self.0)
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let pattern = format!("resilience:breaker:{{{}/*", self.0);
        let keys = redis_cli(self.1, &["--scan", "--pattern", &pattern]);
        for key in keys.lines().filter(|k| !k.is_empty()) {
            redis_cli(self.1, &["DEL", key]);
        }
    }
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now()) as u32
}

fn config(url: &'static str) -> BreakerConfig {
    BreakerConfig::new()
        .with_min_requests(10)
        .with_failure_ratio(0.5)
        .with_window(Duration::from_secs(20))
        .with_cooldown(Duration::from_secs(2))
        .with_half_open(2)
        .with_probe_timeout(Duration::from_secs(2))
        .with_sharing(Sharing::redis(url).with_sync_interval(INTERVAL))
}

fn replicas(service: &Service, n: usize, config: BreakerConfig) -> Vec<&'static CircuitBreaker> {
    (0..n)
        .map(|_| {
            let registry = Registry::builder()
                .service(service.0.clone())
                .breaker("user", config)
                .build()
                .expect("a valid config");
            let registry: &'static Registry = Box::leak(Box::new(registry));
            registry.breaker("user", config)
        })
        .collect()
}

fn outcome(
    breaker: &CircuitBreaker,
    outcome: Outcome,
) -> Result<(), resilience_runtime::DependencyDown> {
    breaker.try_acquire().map(|permit| permit.settle(outcome))
}

async fn until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        sleep(Duration::from_millis(2)).await;
    }
    start.elapsed()
}

/// Failures seen by two replicas open all five once the fleet's totals
/// cross `min` and `ratio`, every replica within one sync interval of the
/// opening; after the cooldown exactly `half_open` probes run fleet-wide
/// and their success closes all five.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Redis at 127.0.0.1:6379"]
async fn five_replicas_trip_on_the_fleets_totals_and_probe_half_open_times() {
    let service = Service::new("five", 6379);
    let fleet = replicas(&service, 5, config(URL));
    // One success each starts the replicas' sync tasks.
    for b in &fleet {
        outcome(b, Outcome::Success).unwrap();
    }
    until("all joined", Duration::from_secs(3), || {
        fleet.iter().all(|b| b.snapshot().fleet == Fleet::Joined)
    })
    .await;
    // 9 calls, 4 failures: under `min`.
    for b in &fleet[..2] {
        outcome(b, Outcome::Failure).unwrap();
        outcome(b, Outcome::Failure).unwrap();
    }
    sleep(3 * INTERVAL).await;
    assert!(fleet.iter().all(|b| b.state() == State::Closed));
    assert_eq!(redis_cli(6379, &["EXISTS", &service.key("open")]), "0");
    // 12 calls, 7 failures: over. Replica 0 alone has 6 calls, under `min`.
    for _ in 0..3 {
        outcome(fleet[0], Outcome::Failure).unwrap();
    }
    assert_eq!(fleet[0].state(), State::Closed, "no local trip");
    until("the fleet opens", 2 * INTERVAL + SLACK, || {
        redis_cli(6379, &["EXISTS", &service.key("open")]) == "1"
    })
    .await;
    let followed = until("every replica rejects", INTERVAL + SLACK, || {
        fleet.iter().all(|b| b.try_acquire().is_err())
    })
    .await;
    eprintln!("every replica rejected {followed:?} after the opening was published");

    // After the cooldown: every replica calls; count the calls that run
    // before any replica has closed again, which are the probes.
    let probes = Arc::new(AtomicU32::new(0));
    sleep(Duration::from_millis(1800)).await;
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut callers = Vec::new();
    for &b in &fleet {
        let (probes, fleet) = (probes.clone(), fleet.clone());
        callers.push(tokio::spawn(async move {
            while Instant::now() < deadline && fleet.iter().any(|b| b.state() != State::Closed) {
                let call = b.call_with(
                    async {
                        if fleet.iter().all(|b| b.state() != State::Closed) {
                            probes.fetch_add(1, Ordering::SeqCst);
                        }
                        sleep(Duration::from_millis(150)).await;
                        Ok::<_, Error>(())
                    },
                    |_: &Error| true,
                );
                let _ = call.await;
                sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    for caller in callers {
        caller.await.unwrap();
    }
    assert!(
        fleet.iter().all(|b| b.state() == State::Closed),
        "{:?}",
        fleet.iter().map(|b| b.snapshot()).collect::<Vec<_>>()
    );
    assert_eq!(probes.load(Ordering::SeqCst), 2, "half_open probes in all");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

/// Redis stopped mid-run: every replica decides alone, no call waits on
/// Redis, and the replicas follow their fleet again once Redis is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server on the PATH"]
async fn with_redis_stopped_replicas_decide_alone_and_rejoin() {
    const PORT: u16 = 6391;
    const OWN_URL: &str = "redis://127.0.0.1:6391/";
    let mut server = Some(OwnRedis::start(PORT).await);
    let service = Service::new("outage", PORT);
    let config = config(OWN_URL).with_cooldown(Duration::from_secs(5));
    let fleet = replicas(&service, 3, config);
    let local = CircuitBreaker::new("user", config.without_sharing()).unwrap();
    for b in &fleet {
        outcome(b, Outcome::Success).unwrap();
    }
    until("all joined", Duration::from_secs(3), || {
        fleet.iter().all(|b| b.snapshot().fleet == Fleet::Joined)
    })
    .await;

    drop(server.take());
    let alone = until("all decide alone", Duration::from_secs(3), || {
        fleet.iter().all(|b| b.snapshot().fleet == Fleet::Local)
    })
    .await;
    eprintln!("all replicas decide alone {alone:?} after Redis was stopped");

    // The call path with Redis dead, against an unshared breaker,
    // interleaved, for a second of failing syncs.
    let (mut shared, mut unshared) = (Vec::new(), Vec::new());
    let end = Instant::now() + Duration::from_secs(1);
    while Instant::now() < end {
        for _ in 0..100 {
            let start = std::time::Instant::now();
            let _ = fleet[1].call(async { Ok::<_, Error>(()) }).await;
            shared.push(start.elapsed());
            let start = std::time::Instant::now();
            let _ = local.call(async { Ok::<_, Error>(()) }).await;
            unshared.push(start.elapsed());
        }
        sleep(Duration::from_millis(1)).await;
    }
    shared.sort();
    unshared.sort();
    let (p99s, p99u) = (percentile(&shared, 0.99), percentile(&unshared, 0.99));
    let (maxs, maxu) = (*shared.last().unwrap(), *unshared.last().unwrap());
    eprintln!(
        "{} calls each, Redis dead: p99 shared {p99s:?} / unshared {p99u:?}, max shared {maxs:?} / unshared {maxu:?}",
        shared.len()
    );
    assert!(
        p99s <= p99u + Duration::from_millis(1),
        "p99 {p99s:?} vs {p99u:?}"
    );
    // A call that waited on Redis would wait out a 250 ms connection or
    // 500 ms response timeout.
    assert!(maxs < Duration::from_millis(100), "max {maxs:?}");

    // Deciding alone: replica 0 trips on its own counts, the others do not
    // hear of it.
    for _ in 0..10 {
        let _ = outcome(fleet[0], Outcome::Failure);
    }
    assert_eq!(fleet[0].state(), State::Open);
    sleep(3 * INTERVAL).await;
    assert!(fleet[1..].iter().all(|b| b.state() == State::Closed));

    // Redis back: the replicas rejoin, replica 0 publishes its opening,
    // the others follow it.
    let _server = OwnRedis::start(PORT).await;
    let rejoined = until("all rejoin", Duration::from_secs(3), || {
        fleet.iter().all(|b| b.snapshot().fleet == Fleet::Joined)
    })
    .await;
    eprintln!("all replicas follow the fleet again {rejoined:?} after Redis restarted");
    until(
        "the others follow the opening",
        3 * INTERVAL + SLACK,
        || fleet.iter().all(|b| b.state() == State::Open),
    )
    .await;
    drop(service);
}

/// The environment variable that makes [`replica_process`] a replica of
/// the service it names; unset, that test has nothing to do.
const REPLICA_ENV: &str = "RESILIENCE_TEST_REPLICA_OF";

/// Three real processes, each with its own registry and its own sync
/// task: failures recorded by two of them, each under `min` alone, open
/// the breaker in all three, and each rejects within one sync interval
/// of the opening published in Redis.
///
/// Each replica is this test binary again, running [`replica_process`],
/// driven by lines on its stdin and answering with `replica: …` lines.
#[test]
#[ignore = "needs Redis at 127.0.0.1:6379"]
fn three_processes_trip_together_on_the_fleets_totals() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Child, Stdio};
    use std::sync::mpsc;

    struct Replica {
        child: Child,
        answers: mpsc::Receiver<String>,
    }
    impl Replica {
        fn tell(&mut self, line: &str) {
            let stdin = self.child.stdin.as_mut().expect("piped stdin");
            writeln!(stdin, "{line}").expect("the replica reads its stdin");
        }
        fn answer(&self) -> String {
            self.answers
                .recv_timeout(Duration::from_secs(10))
                .expect("the replica answers within 10 s")
        }
    }
    impl Drop for Replica {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    let service = Service::new("procs", 6379);
    let mut fleet: Vec<Replica> = (0..3)
        .map(|_| {
            let mut child = Command::new(std::env::current_exe().expect("the test binary"))
                .args(["replica_process", "--exact", "--ignored", "--nocapture"])
                .env(REPLICA_ENV, &service.0)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("the test binary starts again");
            let stdout = child.stdout.take().expect("piped stdout");
            let (tx, answers) = mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(answer) = line.strip_prefix("replica: ")
                        && tx.send(answer.to_owned()).is_err()
                    {
                        break;
                    }
                }
            });
            Replica { child, answers }
        })
        .collect();
    for replica in &fleet {
        assert_eq!(replica.answer(), "joined");
    }

    // 6 failures in replica 0: under `min` (10) for it and for the fleet.
    fleet[0].tell("fail 6");
    assert_eq!(fleet[0].answer(), "closed");
    std::thread::sleep(3 * INTERVAL);
    assert_eq!(redis_cli(6379, &["EXISTS", &service.key("open")]), "0");
    for replica in &mut fleet {
        replica.tell("state");
        assert_eq!(replica.answer(), "closed", "no replica opens under min");
    }

    // 6 more in replica 1, under `min` alone: the fleet has 12 failures.
    fleet[1].tell("fail 6");
    assert_eq!(fleet[1].answer(), "closed", "no local trip");
    let start = std::time::Instant::now();
    while redis_cli(6379, &["EXISTS", &service.key("open")]) != "1" {
        assert!(
            start.elapsed() < 2 * INTERVAL + SLACK,
            "the fleet did not open"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    for replica in &mut fleet {
        replica.tell("until-rejected");
    }
    for (i, replica) in fleet.iter().enumerate() {
        let answer = replica.answer();
        let waited: u64 = answer
            .strip_prefix("rejected after ")
            .and_then(|ms| ms.strip_suffix(" ms"))
            .and_then(|ms| ms.parse().ok())
            .unwrap_or_else(|| panic!("replica {i}: {answer}"));
        eprintln!("replica {i} rejected {waited} ms after the opening was seen in Redis");
        assert!(
            Duration::from_millis(waited) <= INTERVAL + SLACK,
            "replica {i} took {waited} ms"
        );
    }
    for replica in &mut fleet {
        replica.tell("quit");
    }
    for replica in &mut fleet {
        let status = replica.child.wait().expect("the replica exits");
        assert!(status.success(), "a replica failed: {status}");
    }
    drop(service);
}

/// One replica of [`three_processes_trip_together_on_the_fleets_totals`],
/// in a process of its own; does nothing unless that test started it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a replica process, started by three_processes_trip_together_on_the_fleets_totals"]
async fn replica_process() {
    let Ok(service) = std::env::var(REPLICA_ENV) else {
        return;
    };
    let registry = Registry::builder()
        .service(service)
        .breaker("user", config(URL))
        .build()
        .expect("a valid config");
    let breaker = registry.breaker("user", config(URL));
    outcome(breaker, Outcome::Success).unwrap();
    until("joined", Duration::from_secs(3), || {
        breaker.snapshot().fleet == Fleet::Joined
    })
    .await;
    println!("replica: joined");
    // `State` may grow: the label it writes itself.
    let state = |b: &CircuitBreaker| b.state().as_str();
    loop {
        let line = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|_| line)
        })
        .await
        .unwrap()
        .expect("stdin");
        let command = line.trim();
        if let Some(n) = command.strip_prefix("fail ") {
            for _ in 0..n.parse::<u32>().expect("a count") {
                outcome(breaker, Outcome::Failure).expect("admitted while closed");
            }
            println!("replica: {}", state(breaker));
        } else if command == "state" {
            println!("replica: {}", state(breaker));
        } else if command == "until-rejected" {
            let start = Instant::now();
            while breaker.try_acquire().is_ok() && start.elapsed() < Duration::from_secs(5) {
                sleep(Duration::from_millis(1)).await;
            }
            if breaker.try_acquire().is_err() {
                println!("replica: rejected after {} ms", start.elapsed().as_millis());
            } else {
                println!("replica: still admitting after 5 s");
            }
        } else if command == "quit" || command.is_empty() {
            return;
        } else {
            panic!("unknown command {command:?}");
        }
    }
}
