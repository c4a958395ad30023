//! What the load limiters report: their limit, the calls in flight, the
//! calls they shed and the throttle's probability.

use super::{CONCURRENCY_LIMIT, IN_FLIGHT, Labels, SHED_TOTAL, THROTTLE_PROBABILITY, emit};
use crate::error::ShedBy;
use crate::limit::Priority;

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
