//! `#[retry]` expanded for real, on every fn shape, on tokio's paused clock.

mod macros_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use macros_common::{ClientError, Script};
use resilience::{IdempotencyKey, retry};
use tokio::time::Instant;

struct Client {
    script: Script,
}

impl Client {
    #[retry(max = 3, initial = "100ms")]
    async fn get_user(&self, id: u64) -> Result<u64, ClientError> {
        self.script.call()?;
        Ok(id)
    }

    #[retry(max = 5)]
    async fn put_user(&mut self, name: String) -> Result<String, ClientError> {
        self.script.call()?;
        // The body consumes its copy: every attempt got one.
        Ok(name)
    }

    #[retry]
    async fn get_shared(self: Arc<Self>, id: u64) -> Result<u64, ClientError> {
        self.script.call()?;
        let this = self;
        Ok(id + u64::from(this.script.calls()))
    }

    #[retry(max = 4)]
    async fn create_order(
        &self,
        key: IdempotencyKey,
        seen: &std::sync::Mutex<Vec<String>>,
    ) -> Result<(), ClientError> {
        seen.lock().unwrap().push(key.as_str().to_owned());
        self.script.call()
    }
}

fn client(statuses: &[u16]) -> Client {
    Client {
        script: Script::new(statuses),
    }
}

