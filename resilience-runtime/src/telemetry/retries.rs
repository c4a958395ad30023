//! The retry executor's [`Notify`] hook that records attempts.

use crate::retry::{Classify, Event, GiveUp, Notify, Reason, Verdict};

use super::{
    AttemptResult, DEPENDENCY_ERRORS_TOTAL, Labels, RETRIES_TOTAL, RETRY_BUDGET_EXHAUSTED_TOTAL,
    attempt_label, emit,
};

/// A [`Notify`] hook that turns each attempt of a retry chain into
/// `http_client_retries_total`, `dependency_errors_total` and a tracing
/// event in the current span.
///
/// | event | `result` | `dependency_errors_total` | tracing |
/// |---|---|---|---|
/// | success | `success` | – | DEBUG |
/// | transient failure, retried | `retry` | when [`Classify::reason`] is `Some` | INFO, with the pause |
/// | gave up: attempts, `max_elapsed` or deadline | `exhausted` | when [`Classify::reason`] is `Some` | WARN |
/// | gave up: the retry budget is empty | `exhausted`, and one `http_client_retry_budget_exhausted_total` | when [`Classify::reason`] is `Some` | WARN, `give_up = "budget_empty"` |
/// | gave up: permanent error | none (see the [module docs](super)) | when [`Classify::reason`] is `Some` | DEBUG |
/// | gave up inside another chain's attempt (which retries) | none: the outer chain counts the attempt | when [`Classify::reason`] is `Some`, under this chain's target | DEBUG |
///
/// Rejections by a circuit breaker (`circuit_open`) are counted by the
/// breaker itself, once per rejected call, never here. When the caller's
/// deadline passes before attempt `n` could start, `n` is recorded as
/// `exhausted`, with no dependency error since the dependency was not
/// called.
///
/// One value serves one logical call: build a fresh one per call.
///
/// ```
/// use resilience::retry::{HttpStatus, Policy};
/// use resilience::telemetry::{self, Labels, RetryMetrics};
///
/// const USER: Labels = Labels::new("checkout", "user");
/// # #[derive(Debug)] struct Failed(HttpStatus);
/// # impl resilience::Classify for Failed {
/// #     fn classify(&self) -> resilience::Verdict { self.0.classify() }
/// #     fn reason(&self) -> Option<resilience::retry::Reason> { self.0.reason() }
/// # }
/// # impl From<resilience::Error> for Failed {
/// #     fn from(_: resilience::Error) -> Self { Failed(HttpStatus(504)) }
/// # }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let mut responses = [502, 200].into_iter();
/// let user = telemetry::observe(
///     USER,
///     Policy::http()
///         .retry(|| {
///             let status = responses.next().unwrap_or(200);
///             async move { if status == 200 { Ok("ann") } else { Err(Failed(HttpStatus(status))) } }
///         })
///         .notify_with(RetryMetrics::new(USER)),
/// )
/// .await;
/// assert_eq!(user.unwrap(), "ann");
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct RetryMetrics {
    labels: Labels,
    last_attempt: u32,
}

impl RetryMetrics {
    /// A hook for one call to `labels.target()`.
    pub const fn new(labels: Labels) -> Self {
        Self {
            labels,
            last_attempt: 0,
        }
    }

    /// A hook whose chain already recorded up to `last_attempt`.
    #[inline]
    pub(crate) const fn resume(labels: Labels, last_attempt: u32) -> Self {
        Self {
            labels,
            last_attempt,
        }
    }

    #[inline]
    pub(crate) const fn last_attempt(&self) -> u32 {
        self.last_attempt
    }

    #[inline]
    pub(crate) fn success_event(attempt: u32) {
        // The level test inline, the event out of line: every successful
        // call passes here.
        if tracing::level_enabled!(tracing::Level::DEBUG) {
            Self::emit_success_event(attempt);
        }
    }

    #[inline(never)]
    fn emit_success_event(attempt: u32) {
        tracing::debug!(target: "resilience", attempt, "attempt succeeded");
    }

    /// The labels it records under.
    pub const fn labels(&self) -> Labels {
        self.labels
    }

