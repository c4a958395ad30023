//! The one place that talks to the `metrics` facade, or compiles to nothing
//! without the `metrics` feature.

use super::{FALLBACKS_TOTAL, Fallback, Labels};

#[cfg(feature = "metrics")]
mod facade {
    use std::cell::Cell;

    use metrics::{Key, KeyName, Label, Level, Metadata, Recorder, SharedString, Unit};

    use super::super::{
        BREAKER_SHARED_FALLBACK, BREAKER_STATE, BREAKER_TRIPS_TOTAL, CONCURRENCY_LIMIT,
        DEPENDENCY_ERRORS_TOTAL, FALLBACKS_TOTAL, HEDGES_TOTAL, IN_FLIGHT,
        RATE_LIMIT_ADMITTED_TOTAL, RATE_LIMIT_LEASE_TOKENS, RATE_LIMIT_REDIS_ROUND_TRIPS_TOTAL,
        RATE_LIMIT_SHARED_FALLBACK, RATE_LIMIT_WAIT_SECONDS, REQUEST_DURATION_SECONDS,
        RETRIES_TOTAL, RETRY_BUDGET_EXHAUSTED_TOTAL, SHED_TOTAL, THROTTLE_PROBABILITY,
    };
    use super::Labels;

    static METADATA: Metadata<'static> =
        Metadata::new("resilience", Level::INFO, Some(module_path!()));

    thread_local! {
        /// Set while an observed call that found no recorder polls its
        /// inner future, so that the attempts inside skip the lookup.
        static QUIET: Cell<bool> = const { Cell::new(false) };
    }

    /// Marks (`Some(true)`) or unmarks (`Some(false)`) the inner polls of
    /// a call as finding no recorder, or keeps the outer call's mark
    /// (`None`), restoring the previous mark on drop: a call nested in a
    /// quiet one that found a recorder after all is unmarked inside.
    /// Written whole, without a branch: every call passes here.
    #[derive(Debug)]
    pub(crate) struct QuietScope(bool);

    impl QuietScope {
        #[inline]
        pub(crate) fn enter(quiet: Option<bool>) -> Self {
            let previous = QUIET.get();
            QUIET.set(quiet.unwrap_or(previous));
            Self(previous)
        }
    }

    impl Drop for QuietScope {
        #[inline]
        fn drop(&mut self) {
            QUIET.set(self.0);
        }
    }

    #[inline(always)]
    pub(crate) fn installed() -> bool {
        metrics::with_recorder(is_real)
    }

    /// Without a recorder `metrics` hands out its `NoopRecorder`, the only
    /// zero-sized recorder in practice (a real one holds its storage).
    /// Telling it apart lets a call skip its clock reads and label
    /// building, which keeps the cost without a recorder to one lookup
    /// per call.
    #[inline(always)]
    fn is_real(recorder: &dyn Recorder) -> bool {
        size_of_val(recorder) != 0
    }

    #[derive(Clone, Copy)]
    enum Kind {
        Counter,
        Gauge,
        Histogram,
    }

    /// The slow path, out of line: its callers test [`installed`] inline
    /// first, so that without a recorder no argument is even moved for it.
    /// Looks the recorder up again, since it needs the reference.
    #[inline(never)]
    fn record(
        kind: Kind,
        name: &'static str,
        labels: Labels,
        extra: &[(&'static str, &'static str)],
        value: f64,
    ) {
        metrics::with_recorder(|r| {
            if !is_real(r) {
                return;
            }
            let mut all = Vec::with_capacity(2 + extra.len());
            all.push(Label::from_static_parts("service", labels.service()));
            all.push(Label::from_static_parts("target", labels.target()));
            all.extend(
                extra
                    .iter()
                    .map(|&(key, value)| Label::from_static_parts(key, value)),
            );
            let key = Key::from_parts(KeyName::from_const_str(name), all);
            match kind {
                Kind::Counter => r.register_counter(&key, &METADATA).increment(1),
                Kind::Gauge => r.register_gauge(&key, &METADATA).set(value),
                Kind::Histogram => r.register_histogram(&key, &METADATA).record(value),
            }
        })
    }

    /// Whether an emission made here now would reach a recorder: callers
    /// test it before building labels.
    #[inline(always)]
    pub(crate) fn active() -> bool {
        !QUIET.get() && installed()
    }

    #[inline(always)]
    pub(crate) fn increment(
        name: &'static str,
        labels: Labels,
        extra: &[(&'static str, &'static str)],
    ) {
        if !QUIET.get() && installed() {
            record(Kind::Counter, name, labels, extra, 1.0)
        }
    }

    /// For emissions that no quiet scope can cover (a breaker's
    /// rejection happens before any attempt runs): straight to the one
    /// recorder lookup, without reading the quiet flag first.
    #[inline(always)]
    pub(crate) fn increment_unscoped(
        name: &'static str,
        labels: Labels,
        extra: &[(&'static str, &'static str)],
    ) {
        if installed() {
            record(Kind::Counter, name, labels, extra, 1.0)
        }
    }

    #[inline(always)]
    pub(crate) fn gauge(name: &'static str, labels: Labels, value: f64) {
        if !QUIET.get() && installed() {
            record(Kind::Gauge, name, labels, &[], value)
        }
    }

