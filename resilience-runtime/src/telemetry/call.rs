//! One logical call: its span and its duration.

use std::cell::{Cell, OnceCell};
use std::fmt;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tokio::time::Instant;
use tracing::Span;

use super::{Labels, REQUEST_DURATION_SECONDS, RetryMetrics, Status, emit};
use crate::retry::{Classify, Event, Reason};

/// Runs `call`, one logical call to `labels.target()` (all its attempts and
/// pauses), inside a `resilience.call` span, and records its wall time in
/// `http_client_request_duration_seconds{status}`.
///
/// The clock starts at the first poll, when the first attempt starts, and
/// stops at the outcome; a call dropped before its outcome is recorded as
/// `cancelled`. Without a recorder the clock is never read.
///
/// Layer order: `observe` is the outermost layer, around the breaker,
/// which is around the retry chain (the guide's
/// [layer order](crate::guide#circuit-breaker)); so a call rejected by an
/// open breaker is timed (as `circuit_open`) and traced like any other.
///
/// ```
/// use resilience::retry::Policy;
/// use resilience::telemetry::{self, Labels, RetryMetrics};
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
/// Inside another observed call on the same thread, it is part of that
/// call: no second span, no second duration.
#[inline]
pub fn observe<Fut>(labels: Labels, call: Fut) -> Observed<Fut> {
    Observed {
        call,
        scope: CallScope::new(labels),
    }
}

/// Where a call is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Unpolled,
    /// Started with no recorder and no span wanted: only the attempts'
    /// events are left to emit, and no inner call needs to know of it.
    Quiet,
    /// Started, with no recorder: nothing to time, but a span.
    Untimed,
    /// Started, timed from `CallScope::start`.
    Timed,
    /// Inside another observed call, which owns the span and the clock.
    Nested,
    Done,
}

std::thread_local! {
    /// The labels of the observed call being polled on this thread, if any.
    static CURRENT: Cell<Option<Labels>> = const { Cell::new(None) };
}

/// The span, the clock and the attempt metrics of one logical call, for
/// code that drives its attempts itself rather than through [`observe`]
/// (the macros' expansion does): [`enter`](Self::enter) around every poll
/// of the call, [`attempt`](Self::attempt) with each attempt's outcome,
/// [`finish`](Self::finish) with the call's. Dropped unfinished after it
/// was entered, it records the call as `cancelled`.
///
/// A scope first entered while another one is entered on the same thread
/// (a `#[retry]` fn under a `#[circuit_breaker]`, an `observe` around an
/// annotated fn) is the same logical call: it opens no span, records no
/// duration, and counts its attempts under the outer call's labels. An
/// outer call that nobody traces and that found no recorder leaves no
/// trace on the thread: there is nothing to join, and the inner call finds
/// that out for itself.
///
/// Every call pays for it, so it is kept lean: without a subscriber that
/// wants the span and without a metrics recorder, a call costs one level
/// check, one recorder lookup and one thread-local read when it starts,
/// and one test per [`enter`](Self::enter) (under [`observe`], whose
/// hooks read it, a one-byte flag set and restored around each poll); it
/// builds no span and reads no clock, and [`is_quiet`](Self::is_quiet)
/// lets a driver skip entering altogether.
///
/// ```
/// use resilience::__private::CallScope;
/// use resilience::telemetry::{Labels, Status};
///
/// let scope = CallScope::new(Labels::new("checkout", "user"));
/// {
///     let _entered = scope.enter();
///     // … poll the attempt; its events land in the call's span …
/// }
/// scope.finish(Status::Ok);
/// ```
pub struct CallScope {
    labels: Cell<Labels>,
    phase: Cell<Phase>,
    /// The clock and the span of a call somebody listens to, set when it
    /// starts `Timed` or `Untimed`: the one word a quiet call initializes
    /// and tests on drop. Dropped by hand (see `Entered::span`).
    loud: ManuallyDrop<OnceCell<Loud>>,
    /// The attempt hook's state; its labels are `labels` (not a second
    /// copy, which would make every annotated fn's future 32 bytes larger).
    last_attempt: Cell<u32>,
}

