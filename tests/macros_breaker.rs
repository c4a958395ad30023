//! `#[circuit_breaker]` (with and without `#[retry]`) expanded for real, on
//! tokio's paused clock.

mod macros_common;

use std::time::Duration;

use macros_common::{ClientError, Script};
use resilience::breaker::{CircuitBreaker, State};
use resilience::{circuit_breaker, registry, retry};

fn breaker(name: &str) -> &'static CircuitBreaker {
    registry::global()
        .breakers()
        .into_iter()
        .find(|breaker| breaker.name() == name)
        .unwrap_or_else(|| panic!("no breaker named {name}"))
}

fn is_down(result: &Result<(), ClientError>, name: &str) -> bool {
    matches!(
        result,
        Err(ClientError::Resilience(resilience::Error::DependencyDown(down))) if down.breaker() == name
    )
}

// Two fns calling the same dependency share its breaker by name.
#[circuit_breaker(name = "shared", min = 4, ratio = 0.5, cooldown = "30s")]
async fn get_profile(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[circuit_breaker(name = "shared", min = 4, ratio = 0.5, cooldown = "30s")]
async fn get_avatar(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[tokio::test(start_paused = true)]
async fn a_breaker_shared_by_name_trips_for_both_fns_and_then_runs_nothing() {
    let profile = Script::new(&[503, 503, 503, 503]);
    for _ in 0..4 {
        assert_eq!(get_profile(&profile).await, Err(ClientError::Status(503)));
    }
    assert_eq!(breaker("shared").state(), State::Open);

    let avatar = Script::new(&[]);
    assert!(is_down(&get_avatar(&avatar).await, "shared"));
    assert!(is_down(&get_profile(&profile).await, "shared"));
    // Rejected without running the body.
    assert_eq!((avatar.calls(), profile.calls()), (0, 4));

    // After the cooldown one probe goes through and closes the breaker.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(get_avatar(&avatar).await, Ok(()));
    assert_eq!(breaker("shared").state(), State::Closed);
}

// The breaker counts the logical call once: two failed attempts and a
// success are one success. Counted per attempt, 2 failures out of 3 calls
// would trip it (min 3, ratio 0.5).
#[circuit_breaker(name = "once", min = 3, ratio = 0.5)]
#[retry(max = 3)]
async fn get_order(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[tokio::test(start_paused = true)]
async fn the_breaker_counts_one_logical_call_once() {
    let script = Script::new(&[502, 502, 200]);
    assert_eq!(get_order(&script).await, Ok(()));
    assert_eq!(script.calls(), 3);
    let snapshot = breaker("once").snapshot();
    assert_eq!((snapshot.calls, snapshot.failures), (1, 0));
    assert_eq!(snapshot.state, State::Closed);
}

#[circuit_breaker(name = "no-retry-when-open", min = 1, ratio = 1.0)]
#[retry(max = 3)]
async fn get_invoice(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_runs_no_attempt_and_no_retry() {
    let script = Script::new(&[503, 503, 503]);
    let started = tokio::time::Instant::now();
    assert_eq!(get_invoice(&script).await, Err(ClientError::Status(503)));
    assert_eq!(script.calls(), 3);
    assert_eq!(breaker("no-retry-when-open").state(), State::Open);

    let before = started.elapsed();
    assert!(is_down(&get_invoice(&script).await, "no-retry-when-open"));
    assert_eq!(script.calls(), 3);
    assert_eq!(started.elapsed(), before, "a rejection does not wait");
}

struct Catalog {
    script: Script,
}

impl Catalog {
    #[circuit_breaker(name = "catalog", min = 4, ratio = 0.5, fallback = Self::get_cached)]
    #[retry(max = 2)]
    async fn get_price(&self, sku: String) -> Result<String, ClientError> {
        self.script.send().await?;
        Ok(format!("live:{sku}"))
    }

    async fn get_cached(&self, sku: String, _error: ClientError) -> Result<String, ClientError> {
        Ok(format!("stale:{sku}"))
    }
}

#[tokio::test(start_paused = true)]
async fn the_fallback_runs_only_on_rejection_or_exhaustion() {
    let catalog = Catalog {
        script: Script::new(&[502, 200, 404, 503, 503, 503, 503]),
    };
    // A retried success: no fallback.
    assert_eq!(catalog.get_price("a".into()).await.as_deref(), Ok("live:a"));
    // A permanent error is the caller's answer, not the fallback's.
    assert_eq!(
        catalog.get_price("b".into()).await,
        Err(ClientError::Status(404))
    );
    // Retries exhausted on a transient error: the fallback answers.
    assert_eq!(
        catalog.get_price("c".into()).await.as_deref(),
        Ok("stale:c")
    );
    assert_eq!(catalog.script.calls(), 5);
    // Two failed calls out of four: the breaker opens …
    assert_eq!(
        catalog.get_price("d".into()).await.as_deref(),
        Ok("stale:d")
    );
    assert_eq!(breaker("catalog").state(), State::Open);
    assert_eq!(catalog.script.calls(), 7);
    // … and the fallback answers without a call.
    assert_eq!(
        catalog.get_price("e".into()).await.as_deref(),
        Ok("stale:e")
    );
    assert_eq!(catalog.script.calls(), 7);
}

#[test]
fn the_futures_stay_send() {
    fn assert_send<T: Send>(_: &T) {}
    let script = Script::new(&[]);
    assert_send(&get_order(&script));
    assert_send(&get_profile(&script));
    let catalog = Catalog {
        script: Script::new(&[]),
    };
    assert_send(&catalog.get_price(String::new()));
}