    #[inline]
    fn attempt(&self, attempt: u32, result: AttemptResult) {
        if emit::active() {
            self.count_attempt(attempt, result);
        }
    }

    #[inline(never)]
    fn count_attempt(&self, attempt: u32, result: AttemptResult) {
        emit::increment(
            RETRIES_TOTAL,
            self.labels,
            &[
                ("attempt", attempt_label(attempt)),
                ("result", result.as_str()),
            ],
        );
    }

    #[inline]
    fn dependency_error(&self, reason: Option<Reason>) {
        // The breaker and the load limiter count their own rejections.
        if let Some(reason) =
            reason.filter(|r| !matches!(r, Reason::CircuitOpen | Reason::Overloaded))
        {
            emit::increment(
                DEPENDENCY_ERRORS_TOTAL,
                self.labels,
                &[("reason", reason.as_str())],
            );
        }
    }
}

const fn verdict_str(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Transient => "transient",
        Verdict::RetryAfter(_) => "retry_after",
        Verdict::Permanent => "permanent",
        Verdict::Fatal => "fatal",
        Verdict::Ignored => "ignored",
    }
}

fn reason_str(reason: Option<Reason>) -> &'static str {
    reason.map_or("none", Reason::as_str)
}

impl RetryMetrics {
    /// Records `event`, asking `reason` why a failed attempt failed: for
    /// code that runs its own retry loop, or errors classified at the call
    /// site rather than by [`Classify`]. Return `None` when the failure is
    /// not the dependency's fault.
    #[inline]
    pub fn record<E>(&mut self, event: &Event<'_, E>, reason: impl Fn(&E) -> Option<Reason>) {
        // The executor reports a deadline that passed before attempt n + 1
        // could start under attempt n (0 before the first one): that attempt
        // never ran.
        let reported = event.attempt();
        let ran = reported > self.last_attempt;
        let attempt = if ran { reported } else { self.last_attempt + 1 };
        self.last_attempt = attempt;
        match *event {
            Event::Success { .. } => {
                Self::success_event(attempt);
                self.attempt(attempt, AttemptResult::Success);
            }
            Event::Retry {
                delay,
                error,
                verdict,
                ..
            } => {
                let reason = reason(error);
                tracing::info!(
                    target: "resilience",
                    attempt,
                    delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    verdict = verdict_str(verdict),
                    reason = reason_str(reason),
                    "attempt failed, retrying after a pause"
                );
                self.attempt(attempt, AttemptResult::Retry);
                self.dependency_error(reason);
            }
            Event::GaveUp {
                error,
                reason: GiveUp::Permanent,
                ..
            } => {
                let reason = reason(error);
                tracing::debug!(
                    target: "resilience",
                    attempt,
                    verdict = "permanent",
                    reason = reason_str(reason),
                    "attempt failed with a permanent error, not retrying"
                );
                self.dependency_error(reason);
            }
            // The outer chain counts this attempt as its own; the error is
            // this dependency's, filed under its target too.
            Event::GaveUp {
                error,
                reason: GiveUp::Nested,
                ..
            } => {
                let reason = reason(error);
                tracing::debug!(
                    target: "resilience",
                    attempt,
                    reason = reason_str(reason),
                    "attempt failed inside another chain's attempt: that chain retries"
                );
                self.dependency_error(reason);
            }
            Event::GaveUp {
                error, reason: why, ..
            } => {
                let reason = ran.then(|| reason(error)).flatten();
                tracing::warn!(
                    target: "resilience",
                    attempt,
                    give_up = why.as_str(),
                    reason = reason_str(reason),
                    "giving up"
                );
                self.attempt(attempt, AttemptResult::Exhausted);
                self.dependency_error(reason);
                if why == GiveUp::BudgetEmpty {
                    emit::increment(RETRY_BUDGET_EXHAUSTED_TOTAL, self.labels, &[]);
                }
            }
        }
    }
}

impl<E: Classify> Notify<E> for RetryMetrics {
    #[inline]
    fn notify(&mut self, event: &Event<'_, E>) {
        self.record(event, E::reason)
    }
}
