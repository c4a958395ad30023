//! Counting the events a test's own code logs, reliably beside the other
//! tests of the binary.
//!
//! tracing decides once per callsite, process-wide, whether anyone wants
//! its events. With one subscriber alive, that decision is taken against
//! the default of whichever thread reaches the callsite first: a test
//! thread without a subscriber caches "never", and a test counting on its
//! own thread sees nothing (1 run in 4 of the parallel suite). With a
//! second one alive, every thread's registration asks them all, and the
//! rebuild mends what was cached before.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::DefaultGuard;
use tracing::{Dispatch, Event, Level, Metadata, Subscriber};

/// Counts this thread's events of `level` (and of `target`, if given)
/// while the guard lives.
pub(crate) struct Counted {
    count: Arc<AtomicUsize>,
    _default: DefaultGuard,
    _second: Dispatch,
}

impl Counted {
    pub(crate) fn get(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }
}

pub(crate) fn count(level: Level, target: Option<&'static str>) -> Counted {
    let count = Arc::new(AtomicUsize::new(0));
    let counter = |count| Counter {
        level,
        target,
        count,
    };
    let default = tracing::subscriber::set_default(counter(count.clone()));
    let second = Dispatch::new(counter(Arc::new(AtomicUsize::new(0))));
    tracing::callsite::rebuild_interest_cache();
    Counted {
        count,
        _default: default,
        _second: second,
    }
}

struct Counter {
    level: Level,
    target: Option<&'static str>,
    count: Arc<AtomicUsize>,
}

impl Subscriber for Counter {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let meta = event.metadata();
        if *meta.level() == self.level && self.target.is_none_or(|t| meta.target() == t) {
            self.count.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}
