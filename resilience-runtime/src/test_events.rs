//! Recording the events a test's own code logs, reliably beside the other
//! tests of the binary.
//!
//! tracing decides once per callsite, process-wide, whether anyone wants
//! its events. With one subscriber alive, that decision is taken against
//! the default of whichever thread reaches the callsite first: a test
//! thread without a subscriber caches "never", and a test recording on its
//! own thread sees nothing (1 run in 4 of the parallel suite). With a
//! second one alive, every thread's registration asks them all, and the
//! rebuild mends what was cached before.

use std::fmt;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::DefaultGuard;
use tracing::{Dispatch, Event, Level, Metadata, Subscriber};

/// This thread's events at `at_least` or more severe, while it lives, each
/// as `LEVEL target: field=value …`.
pub(crate) struct Recorded {
    events: Arc<Mutex<Vec<String>>>,
    _default: DefaultGuard,
    _second: Dispatch,
}

impl Recorded {
    /// The events recorded since the last `take`.
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// How many of the recorded events (not taken yet) are of `level` and
    /// `target`.
    pub(crate) fn count(&self, level: Level, target: &str) -> usize {
        let prefix = format!("{level} {target}:");
        let events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        events.iter().filter(|e| e.starts_with(&prefix)).count()
    }
}

pub(crate) fn record(at_least: Level) -> Recorded {
    let events = Arc::new(Mutex::new(Vec::new()));
    let default = tracing::subscriber::set_default(Recorder {
        at_least,
        events: events.clone(),
    });
    let second = Dispatch::new(Recorder {
        at_least,
        events: Arc::default(),
    });
    tracing::callsite::rebuild_interest_cache();
    Recorded {
        events,
        _default: default,
        _second: second,
    }
}

struct Recorder {
    at_least: Level,
    events: Arc<Mutex<Vec<String>>>,
}

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= self.at_least
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let meta = event.metadata();
        let mut text = Text(format!("{} {}:", meta.level(), meta.target()));
        event.record(&mut text);
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(text.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}