/// What a call that somebody listens to keeps.
struct Loud {
    /// When the first attempt started, if a recorder times the call.
    start: Cell<Option<Instant>>,
    /// The `resilience.call` span, if a subscriber wants it.
    span: Option<Span>,
}

impl CallScope {
    /// A call to `labels.target()` about to start. Its `resilience.call`
    /// span opens and its clock starts at the first [`enter`](Self::enter).
    #[inline]
    pub fn new(labels: Labels) -> Self {
        Self {
            labels: Cell::new(labels),
            phase: Cell::new(Phase::Unpolled),
            loud: ManuallyDrop::new(OnceCell::new()),
            last_attempt: Cell::new(0),
        }
    }

    /// The first entry: finds out who listens, then enters.
    #[inline(always)]
    fn start(&self, hooks: bool) -> Entered {
        match self.begin() {
            Phase::Nested => Entered::outer(),
            Phase::Timed => self.active(false),
            Phase::Untimed => self.active(true),
            _ => Entered::quiet(hooks),
        }
    }

    /// Finds out who listens to the call and starts it: the phase it
    /// starts in (`Nested`, `Timed`, `Untimed` or `Quiet`).
    #[inline(always)]
    fn begin(&self) -> Phase {
        // The discriminant alone, on the path where there is no outer call.
        if CURRENT.with(|current| current.get().is_some()) {
            if let Some(outer) = CURRENT.get() {
                self.labels.set(outer);
            }
            self.phase.set(Phase::Nested);
            return Phase::Nested;
        }
        let traced = tracing::level_enabled!(tracing::Level::INFO) && self.open_span();
        let phase = if emit::recorder_installed() {
            self.start_clock();
            Phase::Timed
        } else if traced {
            Phase::Untimed
        } else {
            Phase::Quiet
        };
        self.phase.set(phase);
        phase
    }

    /// Whether nothing listens to the call: no outer call on this thread,
    /// no subscriber that wants its span, no recorder. Then
    /// [`enter`](Self::enter) changes nothing on the thread, and a driver
    /// that reports its attempts itself (through [`attempt`](Self::attempt),
    /// [`succeed`](Self::succeed) and [`finish`](Self::finish), not
    /// through hooks such as [`RetryMetrics`]) may poll without entering.
    /// The first time, it finds out, as the first `enter` would, and the
    /// call starts.
    ///
    /// ```
    /// use resilience::__private::CallScope;
    /// use resilience::telemetry::Labels;
    ///
    /// // No subscriber, no recorder.
    /// let scope = CallScope::new(Labels::new("checkout", "user"));
    /// assert!(scope.is_quiet());
    /// scope.succeed(1);
    /// ```
    #[inline(always)]
    pub fn is_quiet(&self) -> bool {
        match self.phase.get() {
            Phase::Unpolled => self.begin() == Phase::Quiet,
            phase => phase == Phase::Quiet,
        }
    }

