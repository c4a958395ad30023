//! What a limiter reports: its limit and calls in flight, each call it
//! sheds, and a WARN when it starts shedding.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::Priority;
use crate::error::{Overloaded, ShedBy};
use crate::telemetry::{self, Labels};

/// How often a limiter that keeps shedding repeats its WARN.
pub(crate) const WARN_EVERY: Duration = Duration::from_secs(60);

/// The reports of one limiter: its labels and when it last warned.
#[derive(Debug)]
pub(crate) struct Report {
    labels: Labels,
    by: ShedBy,
    /// The clock's origin for `warned_at`.
    born: Instant,
    /// When the last WARN was logged, in nanoseconds after `born`, plus
    /// one; 0 before the first shed.
    warned_at: AtomicU64,
    /// Calls shed since the last WARN.
    shed_since: AtomicU64,
}

impl Report {
    pub(crate) fn new(labels: Labels, by: ShedBy) -> Self {
        Self {
            labels,
            by,
            born: Instant::now(),
            warned_at: AtomicU64::new(0),
            shed_since: AtomicU64::new(0),
        }
    }

    pub(crate) fn labels(&self) -> Labels {
        self.labels
    }

    pub(crate) fn name(&self) -> &'static str {
        self.labels.target()
    }

    /// A call of `priority` was shed at the limit `limit`: counted, and
    /// logged at WARN if it is the first, or the first for a minute.
    /// Reads the clock: a shed call is never on the fast path.
    #[cold]
    pub(crate) fn shed(&self, priority: Priority, limit: u32) -> Overloaded {
        telemetry::limit_shed(self.labels, self.by, priority);
        let shed = self.shed_since.fetch_add(1, Ordering::Relaxed) + 1;
        let now = crate::duration_nanos(self.born.elapsed()) + 1;
        let last = self.warned_at.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= crate::duration_nanos(WARN_EVERY);
        if due
            && self
                .warned_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.shed_since.fetch_sub(shed, Ordering::Relaxed);
            tracing::warn!(
                target: "resilience",
                service = self.labels.service(),
                limiter = self.labels.target(),
                by = self.by.as_str(),
                priority = priority.as_str(),
                limit,
                shed,
                first = last == 0,
                "load limit is shedding calls: the dependency is overloaded, or more calls are sent than the limit lets through"
            );
        }
        Overloaded::new(self.labels.target(), self.by, limit)
    }
}
