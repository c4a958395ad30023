//! The one place that talks to the `metrics` facade, or compiles to nothing
//! without the `metrics` feature.

use super::Labels;

#[cfg(feature = "metrics")]
mod facade {
    use metrics::{Key, KeyName, Label, Level, Metadata, Recorder, SharedString, Unit};

    use super::super::{
        BREAKER_STATE, BREAKER_TRIPS_TOTAL, DEPENDENCY_ERRORS_TOTAL, FALLBACKS_TOTAL,
        REQUEST_DURATION_SECONDS, RETRIES_TOTAL,
    };
    use super::Labels;

    static METADATA: Metadata<'static> =
        Metadata::new("resilience", Level::INFO, Some(module_path!()));

    /// Runs `f` with the recorder in scope (thread-local, then global),
    /// unless there is none.
    ///
    /// Without a recorder `metrics` hands out its `NoopRecorder`, the only
    /// zero-sized recorder in practice (a real one holds its storage). Telling
    /// it apart lets a call skip its clock reads and label building, which
    /// is what keeps the cost without a recorder within a couple of
    /// nanoseconds.
    #[inline(always)]
    fn with_installed(f: impl FnOnce(&dyn Recorder)) {
        metrics::with_recorder(|recorder| {
            if size_of_val(recorder) != 0 {
                f(recorder)
            }
        })
    }

    #[inline]
    pub(crate) fn installed() -> bool {
        metrics::with_recorder(|recorder| size_of_val(recorder) != 0)
    }

    fn key(name: &'static str, labels: Labels, extra: &[(&'static str, &'static str)]) -> Key {
        let mut all = Vec::with_capacity(2 + extra.len());
        all.push(Label::from_static_parts("service", labels.service()));
        all.push(Label::from_static_parts("target", labels.target()));
        all.extend(
            extra
                .iter()
                .map(|&(key, value)| Label::from_static_parts(key, value)),
        );
        Key::from_parts(KeyName::from_const_str(name), all)
    }

    #[inline]
    pub(crate) fn increment(
        name: &'static str,
        labels: Labels,
        extra: &[(&'static str, &'static str)],
    ) {
        with_installed(|r| {
            r.register_counter(&key(name, labels, extra), &METADATA)
                .increment(1)
        })
    }

    #[inline]
    #[allow(dead_code, reason = "called by the circuit breaker, being merged")]
    pub(crate) fn gauge(name: &'static str, labels: Labels, value: f64) {
        with_installed(|r| {
            r.register_gauge(&key(name, labels, &[]), &METADATA)
                .set(value)
        })
    }

    #[inline]
    pub(crate) fn histogram(
        name: &'static str,
        labels: Labels,
        extra: &[(&'static str, &'static str)],
        value: f64,
    ) {
        with_installed(|r| {
            r.register_histogram(&key(name, labels, extra), &METADATA)
                .record(value)
        })
    }

    pub(crate) fn describe() {
        let describe = |r: &dyn Recorder| {
            let text = |s: &'static str| SharedString::const_str(s);
            let name = KeyName::from_const_str;
            r.describe_counter(
                name(RETRIES_TOTAL),
                Some(Unit::Count),
                text("Attempts of protected calls, by attempt number and result (success, retry, exhausted)."),
            );
            r.describe_histogram(
                name(REQUEST_DURATION_SECONDS),
                Some(Unit::Seconds),
                text("Wall time of whole logical calls, retries and pauses included, by final status."),
            );
            r.describe_gauge(
                name(BREAKER_STATE),
                None,
                text("Circuit breaker state: 0 closed, 1 half-open, 2 open."),
            );
            r.describe_counter(
                name(BREAKER_TRIPS_TOTAL),
                Some(Unit::Count),
                text("Circuit breaker transitions from closed to open."),
            );
            r.describe_counter(
                name(DEPENDENCY_ERRORS_TOTAL),
                Some(Unit::Count),
                text("Failures that are the dependency's fault, by reason (timeout, 5xx, circuit_open, network)."),
            );
            r.describe_counter(
                name(FALLBACKS_TOTAL),
                Some(Unit::Count),
                text("Calls answered by a fallback, by kind (stale, partial, fail_fast)."),
            );
        };
        with_installed(describe)
    }
}

#[cfg(not(feature = "metrics"))]
mod facade {
    use super::Labels;

    #[inline(always)]
    pub(crate) fn installed() -> bool {
        false
    }
    #[inline(always)]
    pub(crate) fn increment(_: &'static str, _: Labels, _: &[(&'static str, &'static str)]) {}
    #[inline(always)]
    #[allow(dead_code, reason = "called by the circuit breaker, being merged")]
    pub(crate) fn gauge(_: &'static str, _: Labels, _: f64) {}
    #[inline(always)]
    pub(crate) fn histogram(
        _: &'static str,
        _: Labels,
        _: &[(&'static str, &'static str)],
        _: f64,
    ) {
    }
    pub(crate) fn describe() {}
}

pub(crate) use facade::{gauge, histogram, increment};

/// `true` when a `metrics` recorder is in scope for this thread (a local
/// one, or the global one), so that the calls made here are recorded.
///
/// Always `false` without the `metrics` cargo feature. A zero-sized
/// recorder type is taken for the facade's no-op recorder: wrap such a
/// recorder in a struct with a field.
#[inline]
pub fn recorder_installed() -> bool {
    facade::installed()
}

/// Describes every metric of this module (unit and help text) to the
/// recorder in scope. Call it once, after installing the recorder; the
/// metrics are recorded whether or not it is called.
pub fn describe() {
    facade::describe()
}