    /// Opens the call's span if a subscriber wants it.
    #[inline(never)]
    fn open_span(&self) -> bool {
        let labels = self.labels.get();
        let span = tracing::info_span!(
            target: "resilience",
            "resilience.call",
            service = labels.service(),
            target = labels.target(),
            otel.kind = "client",
            status = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        !span.is_disabled()
            && self
                .loud
                .set(Loud {
                    start: Cell::new(None),
                    span: Some(span),
                })
                .is_ok()
    }

    /// Starts the clock of a call a recorder times.
    #[inline(never)]
    fn start_clock(&self) {
        let now = Some(Instant::now());
        match self.loud.get() {
            Some(loud) => loud.start.set(now),
            None => {
                let _ = self.loud.set(Loud {
                    start: Cell::new(now),
                    span: None,
                });
            }
        }
    }

    /// The call's span, if a subscriber wants it.
    #[inline]
    fn wanted_span(&self) -> Option<&Span> {
        self.loud.get().and_then(|loud| loud.span.as_ref())
    }

    /// Enters the call's span until the guard drops (hold it across one
    /// poll, never across an `.await`); the first time, opens the span and
    /// starts the clock.
    #[inline(always)]
    pub fn enter(&self) -> Entered {
        self.enter_with(false)
    }

    /// [`enter`](Self::enter); `hooks`: the inner future reports its
    /// attempts through hooks (`RetryMetrics`), which a quiet call tells
    /// that there is no recorder, sparing them the lookup.
    #[inline(always)]
    fn enter_with(&self, hooks: bool) -> Entered {
        match self.phase.get() {
            Phase::Unpolled => self.start(hooks),
            Phase::Quiet => Entered::quiet(hooks),
            Phase::Nested | Phase::Done => Entered::outer(),
            phase => self.active(phase == Phase::Untimed),
        }
    }

    /// Entered by a call that is traced or recorded: inner calls join it.
    #[inline(always)]
    fn active(&self, unrecorded: bool) -> Entered {
        Entered {
            _marks: Some(Marks {
                _quiet: emit::QuietScope::enter(Some(unrecorded)),
                current: Some(CURRENT.replace(Some(self.labels.get()))),
                span: ManuallyDrop::new(self.wanted_span().map(|span| span.clone().entered())),
            }),
        }
    }

    /// Started with no recorder in scope: what the inner code would
    /// record is known to go nowhere.
    #[inline]
    fn unrecorded(&self) -> bool {
        matches!(self.phase.get(), Phase::Quiet | Phase::Untimed)
    }

    /// Records one attempt's outcome (see [`RetryMetrics`]), asking
    /// `reason` why a failed attempt failed.
    #[inline]
    pub fn attempt<E>(&self, event: &Event<'_, E>, reason: impl Fn(&E) -> Option<Reason>) {
        match event {
            Event::Success { attempt } => self.succeeded(*attempt),
            _ => self.record_attempt(event, reason),
        }
    }

    /// Records that attempt `attempt` succeeded: [`attempt`](Self::attempt)
    /// with [`Event::Success`], for a driver that knows it has one (no
    /// event to build on the path every healthy call takes).
    #[inline]
    pub fn succeeded(&self, attempt: u32) {
        if self.unrecorded() && attempt > self.last_attempt.get() {
            return self.success_event(attempt);
        }
        // A success carries no error: any error type will do.
        self.record_attempt::<std::convert::Infallible>(&Event::Success { attempt }, |_| None);
    }

    /// Records that attempt `attempt` succeeded and finishes the call with
    /// [`Status::Ok`]: [`succeeded`](Self::succeeded) then
    /// [`finish`](Self::finish), in one step for the path every healthy
    /// call takes.
    #[inline(always)]
    pub fn succeed(&self, attempt: u32) {
        // Tested here rather than left to `succeeded` and `finish`: for a
        // call nothing listens to, finishing only marks it done.
        if self.phase.get() == Phase::Quiet && attempt > self.last_attempt.get() {
            self.success_event(attempt);
            self.phase.set(Phase::Done);
            return;
        }
        self.succeeded(attempt);
        self.finish(Status::Ok);
    }

    /// No recorder: the event is all there is to record of a success.
    #[inline(always)]
    fn success_event(&self, attempt: u32) {
        RetryMetrics::success_event(attempt);
        self.last_attempt.set(attempt);
    }

    #[inline(never)]
    fn record_attempt<E>(&self, event: &Event<'_, E>, reason: impl Fn(&E) -> Option<Reason>) {
        let mut attempts = RetryMetrics::resume(self.labels.get(), self.last_attempt.get());
        attempts.record(event, reason);
        self.last_attempt.set(attempts.last_attempt());
    }

    /// Records the outcome: `status` on the span, and the wall time since
    /// the first [`enter`](Self::enter) in
    /// `http_client_request_duration_seconds`. Only the first call counts.
    #[inline]
    pub fn finish(&self, status: Status) {
        match self.phase.replace(Phase::Done) {
            // Neither a span nor a clock: nothing to record.
            Phase::Done | Phase::Nested | Phase::Quiet | Phase::Unpolled => {}
            Phase::Untimed => self.record_status(status),
            Phase::Timed => {
                self.record_status(status);
                self.record_duration(status);
            }
        }
    }

    #[inline]
    fn record_status(&self, status: Status) {
        if let Some(span) = self.wanted_span() {
            record_status(span, status);
        }
    }

    // Out of line: only a call that found a recorder gets here.
    #[inline(never)]
    fn record_duration(&self, status: Status) {
        if let Some(start) = self.loud.get().and_then(|loud| loud.start.get()) {
            emit::histogram(
                REQUEST_DURATION_SECONDS,
                self.labels.get(),
                &[("status", status.as_str())],
                start.elapsed().as_secs_f64(),
            );
        }
    }

    /// The call's span: disabled until the first [`enter`](Self::enter),
    /// for a nested call, and when no subscriber wants it.
    pub fn span(&self) -> &Span {
        static NONE: Span = Span::none();
        self.wanted_span().unwrap_or(&NONE)
    }

    /// The labels the call records under: its own, or the outer call's
    /// once it found itself nested.
    pub fn labels(&self) -> Labels {
        self.labels.get()
    }
}

// Out of line: only a call some subscriber traces gets here.
#[inline(never)]
fn record_status(span: &Span, status: Status) {
    span.record("status", status.as_str());
    span.record(
        "otel.status_code",
        if status.is_ok() { "OK" } else { "ERROR" },
    );
}

impl Drop for CallScope {
    #[inline]
    fn drop(&mut self) {
        // Tested inline: a call nobody listened to has nothing to drop.
        if self.loud.get().is_some() {
            self.drop_slow();
        }
    }
}

impl CallScope {
    #[inline(never)]
    fn drop_slow(&mut self) {
        if let Phase::Untimed | Phase::Timed = self.phase.get() {
            self.finish(Status::Cancelled);
        }
        drop(self.loud.take());
    }
}

impl fmt::Debug for CallScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallScope")
            .field("labels", &self.labels.get())
            .field("phase", &self.phase.get())
            .field("span", self.span())
            .finish_non_exhaustive()
    }
}

