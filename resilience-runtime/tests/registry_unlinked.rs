//! A configuration installed in a binary that links no `#[retry]` or
//! `#[circuit_breaker]` fn: its section names cannot be checked, and that
//! is said at WARN rather than skipped in silence. Alone in its binary: one
//! global registry per process, and tracing caches a callsite's interest
//! process-wide. (This crate's tests link no protected fn: the attributes
//! live in the facade.)

use std::sync::{Arc, Mutex};

use resilience_runtime::registry::{self, Registry};

/// The WARN events of the test, as `field=value` lines.
#[derive(Default, Clone)]
struct Warnings(Arc<Mutex<Vec<String>>>);

impl tracing::Subscriber for Warnings {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() == tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn sections_that_cannot_be_checked_are_reported() {
    let warnings = Warnings::default();
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

    let lines = warnings.0.lock().unwrap().clone();
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
