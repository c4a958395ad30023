//! Properties that hold for every valid policy.
//!
//! 200 cases per property by default; the full run is 10,000:
//! `PROPTEST_CASES=10000 cargo test -p resilience-runtime --all-features --test retry_properties` (about 4 s here, debug build).

use std::time::Duration;

use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use resilience_runtime::retry::{Backoff, Event, Jitter, Policy};
use resilience_runtime::{Error, retry::Classify, retry::Verdict};
use tokio::time::Instant;

#[derive(Debug)]
struct Flaky;

impl Classify for Flaky {
    fn classify(&self) -> Verdict {
        Verdict::Transient
    }
}

impl From<Error> for Flaky {
    fn from(_: Error) -> Self {
        Flaky
    }
}

fn jitter() -> impl Strategy<Value = Jitter> {
    prop_oneof![
        (0.1f64..=1.0).prop_map(Jitter::Symmetric),
        (0.1f64..=1.0).prop_map(Jitter::Additive),
        Just(Jitter::Full),
        Just(Jitter::Decorrelated),
    ]
}

prop_compose! {
    fn policy()(
        initial_ms in 1u64..2_000,
        extra_ms in 0u64..30_000,
        multiplier in 1.0f64..8.0,
        jitter in jitter(),
        max_attempts in 1u32..20,
        max_elapsed_ms in 1u64..120_000,
    ) -> Policy {
        Policy::builder()
            .with_backoff(
                Backoff::new()
                    .with_initial(Duration::from_millis(initial_ms))
                    .with_max_interval(Duration::from_millis(initial_ms + extra_ms))
                    // Decorrelated jitter grows by itself: a multiplier
                    // beside it is refused, so only the default goes.
                    .with_multiplier(match jitter {
                        Jitter::Decorrelated => 2.0,
                        _ => multiplier,
                    })
                    .with_jitter(jitter),
            )
            .with_max_attempts(max_attempts)
            .with_max_elapsed(Duration::from_millis(max_elapsed_ms))
            .build()
            .expect("the strategy only builds valid policies")
    }
}

/// `PROPTEST_CASES` when set (the documented full run is 10,000), else 200.
fn cases() -> u32 {
    match std::env::var("PROPTEST_CASES") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("PROPTEST_CASES={text:?} is not a number of cases")),
        Err(_) => 200,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn no_pause_exceeds_the_cap_and_no_chain_exceeds_max_elapsed(
        policy in policy(),
        seed in any::<u64>(),
        attempt_ms in proptest::collection::vec(0u64..3_000, 20),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let (elapsed, pauses, attempts) = runtime.block_on(async {
            let mut pauses = Vec::new();
            let mut durations = attempt_ms.iter().copied().cycle();
            let start = Instant::now();
            let mut attempts = 0;
            let _ = policy
                .retry(|| {
                    attempts += 1;
                    let took = Duration::from_millis(durations.next().unwrap_or(0));
                    async move {
                        tokio::time::sleep(took).await;
                        Err::<(), _>(Flaky)
                    }
                })
                .notify(|event: &Event<'_, Flaky>| {
                    if let Event::Retry { delay, .. } = event {
                        pauses.push(*delay);
                    }
                })
                .with_rng(SmallRng::seed_from_u64(seed))
                .await;
            (start.elapsed(), pauses, attempts)
        });
        let cap = policy.backoff().max_pause();
        for pause in &pauses {
            prop_assert!(*pause <= cap, "pause {pause:?} above {cap:?}");
        }
        prop_assert!(elapsed <= policy.max_elapsed(), "chain took {elapsed:?}");
        prop_assert!(attempts <= policy.max_attempts());
        prop_assert_eq!(pauses.len() + 1, attempts as usize);
    }
}
