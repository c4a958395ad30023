//! Hostile input found by fuzzing (see RELIABILITY.md, "Hostile input"):
//! each case here failed on the code before its fix.
#![deny(warnings)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use resilience::registry::Registry;
use resilience::retry::{Classify, Event, Policy, Verdict};

#[derive(Debug)]
enum Throttled {
    /// The server said `Retry-After: <duration>`.
    Asked(Duration),
    /// The executor's own error (a timeout, an open breaker).
    Runtime(#[allow(dead_code)] resilience::Error),
}

impl Classify for Throttled {
    fn classify(&self) -> Verdict {
        match self {
            Throttled::Asked(after) => Verdict::RetryAfter(*after),
            Throttled::Runtime(_) => Verdict::Permanent,
        }
    }
}

impl From<resilience::Error> for Throttled {
    fn from(err: resilience::Error) -> Self {
        Throttled::Runtime(err)
    }
}

/// Runs a chain whose first attempt is told `Retry-After: asked`, and
/// returns the pause the executor took before the second attempt.
async fn pause_after(policy: Policy, asked: Duration) -> Result<Duration, Throttled> {
    let calls = AtomicU32::new(0);
    let mut delays = Vec::new();
    let started = tokio::time::Instant::now();
    policy
        .retry(|| async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 => Err(Throttled::Asked(asked)),
                _ => Ok(()),
            }
        })
        .notify(|event: &Event<'_, Throttled>| {
            if let Event::Retry { delay, .. } = event {
                delays.push(*delay);
            }
        })
        .await?;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(delays.len(), 1);
    // The pause taken is the one announced.
    assert_eq!(started.elapsed(), delays[0]);
    Ok(delays[0])
}

/// Before: the hint was cut to `max_retry_after` and the chain retried
/// after 60 s, earlier than the server asked. The guide: never retry
/// earlier than asked; a hint longer than the longest pause allowed gives
/// up at once, and the caller gets the error that carries it.
#[tokio::test(start_paused = true)]
async fn a_huge_retry_after_gives_up_at_once_with_the_hint() {
    // No budget to speak of: before the first fix the executor slept
    // 18446744073 s (the hint, bounded only by what max_elapsed holds).
    let policy = Policy::builder()
        .with_max_elapsed(Duration::MAX)
        .build()
        .unwrap();
    let asked = Duration::from_secs(u64::MAX);
    let started = tokio::time::Instant::now();
    let err = pause_after(policy, asked).await.unwrap_err();
    assert!(matches!(err, Throttled::Asked(d) if d == asked), "{err:?}");
    assert_eq!(started.elapsed(), Duration::ZERO);

    let policy = Policy::builder()
        .with_max_elapsed(Duration::from_secs(3600))
        .with_max_retry_after(Duration::from_secs(5))
        .build()
        .unwrap();
    let asked = Duration::from_secs(18_446_725_547);
    let err = pause_after(policy, asked).await.unwrap_err();
    assert!(matches!(err, Throttled::Asked(d) if d == asked), "{err:?}");
    assert_eq!(started.elapsed(), Duration::ZERO);
}

