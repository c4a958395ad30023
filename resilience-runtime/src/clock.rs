//! Durations kept as nanoseconds, and tokio's timer with a panic that
//! says what is missing: the ground the breaker's clock, the retry policy
//! and the limiters stand on.

/// `duration` in nanoseconds, saturating past `u64::MAX` (584 years): the
/// compact form the breaker's clock and the retry policy keep durations in.
pub(crate) const fn duration_nanos(duration: std::time::Duration) -> u64 {
    let nanos = duration.as_nanos();
    if nanos > u64::MAX as u128 {
        u64::MAX
    } else {
        nanos as u64
    }
}

/// A duration kept in nanoseconds, shown in `Debug` as the config file
/// writes it (`100ms`, `30s`: `resilience_rules::duration::display`), not
/// as a raw count of nanoseconds.
pub(crate) struct ShowNanos(pub(crate) u64);

impl std::fmt::Debug for ShowNanos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&resilience_rules::duration::display(
            std::time::Duration::from_nanos(self.0),
        ))
    }
}

/// The message of the panic a timer raises outside a Tokio runtime.
pub(crate) const NO_TOKIO: &str = "resilience needs a Tokio runtime with its timer: a protected call paused before a retry, or timed an attempt, outside one (for example under `futures::executor::block_on`); run it inside a Tokio runtime (`#[tokio::main]`, `#[tokio::test]`, or `Runtime::block_on` of a runtime built with `enable_time()` or `enable_all()`)";

/// `tokio::time::sleep_until`, with a panic that says what is missing when
/// no Tokio runtime runs the call (tokio's own says "no reactor running").
///
/// # Panics
///
/// Outside a Tokio runtime, with [`NO_TOKIO`].
pub(crate) fn sleep_until(until: tokio::time::Instant) -> tokio::time::Sleep {
    if tokio::runtime::Handle::try_current().is_err() {
        panic!("{NO_TOKIO}");
    }
    tokio::time::sleep_until(until)
}
