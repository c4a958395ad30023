//! Two sites of one load limiter that declare other rates: the limiter
//! would keep the rate of whichever fn is called first, so the registry
//! refuses the program's sites when it is built, naming both sites and
//! both values, as it refuses two `#[circuit_breaker]` sites of one name
//! with other settings. In a binary of its own: every registry of this
//! program is refused.
#![deny(warnings)]

use resilience::limit::{LimitConfig, Rate};
use resilience::registry::Registry;
use resilience::{Error, circuit_breaker, retry};

#[retry(limit = "partner", rate = "100/s", burst = 20)]
async fn get_quote() -> Result<u32, Error> {
    tokio::task::yield_now().await;
    Ok(1)
}

#[circuit_breaker(name = "partner-orders", limit = "partner", rate = "50/s")]
async fn place_order() -> Result<u32, Error> {
    tokio::task::yield_now().await;
    Ok(1)
}

// Sites that agree, or that declare no rate, are fine.
#[retry(limit = "payments", rate = "25/s", burst = 5)]
async fn get_payment() -> Result<u32, Error> {
    tokio::task::yield_now().await;
    Ok(1)
}

#[retry(limit = "payments", rate = "25/s", burst = 5)]
async fn list_payments() -> Result<u32, Error> {
    tokio::task::yield_now().await;
    Ok(1)
}

#[retry(limit = "payments")]
async fn get_balance() -> Result<u32, Error> {
    tokio::task::yield_now().await;
    Ok(1)
}

#[test]
fn two_sites_of_one_limit_with_other_rates_are_refused_naming_both() {
    let err = Registry::builder().build().unwrap_err();
    assert_eq!(err.errors().count(), 1, "{err}");
    assert_eq!(err.subject(), "load limit `partner`");
    assert_eq!(err.field(), "rate");
    assert_eq!(
        err.value(),
        "`rate = \"100/s\"`, `burst = 20` and `rate = \"50/s\"`",
        "{err}"
    );
    let text = err.to_string();
    let sites: Vec<_> = text
        .match_indices("tests/registry_limit_conflict.rs:")
        .collect();
    assert_eq!(sites.len(), 2, "both sites are named: {err}");
    assert!(text.contains("[limits.partner]"), "the fix is named: {err}");
}

/// A whole configuration in code settles the name, as for breakers: the
/// attributes' rates are then not used.
#[test]
fn a_limit_in_code_settles_the_name() {
    let registry = Registry::builder()
        .limit("partner", LimitConfig::rate(Rate::per_second(10)))
        .build()
        .unwrap();
    let partner = registry.limiter("partner").unwrap();
    assert_eq!(partner.as_rate().unwrap().rate(), Rate::per_second(10));
    // The agreeing sites' rate is the limiter's, for the site without one
    // too.
    let payments = registry.limiter("payments").unwrap();
    let rate = payments.as_rate().unwrap();
    assert_eq!((rate.rate(), rate.burst()), (Rate::per_second(25), 5));
}

/// A section of the config file replaces the attributes' rate limit whole.
#[cfg(feature = "config-file")]
#[test]
fn a_section_replaces_the_attributes_rate() {
    let registry = Registry::builder()
        .limit("partner", LimitConfig::rate(Rate::per_second(10)))
        .config_str("[limits.payments]\nrate = \"10/s\"\n", "limits.toml")
        .unwrap()
        .build()
        .unwrap();
    let rate = registry.limiter("payments").unwrap();
    let rate = rate.as_rate().unwrap();
    assert_eq!((rate.rate(), rate.burst()), (Rate::per_second(10), 10));
}

/// Referenced, so that none is dead code; never called (the global
/// registry of this program cannot be built).
#[test]
fn the_sites_exist() {
    let _ = (
        get_quote,
        place_order,
        get_payment,
        list_payments,
        get_balance,
    );
}
