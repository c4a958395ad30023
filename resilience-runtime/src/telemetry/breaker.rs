//! What the circuit breaker reports: its state, trips and rejections.

use super::{BREAKER_STATE, BREAKER_TRIPS_TOTAL, DEPENDENCY_ERRORS_TOTAL, Labels, emit};
use crate::retry::Reason;

/// A breaker state as exported in `circuit_breaker_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Calls go through; failures are counted.
    Closed,
    /// Probe calls go through to test the dependency.
    HalfOpen,
    /// Calls are rejected at once.
    Open,
}

impl BreakerState {
    /// The gauge value: 0 closed, 1 half-open, 2 open.
    pub const fn gauge(self) -> f64 {
        match self {
            BreakerState::Closed => 0.0,
            BreakerState::HalfOpen => 1.0,
            BreakerState::Open => 2.0,
        }
    }

    /// `closed`, `half-open` or `open`, as logged.
    pub const fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::HalfOpen => "half-open",
            BreakerState::Open => "open",
        }
    }
}

/// A breaker was built: export its initial state, so the gauge exists
/// before the first transition.
pub(crate) fn breaker_created(labels: Labels, state: BreakerState) {
    emit::gauge(BREAKER_STATE, labels, state.gauge());
}

/// The one report of a state change: a WARN event naming the breaker, the
/// gauge, and a trip when a closed breaker opens.
pub(crate) fn breaker_transition(labels: Labels, from: BreakerState, to: BreakerState) {
    tracing::warn!(
        target: "resilience",
        service = labels.service(),
        breaker = labels.target(),
        from = from.as_str(),
        to = to.as_str(),
        "circuit breaker state changed"
    );
    emit::gauge(BREAKER_STATE, labels, to.gauge());
    if from == BreakerState::Closed && to == BreakerState::Open {
        emit::increment(BREAKER_TRIPS_TOTAL, labels, &[]);
    }
}

/// A call rejected without running: `dependency_errors_total{reason =
/// "circuit_open"}`, once per logical call.
pub(crate) fn breaker_rejected(labels: Labels, state: BreakerState) {
    tracing::debug!(
        target: "resilience",
        breaker = labels.target(),
        state = state.as_str(),
        "call rejected by the circuit breaker"
    );
    emit::increment(
        DEPENDENCY_ERRORS_TOTAL,
        labels,
        &[("reason", Reason::CircuitOpen.as_str())],
    );
}
