//! What a breaker the registry creates (the breaker of a
//! `#[circuit_breaker(name = …)]` site) costs in heap.

mod heap_common;

use heap_common::live_heap;
use resilience::breaker::BreakerConfig;
use resilience::registry::Registry;

/// A named breaker within 512 bytes of heap, its place in the
/// registry's table included: 10,000 of them, each called from this
/// thread only, with no failure yet.
#[test]
fn a_breaker_in_a_registry_takes_at_most_512_bytes_of_heap() {
    let n = 10_000;
    let names: Vec<&'static str> = (0..n)
        .map(|i| &*Box::leak(format!("dependency-{i}").into_boxed_str()))
        .collect();
    let registry = Registry::builder().build().unwrap();
    let before = live_heap();
    for &name in &names {
        let breaker = registry.breaker(name, BreakerConfig::new());
        breaker.try_acquire().unwrap().success();
    }
    let each = (live_heap() - before) / n as isize;
    assert!(each <= 512, "{each} B a breaker");
}

/// Two sites that give one name different values: the first ones stay,
/// and the conflict is remembered where it is kept (out of the table),
/// so that the second registration finds the first breaker.
#[test]
fn a_conflicting_registration_gets_the_first_breaker() {
    let registry = Registry::builder().build().unwrap();
    let first = registry.breaker("ledger", BreakerConfig::new().with_min_requests(7));
    let again = registry.breaker("ledger", BreakerConfig::new().with_min_requests(9));
    let third = registry.breaker("ledger", BreakerConfig::new().with_min_requests(9));
    assert!(std::ptr::eq(first, again) && std::ptr::eq(first, third));
    assert_eq!(first.config().min_requests(), 7);
}
