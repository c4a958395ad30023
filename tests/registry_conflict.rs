//! Two `#[circuit_breaker]` sites of one name with other
//! settings. The breaker ran with the settings of whichever fn was *called*
//! first (the other's with only a WARN); every site is known when the
//! registry is built, so the disagreement is refused then, naming both
//! sites and the settings that differ. In a binary of its own: every
//! registry of this program is refused.
#![deny(warnings)]

mod macros_common;

use std::time::Duration;

use macros_common::{ClientError, Script};
use resilience::breaker::BreakerConfig;
use resilience::circuit_breaker;
use resilience::registry::Registry;

#[circuit_breaker(name = "users", cooldown = "2s")]
async fn get_user(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[circuit_breaker(name = "users")]
async fn list_users(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

// Agreeing sites of one name are fine.
#[circuit_breaker(name = "orders", min = 5)]
async fn get_order(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[circuit_breaker(name = "orders", min = 5)]
async fn list_orders(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[test]
fn two_sites_of_one_name_that_disagree_are_refused_naming_both() {
    let err = Registry::builder().build().unwrap_err();
    assert_eq!(err.errors().count(), 1, "{err}");
    assert_eq!(err.subject(), "circuit breaker `users`");
    assert_eq!(err.value(), "`cooldown` 2s and 30s", "{err}");
    let text = err.to_string();
    let sites: Vec<_> = text.match_indices("tests/registry_conflict.rs:").collect();
    assert_eq!(sites.len(), 2, "both sites are named: {err}");
    assert!(text.contains("[breakers.users]"), "the fix is named: {err}");
}

#[tokio::test(start_paused = true)]
async fn a_whole_configuration_in_code_settles_the_name() {
    let registry = Registry::builder()
        .breaker(
            "users",
            BreakerConfig::new().with_cooldown(Duration::from_secs(5)),
        )
        .build()
        .unwrap();
    let users = registry.find_breaker("users").unwrap();
    assert_eq!(users.config().cooldown(), Duration::from_secs(5));
    assert_eq!(
        registry
            .find_breaker("orders")
            .unwrap()
            .config()
            .min_requests(),
        5
    );
}

/// Referenced, so that none is dead code; never called (the global
/// registry of this program cannot be built).
#[test]
fn the_sites_exist() {
    let _ = (get_user, list_users, get_order, list_orders, Script::new);
}
