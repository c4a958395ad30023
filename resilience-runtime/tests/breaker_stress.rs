//! Thousands of concurrent tasks against one breaker under a failure storm:
//! every call is accounted for, probes never exceed the limit, nothing
//! deadlocks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use resilience_runtime::breaker::{BreakerConfig, CircuitBreaker, State};
use resilience_runtime::retry::{Classify, HttpStatus, Verdict};

#[derive(Debug)]
enum E {
    Status(u16),
    Down,
    Other,
}

impl Classify for E {
    fn classify(&self) -> Verdict {
        match self {
            E::Status(code) => HttpStatus(*code).classify(),
            _ => Verdict::Permanent,
        }
    }
}

impl From<resilience_runtime::Error> for E {
    fn from(err: resilience_runtime::Error) -> Self {
        match err {
            resilience_runtime::Error::DependencyDown(_) => E::Down,
            _ => E::Other,
        }
    }
}

#[derive(Default)]
struct Tally {
    ran: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
    rejected: AtomicU64,
    probes_seen: AtomicU64,
    max_probes: AtomicU32,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_storm_adds_up_and_never_deadlocks() {
    const TASKS: u64 = 4_000;
    const CALLS: u64 = 25;
    let breaker = CircuitBreaker::new(
        "storm",
        BreakerConfig::new()
            .with_cooldown(Duration::from_millis(20))
            .with_window(Duration::from_millis(200))
            .with_half_open(2),
    )
    .unwrap();
    let tally = Arc::new(Tally::default());
    let transitions = Arc::new(AtomicU64::new(0));
    let seen = transitions.clone();
    breaker.on_state_change(move |_, from, to| {
        assert_ne!(from, to);
        seen.fetch_add(1, SeqCst);
    });

    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (breaker, tally) = (breaker.clone(), tally.clone());
        tasks.push(tokio::spawn(async move {
            for call in 0..CALLS {
                // A storm of 503s, with healthy stretches so the breaker
                // keeps closing and reopening.
                let failing = (task + call) % 7 < 5;
                let tally2 = tally.clone();
                let inside = breaker.clone();
                let result = breaker
                    .call(async move {
                        tally2.ran.fetch_add(1, SeqCst);
                        // Only an admitted call runs: while the breaker is
                        // half-open, its own count of probes in flight must
                        // never exceed the limit, sampled before and after
                        // the yield.
                        for _ in 0..2 {
                            let snap = inside.snapshot();
                            if snap.state == State::HalfOpen {
                                tally2.probes_seen.fetch_add(1, SeqCst);
                                tally2.max_probes.fetch_max(snap.probes_in_flight, SeqCst);
                            }
                            tokio::task::yield_now().await;
                        }
                        if failing { Err(E::Status(503)) } else { Ok(()) }
                    })
                    .await;
                let counter = match result {
                    Ok(()) => &tally.ok,
                    Err(E::Status(_)) => &tally.failed,
                    Err(E::Down) => &tally.rejected,
                    Err(E::Other) => unreachable!(),
                };
                counter.fetch_add(1, SeqCst);
                if call % 5 == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }));
    }
    let all = async {
        for task in tasks {
            task.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("no deadlock");

    let (ran, ok, failed, rejected) = (
        tally.ran.load(SeqCst),
        tally.ok.load(SeqCst),
        tally.failed.load(SeqCst),
        tally.rejected.load(SeqCst),
    );
    assert_eq!(
        ok + failed + rejected,
        TASKS * CALLS,
        "every call accounted for"
    );
    assert_eq!(ok + failed, ran, "a rejected call never ran");
    assert!(rejected > 0, "the storm opened the breaker");
    assert!(transitions.load(SeqCst) >= 2, "it opened and recovered");
    // Probes ran, and never more than `half_open = 2` at once.
    assert!(
        tally.probes_seen.load(SeqCst) > 0,
        "half-open admitted probes"
    );
    assert!(
        (1..=2).contains(&tally.max_probes.load(SeqCst)),
        "probes in flight: at most {}",
        tally.max_probes.load(SeqCst)
    );
    let snap = breaker.snapshot();
    assert!(snap.probes_in_flight == 0, "{snap:?}");
    // The breaker still works: force it closed and every call runs.
    breaker.reset();
    assert!(breaker.call(async { Ok::<_, E>(()) }).await.is_ok());
}