/// `Retry-After: 90` under the default 60 s maximum
/// and an hour of budget was retried after 60 s. It gives up at once, as
/// a hint beyond the time left does, with the 90 s in the error.
#[tokio::test(start_paused = true)]
async fn a_retry_after_beyond_the_maximum_is_not_shortened() {
    let policy = Policy::builder()
        .with_max_elapsed(Duration::from_secs(3600))
        .build()
        .unwrap();
    let mut reasons = Vec::new();
    let calls = AtomicU32::new(0);
    let started = tokio::time::Instant::now();
    let err = policy
        .retry(|| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(Throttled::Asked(Duration::from_secs(90)))
        })
        .notify(|event: &Event<'_, Throttled>| {
            if let Event::GaveUp { reason, .. } = event {
                reasons.push(*reason);
            }
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, Throttled::Asked(d) if d == Duration::from_secs(90)),
        "{err:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(reasons, [resilience::retry::GiveUp::RetryAfterTooLong]);
    // Exactly the maximum is still honoured.
    let policy = Policy::builder()
        .with_max_elapsed(Duration::from_secs(3600))
        .build()
        .unwrap();
    assert_eq!(
        pause_after(policy, Duration::from_secs(60)).await.unwrap(),
        Duration::from_secs(60)
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_within_the_maximum_is_honoured() {
    let policy = Policy::builder()
        .with_max_elapsed(Duration::from_secs(600))
        .build()
        .unwrap();
    assert_eq!(
        pause_after(policy, Duration::from_secs(42)).await.unwrap(),
        Duration::from_secs(42)
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_beyond_the_budget_left_gives_up_without_sleeping() {
    // 60 s is within the maximum, but not within the 5 s budget.
    let started = tokio::time::Instant::now();
    let err = pause_after(Policy::http(), Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Throttled::Asked(d) if d == Duration::from_secs(60)),
        "{err:?}"
    );
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[cfg(feature = "config-file")]
#[test]
fn half_open_beyond_the_probe_counter_is_refused() {
    let err = Registry::builder()
        .config_str("[breakers.user]\nhalf_open = 70000\n", "resilience.toml")
        .unwrap_err();
    assert_eq!(err.field(), "half_open");
    assert_eq!(err.value(), "70000");
    assert!(err.to_string().contains("65535"), "{err}");
    // The limit itself is fine.
    Registry::builder()
        .config_str("[breakers.user]\nhalf_open = 65535\n", "resilience.toml")
        .unwrap()
        .build()
        .unwrap();
}

#[cfg(feature = "config-file")]
#[test]
fn every_count_and_factor_has_a_limit_named_in_its_error() {
    // Before: each was accepted up to what its type holds (4294967295
    // attempts, a breaker judging after a million calls, pauses that
    // jump to the cap at once).
    for (section, key, bad, good, limit) in [
        ("retry.\"user.get\"", "max_attempts", "101", "100", "100"),
        ("retry.\"user.get\"", "multiplier", "10.5", "10.0", "10"),
        ("breakers.user", "min", "1000001", "1000000", "1000000"),
        (
            "breakers.user",
            "window_calls",
            "1000001",
            "1000000",
            "1000000",
        ),
    ] {
        let err = Registry::builder()
            .config_str(&format!("[{section}]\n{key} = {bad}\n"), "resilience.toml")
            .unwrap_err();
        assert_eq!(err.field(), key, "{err}");
        assert_eq!(err.value(), bad, "{err}");
        assert!(
            err.to_string().contains(&format!("limit is {limit}")),
            "{err}"
        );
        Registry::builder()
            .config_str(&format!("[{section}]\n{key} = {good}\n"), "resilience.toml")
            .unwrap()
            .build()
            .unwrap_or_else(|err| panic!("{key} = {good}: {err}"));
    }
}

#[cfg(feature = "config-file")]
#[test]
fn a_toml_duration_that_does_not_fit_is_refused_with_its_text() {
    for text in [
        "340282366920938463463374607431.999999999s",
        "94522879700260684295381835.999999999999h",
        "18446744073709551616s",
    ] {
        let toml = format!("[breakers.user]\ncooldown = \"{text}\"\n");
        let err = Registry::builder()
            .config_str(&toml, "resilience.toml")
            .unwrap_err();
        assert_eq!(err.field(), "cooldown", "{text}");
        assert!(err.to_string().contains(text), "{text}: {err}");
        assert!(err.to_string().contains("too long"), "{text}: {err}");
    }
}

#[cfg(feature = "config-file")]
#[test]
fn max_retry_after_is_read_from_the_toml_file() {
    Registry::builder()
        .config_str(
            "[retry.user]\nmax_retry_after = \"10s\"\n",
            "resilience.toml",
        )
        .unwrap()
        .build()
        .unwrap();
    let err = Registry::builder()
        .config_str(
            "[retry.user]\nmax_retry_after = \"ten\"\n",
            "resilience.toml",
        )
        .unwrap_err();
    assert_eq!(err.field(), "max_retry_after");
}
