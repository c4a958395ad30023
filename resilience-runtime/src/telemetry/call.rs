//! One logical call: its span and its duration.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tokio::time::Instant;
use tracing::Span;

use super::{Labels, REQUEST_DURATION_SECONDS, Status, emit};
use crate::retry::Classify;

/// Runs `call`, one logical call to `labels.target()` (all its attempts and
/// pauses), inside a `resilience.call` span, and records its wall time in
/// `http_client_request_duration_seconds{status}`.
///
/// The clock starts at the first poll, when the first attempt starts, and
/// stops at the outcome; a call dropped before its outcome is recorded as
/// `cancelled`. Without a recorder the clock is never read.
///
/// Layer order (SPEC §5): `observe` is the outermost layer, around the
/// breaker, which is around the retry chain; so a call rejected by an open
/// breaker is timed (as `circuit_open`) and traced like any other.
///
/// ```
/// use resilience_runtime::retry::Policy;
/// use resilience_runtime::telemetry::{self, Labels, RetryMetrics};
///
/// const USER: Labels = Labels::new("checkout", "user");
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let status = telemetry::observe(
///     USER,
///     Policy::http()
///         .retry(|| async { Ok::<_, std::io::Error>(200) })
///         .notify_with(RetryMetrics::new(USER)),
/// )
/// .await;
/// assert_eq!(status.unwrap(), 200);
/// # }
/// ```
#[inline]
pub fn observe<Fut>(labels: Labels, call: Fut) -> Observed<Fut> {
    Observed {
        call,
        scope: CallScope::new(labels),
    }
}

#[derive(Debug, Clone, Copy)]
enum Clock {
    Unpolled,
    /// No recorder: nothing to time.
    Off,
    Since(Instant),
    Done,
}

/// The span and the clock of one logical call, for code that drives its
/// attempts itself rather than through [`observe`] (the macros' expansion
/// does): [`enter`](Self::enter) around every poll of the call,
/// [`finish`](Self::finish) with its outcome. Dropped unfinished after it
/// was entered, it records the call as `cancelled`.
///
/// ```
/// use resilience_runtime::telemetry::{CallScope, Labels, Status};
///
/// let mut scope = CallScope::new(Labels::new("checkout", "user"));
/// {
///     let _entered = scope.enter();
///     // … poll the attempt; its events land in the call's span …
/// }
/// scope.finish(Status::Ok);
/// ```
pub struct CallScope {
    span: Span,
    labels: Labels,
    clock: Clock,
}

impl CallScope {
    /// A call to `labels.target()` about to start: creates its
    /// `resilience.call` span; the clock starts at the first
    /// [`enter`](Self::enter).
    #[inline]
    pub fn new(labels: Labels) -> Self {
        let span = tracing::info_span!(
            target: "resilience",
            "resilience.call",
            service = labels.service(),
            target = labels.target(),
            otel.kind = "client",
            status = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        Self {
            span,
            labels,
            clock: Clock::Unpolled,
        }
    }

    /// Enters the call's span until the guard drops (hold it across one
    /// poll, never across an `.await`), starting the clock the first time.
    #[inline]
    pub fn enter(&mut self) -> Entered<'_> {
        if let Clock::Unpolled = self.clock {
            self.clock = if emit::recorder_installed() {
                Clock::Since(Instant::now())
            } else {
                Clock::Off
            };
        }
        Entered {
            _quiet: emit::QuietScope::enter(matches!(self.clock, Clock::Off)),
            _span: self.span.enter(),
        }
    }

    /// Records the outcome: `status` on the span, and the wall time since
    /// the first [`enter`](Self::enter) in
    /// `http_client_request_duration_seconds`. Only the first call counts.
    #[inline]
    pub fn finish(&mut self, status: Status) {
        self.finish_inline(status)
    }

    // Inlined into `Observed::poll`, whose success path it is.
    #[inline(always)]
    fn finish_inline(&mut self, status: Status) {
        let start = match std::mem::replace(&mut self.clock, Clock::Done) {
            Clock::Done => return,
            Clock::Since(start) => Some(start),
            Clock::Unpolled | Clock::Off => None,
        };
        // `record` looks the field up by name even on a disabled span.
        if !self.span.is_disabled() {
            self.span.record("status", status.as_str());
            self.span.record(
                "otel.status_code",
                if status.is_ok() { "OK" } else { "ERROR" },
            );
        }
        if let Some(start) = start {
            emit::histogram(
                REQUEST_DURATION_SECONDS,
                self.labels,
                &[("status", status.as_str())],
                start.elapsed().as_secs_f64(),
            );
        }
    }

    /// The call's span, e.g. to record more fields on it.
    pub fn span(&self) -> &Span {
        &self.span
    }

    /// The labels of the call.
    pub fn labels(&self) -> Labels {
        self.labels
    }
}

impl Drop for CallScope {
    fn drop(&mut self) {
        if let Clock::Since(_) = self.clock {
            self.finish(Status::Cancelled);
        }
    }
}

impl fmt::Debug for CallScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallScope")
            .field("labels", &self.labels)
            .field("span", &self.span)
            .finish_non_exhaustive()
    }
}

/// A [`CallScope`] entered for one poll; see [`CallScope::enter`].
#[must_use = "the scope is left when the guard drops"]
pub struct Entered<'a> {
    // Dropped in this order: the span is left last.
    _quiet: emit::QuietScope,
    _span: tracing::span::Entered<'a>,
}

impl fmt::Debug for Entered<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entered").finish_non_exhaustive()
    }
}

pin_project! {
    /// A logical call being observed; built by [`observe`].
    #[must_use = "a call does nothing unless it is `.await`ed"]
    pub struct Observed<Fut> {
        #[pin]
        call: Fut,
        scope: CallScope,
    }
}

impl<Fut> Observed<Fut> {
    /// The call's span, e.g. to record more fields on it.
    pub fn span(&self) -> &Span {
        self.scope.span()
    }
}

impl<Fut> fmt::Debug for Observed<Fut> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observed")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl<Fut, T, E> Future for Observed<Fut>
where
    Fut: Future<Output = Result<T, E>>,
    E: Classify,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let output = {
            let _entered = this.scope.enter();
            ready!(this.call.poll(cx))
        };
        this.scope.finish_inline(Status::of(&output));
        Poll::Ready(output)
    }
}