#[tokio::test(start_paused = true)]
async fn two_bad_gateways_then_ok_is_three_attempts() {
    let client = client(&[502, 502, 200]);
    let start = Instant::now();
    assert_eq!(client.get_user(7).await, Ok(7));
    assert_eq!(client.script.calls(), 3);
    // Two pauses of about 100 and 200 ms, ±25 %.
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(225) && waited <= Duration::from_millis(375),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_bad_request_is_not_retried() {
    let client = client(&[400]);
    assert_eq!(client.get_user(7).await, Err(ClientError::Status(400)));
    assert_eq!(client.script.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn attempts_are_bounded_by_max() {
    let client = client(&[503, 503, 503, 503]);
    assert_eq!(client.get_user(7).await, Err(ClientError::Status(503)));
    assert_eq!(client.script.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn mut_self_and_by_value_arguments() {
    let mut client = client(&[502, 504]);
    let name = client.put_user("ada".to_owned()).await;
    assert_eq!(name.as_deref(), Ok("ada"));
    assert_eq!(client.script.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn arc_self_is_cloned_per_attempt() {
    let client = Arc::new(client(&[500]));
    assert_eq!(client.clone().get_shared(1).await, Ok(3));
    assert_eq!(Arc::strong_count(&client), 1);
}

#[tokio::test(start_paused = true)]
async fn the_idempotency_key_is_the_same_on_every_attempt() {
    let client = client(&[502, 503, 200]);
    let seen = std::sync::Mutex::new(Vec::new());
    let key = IdempotencyKey::new();
    client.create_order(key.clone(), &seen).await.unwrap();
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen, vec![key.as_str().to_owned(); 3]);
}

static SLOW_CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(attempt_timeout = "1s", max_elapsed = "5s")]
async fn fetch_slowly() -> Result<u32, ClientError> {
    let call = SLOW_CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    if call == 1 {
        // Hangs: the attempt timeout cuts it and the next attempt runs.
        std::future::pending::<()>().await;
    }
    Ok(call)
}

#[tokio::test(start_paused = true)]
async fn a_hanging_attempt_is_cut_by_attempt_timeout() {
    let start = Instant::now();
    assert_eq!(fetch_slowly().await, Ok(2));
    let waited = start.elapsed();
    assert!(waited >= Duration::from_secs(1), "{waited:?}");
    assert!(waited < Duration::from_millis(1200), "{waited:?}");
}

fn only_gateway_errors(error: &ClientError) -> bool {
    matches!(error, ClientError::Status(502))
}

#[retry(when = only_gateway_errors, max = 5)]
async fn get_with_classifier(script: &Script) -> Result<(), ClientError> {
    script.call()
}

#[tokio::test(start_paused = true)]
async fn a_custom_classifier_decides_instead_of_classify() {
    let script = Script::new(&[502, 502, 503]);
    assert_eq!(
        get_with_classifier(&script).await,
        Err(ClientError::Status(503))
    );
    assert_eq!(script.calls(), 3);
}

#[retry(max = 2)]
async fn get_sum((a, b): (u32, u32), script: &Script) -> Result<u32, ClientError> {
    script.call()?;
    Ok(a + b)
}

#[tokio::test(start_paused = true)]
async fn pattern_parameters_are_destructured_per_attempt() {
    let script = Script::new(&[502]);
    assert_eq!(get_sum((2, 3), &script).await, Ok(5));
    assert_eq!(script.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_caller_deadline_stops_the_chain() {
    let client = client(&[503, 503, 503]);
    let result =
        resilience::deadline::with_timeout(Duration::from_millis(50), client.get_user(1)).await;
    assert_eq!(
        result,
        Err(ClientError::Resilience(
            resilience::Error::deadline_exceeded(1)
        ))
    );
    assert_eq!(client.script.calls(), 1);
}

#[test]
fn the_futures_stay_send() {
    fn assert_send<T: Send>(_: &T) {}
    let mut client = client(&[]);
    assert_send(&client.get_user(1));
    assert_send(&client.put_user(String::new()));
    assert_send(&fetch_slowly());
    let script = Script::new(&[]);
    assert_send(&get_with_classifier(&script));
}

#[retry(max = 3, initial = "100ms")]
async fn get_inner(script: &Script) -> Result<(), ClientError> {
    script.call()
}

#[retry(max = 3, initial = "100ms")]
async fn get_outer(
    script: &Script,
    outer_attempts: &std::sync::atomic::AtomicU32,
) -> Result<(), ClientError> {
    outer_attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    get_inner(script).await
}

/// An annotated fn calling another on the same task retries at one layer:
/// the bottom sees `max` attempts per logical call, not `max × max`.
#[tokio::test(start_paused = true)]
async fn nested_chains_retry_at_one_layer() {
    let script = Script::new(&[503; 20]);
    let outer = std::sync::atomic::AtomicU32::new(0);
    assert_eq!(
        get_outer(&script, &outer).await,
        Err(ClientError::Status(503))
    );
    assert_eq!(
        script.calls(),
        3,
        "3 attempts reached the dependency, not 9"
    );
    assert_eq!(outer.load(std::sync::atomic::Ordering::SeqCst), 3);

    // Alone, the inner fn retries as usual.
    let alone = Script::new(&[503; 20]);
    assert_eq!(get_inner(&alone).await, Err(ClientError::Status(503)));
    assert_eq!(alone.calls(), 3);

    // Nested in the runtime's own executor too.
    let by_hand = Script::new(&[503, 503, 200]);
    let result = resilience::retry::Policy::http()
        .retry(|| get_inner(&by_hand))
        .await;
    assert_eq!(result, Ok(()));
    assert_eq!(by_hand.calls(), 3);
}

#[retry(max = 3, initial = "100ms", budget = "macros-retry-budget")]
async fn get_from_a_dead_dependency(requests: Arc<AtomicU32>) -> Result<(), ClientError> {
    requests.fetch_add(1, Ordering::SeqCst);
    tokio::task::yield_now().await;
    Err(ClientError::Status(503))
}

/// `budget = ".."` names the budget the chain's retries draw on: 100 calls
/// at once against a dead dependency get the default budget's 100 retries
/// of floor plus 20 % of the calls, not 200.
#[tokio::test(start_paused = true)]
async fn the_budget_named_in_the_attribute_caps_the_retries() {
    let requests = Arc::new(AtomicU32::new(0));
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..100 {
        calls.spawn(get_from_a_dead_dependency(Arc::clone(&requests)));
    }
    while let Some(call) = calls.join_next().await {
        assert_eq!(call.unwrap(), Err(ClientError::Status(503)));
    }
    assert_eq!(requests.load(Ordering::SeqCst), 100 + 100 + 20);
    let budget = resilience::registry::global().budget("macros-retry-budget");
    assert_eq!(budget.balance(), 0);
}

#[retry(max = 3, initial = "100ms")]
async fn get_busy(at: &std::sync::Mutex<Vec<tokio::time::Instant>>) -> Result<(), ClientError> {
    at.lock().unwrap().push(tokio::time::Instant::now());
    tokio::task::yield_now().await;
    Err(ClientError::Status(503))
}

/// `seed_jitter` makes the pauses of an annotated fn the same on every
/// run, and another seed draws others.
#[tokio::test(start_paused = true)]
async fn a_seed_makes_the_pauses_of_an_attribute_repeatable() {
    async fn pauses(seed: u64) -> Vec<Duration> {
        let _seed = resilience::retry::seed_jitter(seed);
        let at = std::sync::Mutex::new(Vec::new());
        assert!(get_busy(&at).await.is_err());
        let at = at.into_inner().unwrap();
        at.windows(2).map(|w| w[1] - w[0]).collect()
    }
    let first = pauses(42).await;
    assert_eq!(first.len(), 2);
    assert_eq!(first, pauses(42).await);
    assert_ne!(first, pauses(43).await);
}

// A caller's override for one call (`retry::once`, `retry::at_most`): fewer
// attempts than the attribute's, never more, for this call only.

#[tokio::test(start_paused = true)]
async fn once_makes_one_attempt_of_an_annotated_fn() {
    let client = client(&[503, 503, 200]);
    assert_eq!(
        retry::once(client.get_user(7)).await,
        Err(ClientError::Status(503)),
        "the attempt's own error, as when the attempts are used up"
    );
    assert_eq!(client.script.calls(), 1);
    // The next call, outside the override, has the attribute's three.
    assert_eq!(client.get_user(7).await, Ok(7));
    assert_eq!(client.script.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn at_most_lowers_the_attempts_and_cannot_raise_them() {
    let two = std::num::NonZeroU32::new(2).unwrap();
    let client = client(&[503, 503, 200]);
    assert_eq!(
        retry::at_most(two, client.get_user(7)).await,
        Err(ClientError::Status(503))
    );
    assert_eq!(client.script.calls(), 2);

    // `max = 3` stays the bound when the caller asks for ten.
    let ten = std::num::NonZeroU32::new(10).unwrap();
    let client = self::client(&[503, 503, 503, 503, 200]);
    assert_eq!(
        retry::at_most(ten, client.get_user(7)).await,
        Err(ClientError::Status(503))
    );
    assert_eq!(client.script.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn the_override_reaches_an_annotated_fn_called_deep_inside() {
    async fn handler(client: &Client) -> Result<u64, ClientError> {
        let user = client.get_user(1).await?;
        client.get_user(user + 1).await
    }
    let client = client(&[200, 502, 200]);
    assert_eq!(
        retry::once(handler(&client)).await,
        Err(ClientError::Status(502))
    );
    assert_eq!(client.script.calls(), 2, "the second fn was not retried");
}
