//! A configuration installed in a binary that links no `#[retry]` or
//! `#[circuit_breaker]` fn: its section names cannot be checked, and that
//! is said at WARN rather than skipped in silence. Alone in its binary: one
//! global registry per process, and tracing caches a callsite's interest
//! process-wide. (This crate's tests link no protected fn: the attributes
//! live in the facade.)

mod events_common;

use events_common::Events;
use resilience_runtime::registry::{self, Registry};

#[test]
fn sections_that_cannot_be_checked_are_reported() {
    let warnings = Events::default();
    let _guard = tracing::subscriber::set_default(warnings.clone());
    let registry = Registry::builder()
        .config_str(
            "[breakers.users]\nmin = 5\n\n[retry.\"users.get\"]\nmax = 2\n",
            "unlinked.toml",
        )
        .unwrap()
        .build()
        .unwrap();
    registry::install(registry).unwrap();

    let lines = warnings.take();
    assert_eq!(lines.len(), 1, "{lines:?}");
    for needle in [
        "sections=2",
        "origin=\"unlinked.toml\"",
        "no `#[retry]` or `#[circuit_breaker]` fn is linked into this binary",
        "could not be checked",
    ] {
        assert!(lines[0].contains(needle), "{needle} not in {}", lines[0]);
    }
}
