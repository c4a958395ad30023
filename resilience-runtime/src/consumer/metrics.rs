//! The consumer's own counters, with the `service`/`target` labels of the
//! HTTP side.

use crate::retry::GiveUp;
use crate::telemetry::Labels;

/// `consumer_dead_letters_total{service,target,reason}`: a counter of
/// messages handed to the dead-letter sink; `reason` is why the chain
/// stopped ([`GiveUp::as_str`]: `permanent`, `exhausted`, `elapsed`,
/// `deadline`, `retry_after_too_long`).
///
/// ```
/// assert_eq!(resilience::consumer::DEAD_LETTERS_TOTAL, "consumer_dead_letters_total");
/// ```
pub const DEAD_LETTERS_TOTAL: &str = "consumer_dead_letters_total";

/// `consumer_duplicates_total{service,target}`: a counter of redelivered
/// messages that were already settled, acknowledged without running the
/// handler again.
///
/// ```
/// assert_eq!(resilience::consumer::DUPLICATES_TOTAL, "consumer_duplicates_total");
/// ```
pub const DUPLICATES_TOTAL: &str = "consumer_duplicates_total";

/// Describes the consumer's counters (unit and help text) to the recorder
/// in scope, as [`telemetry::describe`](crate::telemetry::describe) does
/// for the others. A no-op without the `metrics` feature.
///
/// ```
/// resilience::telemetry::describe();
/// resilience::consumer::describe();
/// ```
pub fn describe() {
    #[cfg(feature = "metrics")]
    {
        metrics::describe_counter!(
            DEAD_LETTERS_TOTAL,
            metrics::Unit::Count,
            "Messages handed to the dead-letter sink, by why the retry chain stopped (permanent, exhausted, elapsed, deadline, retry_after_too_long)."
        );
        metrics::describe_counter!(
            DUPLICATES_TOTAL,
            metrics::Unit::Count,
            "Redelivered messages already settled, acknowledged without running the handler."
        );
    }
}

pub(super) fn dead_lettered(labels: Labels, reason: GiveUp) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        DEAD_LETTERS_TOTAL,
        "service" => labels.service(),
        "target" => labels.target(),
        "reason" => reason.as_str(),
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (labels, reason);
}

pub(super) fn duplicate(labels: Labels) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        DUPLICATES_TOTAL,
        "service" => labels.service(),
        "target" => labels.target(),
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = labels;
}
