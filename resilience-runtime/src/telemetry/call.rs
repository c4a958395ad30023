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
pub fn observe<Fut>(labels: Labels, call: Fut) -> Observed<Fut> {
    let span = tracing::info_span!(
        target: "resilience",
        "resilience.call",
        service = labels.service(),
        target = labels.target(),
        otel.kind = "client",
        status = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    Observed {
        call,
        span,
        labels,
        clock: Clock::Unpolled,
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

pin_project! {
    /// A logical call being observed; built by [`observe`].
    #[must_use = "a call does nothing unless it is `.await`ed"]
    pub struct Observed<Fut> {
        #[pin]
        call: Fut,
        span: Span,
        labels: Labels,
        clock: Clock,
    }

    impl<Fut> PinnedDrop for Observed<Fut> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Clock::Since(start) = *this.clock {
                finish(this.span, *this.labels, Status::Cancelled, Some(start));
            }
        }
    }
}

impl<Fut> Observed<Fut> {
    /// The call's span, e.g. to record more fields on it.
    pub fn span(&self) -> &Span {
        &self.span
    }
}

impl<Fut> fmt::Debug for Observed<Fut> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observed")
            .field("labels", &self.labels)
            .field("span", &self.span)
            .finish_non_exhaustive()
    }
}

fn finish(span: &Span, labels: Labels, status: Status, start: Option<Instant>) {
    span.record("status", status.as_str());
    span.record(
        "otel.status_code",
        if status.is_ok() { "OK" } else { "ERROR" },
    );
    if let Some(start) = start {
        emit::histogram(
            REQUEST_DURATION_SECONDS,
            labels,
            &[("status", status.as_str())],
            start.elapsed().as_secs_f64(),
        );
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
        let _entered = this.span.enter();
        if let Clock::Unpolled = this.clock {
            *this.clock = if emit::recorder_installed() {
                Clock::Since(Instant::now())
            } else {
                Clock::Off
            };
        }
        let output = ready!(this.call.poll(cx));
        let start = match std::mem::replace(this.clock, Clock::Done) {
            Clock::Since(start) => Some(start),
            _ => None,
        };
        finish(this.span, *this.labels, Status::of(&output), start);
        Poll::Ready(output)
    }
}
