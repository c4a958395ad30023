//! What a limiter reports: its limit and calls in flight, each call it
//! sheds, and a WARN when it starts shedding, as the
//! [`telemetry`](crate::telemetry) names them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::Priority;
use crate::error::{Overloaded, ShedBy};
use crate::telemetry::{
    CONCURRENCY_LIMIT, IN_FLIGHT, Labels, RATE_LIMIT_ADMITTED_TOTAL, RATE_LIMIT_WAIT_SECONDS,
    SHED_TOTAL, THROTTLE_PROBABILITY, emit,
};

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
        limit_shed(self.labels, self.by, priority);
        let shed = self.shed_since.fetch_add(1, Ordering::Relaxed) + 1;
        let now = crate::clock::duration_nanos(self.born.elapsed()) + 1;
        let last = self.warned_at.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= crate::clock::duration_nanos(WARN_EVERY);
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

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use tracing::Level;

    use crate::limit::{AdaptiveLimit, Bulkhead, Priority, VegasConfig};

    fn value<'a>(snapshot: &'a [(String, DebugValue)], name: &str) -> Option<&'a DebugValue> {
        snapshot
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value)
    }

    /// A WARN at the first shed, none for the next ones within a minute,
    /// one again after it; every shed counted with its part and priority;
    /// the limit and the calls in flight as gauges.
    #[tokio::test(start_paused = true)]
    async fn the_first_shed_warns_and_every_shed_is_counted() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let _local = metrics::set_default_local_recorder(&recorder);
        let events = crate::test_events::record(Level::WARN);
        let warns = || events.count(Level::WARN, "resilience");

        let bulkhead = Bulkhead::new("stock", 1).unwrap();
        let held = bulkhead.try_acquire(Priority::Critical).unwrap();
        for _ in 0..3 {
            assert!(bulkhead.try_acquire(Priority::Default).is_err());
        }
        assert_eq!(warns(), 1, "one WARN for the first shed");
        tokio::time::advance(std::time::Duration::from_secs(59)).await;
        assert!(bulkhead.try_acquire(Priority::Sheddable).is_err());
        assert_eq!(warns(), 1);
        tokio::time::advance(std::time::Duration::from_secs(2)).await;
        assert!(bulkhead.try_acquire(Priority::Default).is_err());
        assert_eq!(warns(), 2, "again after a minute");
        let limit = AdaptiveLimit::new("users", VegasConfig::new()).unwrap();
        let _permit = limit.try_acquire(Priority::Default).unwrap();

        let snapshot: Vec<(String, DebugValue)> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let key = key.key();
                let mut labels: Vec<_> = key
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                labels.sort();
                (format!("{}{{{}}}", key.name(), labels.join(",")), value)
            })
            .collect();
        let shed = |priority: &str| match value(
            &snapshot,
            &format!(
                "http_client_shed_total{{by=bulkhead,priority={priority},service=unknown_service,target=stock}}"
            ),
        ) {
            Some(DebugValue::Counter(n)) => Some(*n),
            _ => None,
        };
        assert_eq!(shed("default"), Some(4));
        assert_eq!(shed("sheddable"), Some(1));
        let gauge = |name: &str, target: &str| match value(
            &snapshot,
            &format!("{name}{{service=unknown_service,target={target}}}"),
        ) {
            Some(DebugValue::Gauge(v)) => Some(v.into_inner()),
            _ => None,
        };
        assert_eq!(gauge("http_client_concurrency_limit", "stock"), Some(1.0));
        assert_eq!(gauge("http_client_in_flight", "stock"), Some(1.0));
        assert_eq!(gauge("http_client_concurrency_limit", "users"), Some(20.0));
        assert_eq!(gauge("http_client_in_flight", "users"), Some(1.0));

        // The release that leaves a bulkhead idle sets the gauge to 0 (its
        // permit remembers that a recorder was in scope at the admission).
        drop(held);
        let in_flight =
            snapshotter
                .snapshot()
                .into_vec()
                .into_iter()
                .find_map(|(key, _, _, value)| {
                    let key = key.key();
                    let stock = key
                        .labels()
                        .any(|l| l.key() == "target" && l.value() == "stock");
                    match value {
                        DebugValue::Gauge(v) if key.name() == "http_client_in_flight" && stock => {
                            Some(v.into_inner())
                        }
                        _ => None,
                    }
                });
        assert_eq!(in_flight, Some(0.0));
    }
}

/// A limit was set or changed.
pub(crate) fn limit_changed(labels: Labels, limit: u32) {
    emit::gauge(CONCURRENCY_LIMIT, labels, f64::from(limit));
}

/// Whether the calls in flight are recorded here now: asked once by a
/// bulkhead's admission, whose release then asks nothing more when
/// nothing records (BENCHMARKS.md, *Load limiting*: each check is about
/// 2.5 ns of an uncontended acquire + release).
#[inline(always)]
pub(crate) fn limit_recording() -> bool {
    emit::active()
}

/// The calls in flight changed: one check without a recorder.
#[inline(always)]
pub(crate) fn limit_in_flight(labels: Labels, in_flight: u32) {
    emit::gauge(IN_FLIGHT, labels, f64::from(in_flight));
}

/// A call was shed.
pub(crate) fn limit_shed(labels: Labels, by: ShedBy, priority: Priority) {
    emit::increment_unscoped(
        SHED_TOTAL,
        labels,
        &[("by", by.as_str()), ("priority", priority.as_str())],
    );
}

/// The throttle's probability, read at an admission.
#[inline(always)]
pub(crate) fn throttle_probability(labels: Labels, probability: f64) {
    emit::gauge(THROTTLE_PROBABILITY, labels, probability);
}

/// A rate limit admitted a call: one check without a recorder, and the
/// limit's labels read only behind it (an admission is a few tens of
/// instructions; copying them first showed in its cost).
#[inline(always)]
pub(crate) fn rate_admitted(report: &Report) {
    if emit::installed() {
        rate_admitted_recorded(report.labels());
    }
}

#[inline(never)]
fn rate_admitted_recorded(labels: Labels) {
    emit::increment_unscoped(RATE_LIMIT_ADMITTED_TOTAL, labels, &[]);
}

/// A call waited `waited` for its place in a rate limit's schedule.
pub(crate) fn rate_waited(labels: Labels, waited: Duration) {
    emit::histogram(RATE_LIMIT_WAIT_SECONDS, labels, &[], waited.as_secs_f64());
}