/// A [`CallScope`] entered for one poll; see [`CallScope::enter`]. It
/// holds its own handle on the span, so the scope stays usable meanwhile.
///
/// Empty when entering changes nothing (a quiet call polled without
/// hooks, a nested or a finished one), so that the calls nothing listens
/// to pay one test for it.
#[must_use = "the scope is left when the guard drops"]
pub struct Entered {
    _marks: Option<Marks>,
}

/// What an entered scope changed on the thread, restored on drop.
struct Marks {
    /// Tells the hooks inside (`RetryMetrics`) whether this call found a
    /// recorder, so that they skip their own lookup when it did not.
    _quiet: emit::QuietScope,
    /// The labels to restore as current on drop.
    current: Option<Option<Labels>>,
    /// Dropped by hand: the drop glue of an `Option<EnteredSpan>` is an
    /// out-of-line call even for `None`, and without a subscriber it is
    /// always `None`.
    span: ManuallyDrop<Option<tracing::span::EnteredSpan>>,
}

impl Entered {
    /// Entered by a quiet call: nothing an inner call needs, since a quiet
    /// outer call leaves it to find for itself that nothing listens; the
    /// hooks inside, if any, learn that there is no recorder.
    #[inline(always)]
    fn quiet(hooks: bool) -> Self {
        Entered {
            _marks: hooks.then(|| Marks {
                _quiet: emit::QuietScope::enter(Some(true)),
                current: None,
                span: ManuallyDrop::new(None),
            }),
        }
    }

    /// Entered by a call that is part of an outer one, or done: the outer
    /// call's marks stand.
    #[inline(always)]
    fn outer() -> Self {
        Entered { _marks: None }
    }
}

impl Drop for Marks {
    #[inline]
    fn drop(&mut self) {
        if let Some(previous) = self.current {
            CURRENT.set(previous);
        }
        if self.span.is_some() {
            exit(&mut self.span);
        }
    }
}

#[inline(never)]
fn exit(span: &mut ManuallyDrop<Option<tracing::span::EnteredSpan>>) {
    // Taken, not dropped in place: what is left is a `None`, whose
    // leak is nothing.
    drop(span.take());
}

impl fmt::Debug for Entered {
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
            let _entered = this.scope.enter_with(true);
            ready!(this.call.poll(cx))
        };
        this.scope.finish(Status::of(&output));
        Poll::Ready(output)
    }
}
