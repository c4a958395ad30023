//! A rejection carries the end of the cooldown it was
//! made on, and [`DependencyDown::retry_after`] reads only that: it never
//! looks up, nor creates, the global registry.
#![deny(warnings)]

use std::time::Duration;

use resilience::breaker::BreakerConfig;
use resilience::registry::{self, Registry};

/// Before: `retry_after()` looked the breaker up in the global registry,
/// creating it from `RESILIENCE_CONFIG` (here a file that does not exist:
/// a panic), so that a later `install()` failed with "already exists"; and
/// a breaker of another registry, or built alone, had no cooldown to tell.
#[tokio::test(start_paused = true)]
async fn retry_after_is_carried_by_the_rejection_and_creates_no_registry() {
    // SAFETY: the only test of this binary, before any other thread runs.
    unsafe { std::env::set_var(registry::CONFIG_ENV, "/nonexistent/resilience.toml") };
    let registry = Registry::builder().build().unwrap();
    let config = BreakerConfig::new()
        .with_min_requests(1)
        .with_cooldown(Duration::from_secs(30));
    let breaker = registry.breaker("dependency-down", config);
    breaker.try_acquire().unwrap().failure();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let down = breaker.try_acquire().unwrap_err();
    assert_eq!(down.state(), "open");
    assert_eq!(down.retry_after(), Some(Duration::from_secs(20)));
    // The rejection keeps counting down after it was made.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(down.retry_after(), Some(Duration::from_secs(15)));
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(down.retry_after(), Some(Duration::ZERO));

    // Forced open: no cooldown to wait for.
    breaker.force_open();
    assert_eq!(breaker.try_acquire().unwrap_err().retry_after(), None);

    // Nothing created the global registry: installing one still works.
    unsafe { std::env::remove_var(registry::CONFIG_ENV) };
    registry::install(Registry::builder().build().unwrap()).unwrap();
}
