//! What the circuit breaker reports: its state, trips and rejections, as
//! the [`telemetry`](crate::telemetry) names them.

use super::State;
use crate::retry::Reason;
#[cfg(feature = "breaker-redis")]
use crate::telemetry::BREAKER_SHARED_FALLBACK;
use crate::telemetry::{BREAKER_STATE, BREAKER_TRIPS_TOTAL, DEPENDENCY_ERRORS_TOTAL, Labels, emit};

/// A breaker was built: export its initial state, so the gauge exists
/// before the first transition.
pub(crate) fn breaker_created(labels: Labels, state: State) {
    emit::gauge(BREAKER_STATE, labels, f64::from(state.as_gauge()));
}

/// The one report of a state change: a WARN event naming the breaker, the
/// gauge, and a trip when a closed breaker opens on its own (an operator's
/// `force_open` is not the dependency failing, so it is not a trip).
pub(crate) fn breaker_transition(labels: Labels, from: State, to: State, forced: bool) {
    tracing::warn!(
        target: "resilience",
        service = labels.service(),
        breaker = labels.target(),
        from = from.as_str(),
        to = to.as_str(),
        forced,
        "circuit breaker state changed"
    );
    emit::gauge(BREAKER_STATE, labels, f64::from(to.as_gauge()));
    if from == State::Closed && to == State::Open && !forced {
        emit::increment(BREAKER_TRIPS_TOTAL, labels, &[]);
    }
}

/// The gauge of a breaker family: the worst state among its members.
pub(crate) fn family_state(labels: Labels, worst: State) {
    emit::gauge(BREAKER_STATE, labels, f64::from(worst.as_gauge()));
}

/// A family member's state change: the WARN names its key (logs may; a
/// label may not), the trip counts for the family. The gauge is the
/// family's, set by [`family_state`].
pub(crate) fn member_transition(labels: Labels, key: &str, from: State, to: State, forced: bool) {
    tracing::warn!(
        target: "resilience",
        service = labels.service(),
        breaker = labels.target(),
        key,
        from = from.as_str(),
        to = to.as_str(),
        forced,
        "circuit breaker state changed"
    );
    if from == State::Closed && to == State::Open && !forced {
        emit::increment(BREAKER_TRIPS_TOTAL, labels, &[]);
    }
}

/// A call rejected without running: `dependency_errors_total{reason =
/// "circuit_open"}`, once per logical call.
#[inline(always)]
pub(crate) fn breaker_rejected(labels: Labels) {
    // The level test inline, the event out of line: the breaker's own
    // admission inlines this.
    if tracing::level_enabled!(tracing::Level::DEBUG) {
        rejected_event(labels);
    }
    emit::increment_unscoped(
        DEPENDENCY_ERRORS_TOTAL,
        labels,
        &[("reason", Reason::CircuitOpen.as_str())],
    );
}

#[inline(never)]
fn rejected_event(labels: Labels) {
    tracing::debug!(
        target: "resilience",
        breaker = labels.target(),
        "call rejected by the circuit breaker"
    );
}

/// A shared breaker decides alone (`true`) or follows its fleet again.
#[cfg(feature = "breaker-redis")]
pub(crate) fn breaker_shared_fallback(labels: Labels, alone: bool) {
    emit::gauge(
        BREAKER_SHARED_FALLBACK,
        labels,
        if alone { 1.0 } else { 0.0 },
    );
}