    /// For the call's own duration, recorded by a call that found a
    /// recorder, after its quiet scope ended: no quiet flag to read.
    #[inline(always)]
    pub(crate) fn histogram(
        name: &'static str,
        labels: Labels,
        extra: &[(&'static str, &'static str)],
        value: f64,
    ) {
        if installed() {
            record(Kind::Histogram, name, labels, extra, value)
        }
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
            r.describe_gauge(
                name(BREAKER_SHARED_FALLBACK),
                None,
                text("1 while a circuit breaker shared through Redis decides alone (Redis does not answer), 0 while it follows its fleet."),
            );
            r.describe_counter(
                name(DEPENDENCY_ERRORS_TOTAL),
                Some(Unit::Count),
                text("Failures that are the dependency's fault, by reason (timeout, 5xx, circuit_open, network)."),
            );
            r.describe_counter(
                name(RETRY_BUDGET_EXHAUSTED_TOTAL),
                Some(Unit::Count),
                text("Retries not made because the retry budget of the dependency was empty."),
            );
            r.describe_counter(
                name(HEDGES_TOTAL),
                Some(Unit::Count),
                text("Attempts that hedged calls started beside a slow one, or after a transient failure."),
            );
            r.describe_gauge(
                name(CONCURRENCY_LIMIT),
                None,
                text("The concurrency limit of a bulkhead (its max) or of an adaptive limit (its current value)."),
            );
            r.describe_gauge(
                name(IN_FLIGHT),
                None,
                text("Calls holding a slot of a bulkhead or an adaptive concurrency limit."),
            );
            r.describe_counter(
                name(SHED_TOTAL),
                Some(Unit::Count),
                text("Calls a load limiter shed before they were sent, by part (bulkhead, concurrency_limit, throttle, rate_limit) and priority."),
            );
            r.describe_gauge(
                name(THROTTLE_PROBABILITY),
                None,
                text("The probability with which the client-side throttle rejects a default call."),
            );
            r.describe_counter(
                name(RATE_LIMIT_ADMITTED_TOTAL),
                Some(Unit::Count),
                text("Calls a rate limit admitted, at once or after waiting for their place."),
            );
            r.describe_histogram(
                name(RATE_LIMIT_WAIT_SECONDS),
                Some(Unit::Seconds),
                text("How long the calls that waited for their place in a rate limit's schedule waited."),
            );
            r.describe_gauge(
                name(RATE_LIMIT_LEASE_TOKENS),
                None,
                text("Tokens of the last lease a replica took from a rate quota shared through Redis."),
            );
            r.describe_counter(
                name(RATE_LIMIT_REDIS_ROUND_TRIPS_TOTAL),
                Some(Unit::Count),
                text("Lease requests a rate limit shared through Redis sent to Redis, answered or not."),
            );
            r.describe_gauge(
                name(RATE_LIMIT_SHARED_FALLBACK),
                None,
                text("1 while a rate limit shared through Redis admits its share of the quota alone (Redis does not answer), 0 while it leases."),
            );
            r.describe_counter(
                name(FALLBACKS_TOTAL),
                Some(Unit::Count),
                text("Calls answered by a fallback, by kind (stale, partial, fail_fast, fallback_fn)."),
            );
        };
        metrics::with_recorder(|r| {
            if is_real(r) {
                describe(r)
            }
        })
    }
}

#[cfg(not(feature = "metrics"))]
mod facade {
    use super::Labels;

    #[derive(Debug)]
    pub(crate) struct QuietScope;

    impl QuietScope {
        #[inline(always)]
        pub(crate) fn enter(_: Option<bool>) -> Self {
            Self
        }
    }

    #[inline(always)]
    pub(crate) fn installed() -> bool {
        false
    }
    #[inline(always)]
    pub(crate) fn active() -> bool {
        false
    }
    #[inline(always)]
    pub(crate) fn increment(_: &'static str, _: Labels, _: &[(&'static str, &'static str)]) {}
    #[inline(always)]
    pub(crate) fn increment_unscoped(
        _: &'static str,
        _: Labels,
        _: &[(&'static str, &'static str)],
    ) {
    }
    #[inline(always)]
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

pub(crate) use facade::{
    QuietScope, active, gauge, histogram, increment, increment_unscoped, installed,
};

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

/// Records that a call to `labels.target()` was answered by a fallback:
/// counts it in `http_client_fallbacks_total{kind}` and logs it at WARN
/// (a stale answer is always logged: see the guide's
/// [fallbacks](crate::guide#fallbacks)).
///
/// ```
/// use resilience::telemetry::{self, Fallback, Labels};
///
/// const USER: Labels = Labels::new("checkout", "user");
/// # let cache: Option<&str> = Some("cached user");
/// if let Some(stale) = cache {
///     telemetry::fallback(USER, Fallback::Stale);
///     # let _ = stale;
/// }
/// ```
pub fn fallback(labels: Labels, kind: Fallback) {
    tracing::warn!(
        target: "resilience",
        service = labels.service(),
        target = labels.target(),
        kind = kind.as_str(),
        "answered by a fallback"
    );
    increment(FALLBACKS_TOTAL, labels, &[("kind", kind.as_str())]);
}
