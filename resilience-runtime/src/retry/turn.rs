//! The poll loop of every async retry chain: one attempt under its timer,
//! the decision on its outcome, and the pause after a failure.
//!
//! [`Retry`](super::Retry) and the attributes' [`Attempt`](super::chain::Attempt)
//! both drive a [`Turn`]: the first goes round it until the chain ends,
//! the second takes one turn per attempt of the fn's body. What differs
//! between them is only where an attempt comes from and where success and
//! failure are reported; the order of the decisions (poll the attempt; on
//! `Pending`, the timer that cuts it; on an error, [`Attempts::on_error`]
//! and the pause) is written here once. A hedged call keeps a loop of its
//! own, for several attempts in flight at once (see `retry/hedge.rs`).

use std::borrow::Borrow;
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use rand::RngCore;
use tokio::time::{Instant, Sleep};

use super::attempts::{Attempts, CutBy, Driver, ErrorSlot};
use super::{FromRuntimeError, Policy, layer};

/// Where a [`Turn`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The next attempt has not begun.
    Start,
    /// The attempt runs, under its timer if one was armed.
    Running,
    /// The attempt failed and the chain pauses before the next one.
    Pausing,
    /// The chain ended.
    Done,
}

/// How a turn ended.
#[derive(Debug)]
pub(crate) enum Turned<T, E> {
    /// The attempt succeeded.
    Succeeded(T),
    /// The chain ends with this error, its events sent.
    Failed(E),
    /// The pause after a failed attempt is over: the next one may begin.
    Paused,
}

pin_project! {
    /// One turn of a retry chain: an attempt, the timer that may cut it
    /// short, and the pause after it when it failed. Kept inline, so a
    /// chain allocates nothing.
    ///
    /// A turn [begins](Self::begin) (or [begins untimed](Self::begin_untimed)),
    /// holds its attempt, made before or [after](Self::set_attempt) it
    /// began, and is then [polled](Self::poll_turn) until it ends.
    pub(crate) struct Turn<Fut> {
        stage: Stage,
        #[pin]
        fut: Option<Fut>,
        #[pin]
        timer: AttemptTimer,
    }
}

impl<Fut> Turn<Fut> {
    /// A turn not begun, holding `fut` as its attempt, or none yet.
    #[inline(always)]
    pub(crate) const fn new(fut: Option<Fut>) -> Self {
        Self {
            stage: Stage::Start,
            fut,
            timer: AttemptTimer::new(),
        }
    }

    /// Where the turn is.
    #[inline(always)]
    pub(crate) fn stage(&self) -> Stage {
        self.stage
    }

    /// Begins the attempt if no timer must cut it (see
    /// [`Attempts::begin_untimed`]), the path every healthy call takes,
    /// inline; otherwise returns `false` with nothing changed.
    #[inline(always)]
    pub(crate) fn begin_untimed<R, P: Borrow<Policy>, S: ErrorSlot>(
        self: Pin<&mut Self>,
        attempts: &mut Attempts<R, P, S>,
    ) -> bool {
        let this = self.project();
        if *this.stage == Stage::Start && attempts.begin_untimed() {
            *this.stage = Stage::Running;
            return true;
        }
        false
    }

    /// Begins the attempt, armed with whatever timer must cut it; or ends
    /// the chain with its error, its event sent, when the attempt may not
    /// start (see [`Attempts::begin`]).
    pub(crate) fn begin<R, P: Borrow<Policy>, S: ErrorSlot, E: FromRuntimeError>(
        self: Pin<&mut Self>,
        attempts: &mut Attempts<R, P, S>,
        driver: &mut impl Driver<E>,
    ) -> Result<(), E> {
        let mut this = self.project();
        match attempts.begin() {
            Ok(timer) => {
                this.timer.start(timer);
                *this.stage = Stage::Running;
                Ok(())
            }
            Err(reason) => {
                this.fut.set(None);
                *this.stage = Stage::Done;
                Err(attempts.on_refused(reason, driver))
            }
        }
    }

    /// The attempt of a turn that began without one.
    #[inline(always)]
    pub(crate) fn set_attempt(self: Pin<&mut Self>, fut: Fut) {
        self.project().fut.set(Some(fut));
    }

    /// Polls the attempt once, the thread marked as polling an attempt of
    /// the chain `name` (see [`layer`]).
    ///
    /// # Panics
    ///
    /// When the turn holds no attempt.
    #[inline(always)]
    pub(crate) fn poll_attempt(
        self: Pin<&mut Self>,
        name: &'static &'static str,
        cx: &mut Context<'_>,
    ) -> Poll<Fut::Output>
    where
        Fut: Future,
    {
        let Some(fut) = self.project().fut.as_pin_mut() else {
            panic!("a running turn holds its attempt");
        };
        let _polling = layer::polling(name);
        fut.poll(cx)
    }

    /// The attempt succeeded at the poll of the caller's own: the turn
    /// ends.
    #[inline(always)]
    pub(crate) fn succeed(self: Pin<&mut Self>) {
        let mut this = self.project();
        this.fut.set(None);
        *this.stage = Stage::Done;
    }

    /// Polls the turn of a chain `name` until the attempt succeeds, the
    /// chain ends, or the pause after a failed attempt is over. `polled`
    /// is the outcome of a poll of the attempt the caller made itself, if
    /// it made one since the last poll of the turn.
    ///
    /// On `Pending` the timer that cuts the attempt is polled, and when it
    /// fires the attempt is dropped and [`Attempts::on_cut`] decides; a
    /// failed attempt is dropped and [`Attempts::on_error`] decides
    /// between the pause and the end of the chain.
    ///
    /// # Panics
    ///
    /// When the turn has not begun or has ended.
    pub(crate) fn poll_turn<R, P, S, T, E>(
        self: Pin<&mut Self>,
        attempts: &mut Attempts<R, P, S>,
        driver: &mut impl Driver<E>,
        name: &'static &'static str,
        polled: Option<Poll<Result<T, E>>>,
        cx: &mut Context<'_>,
    ) -> Poll<Turned<T, E>>
    where
        Fut: Future<Output = Result<T, E>>,
        E: FromRuntimeError,
        R: RngCore,
        P: Borrow<Policy>,
        S: ErrorSlot,
    {
        let mut this = self.project();
        match *this.stage {
            Stage::Running => {
                let polled = match polled {
                    Some(polled) => polled,
                    None => {
                        let Some(fut) = this.fut.as_mut().as_pin_mut() else {
                            panic!("a running turn holds its attempt");
                        };
                        let _polling = layer::polling(name);
                        fut.poll(cx)
                    }
                };
                let result = match polled {
                    Poll::Ready(result) => result,
                    Poll::Pending => {
                        let cut = ready!(this.timer.as_mut().poll_cut(attempts, cx));
                        // The timer fired: drop the attempt in flight.
                        this.fut.set(None);
                        match attempts.on_cut(cut, driver) {
                            Ok(timed_out) => Err(timed_out),
                            Err(error) => {
                                *this.stage = Stage::Done;
                                return Poll::Ready(Turned::Failed(error));
                            }
                        }
                    }
                };
                // Drop the finished attempt before pausing.
                this.fut.set(None);
                let error = match result {
                    Ok(value) => {
                        *this.stage = Stage::Done;
                        return Poll::Ready(Turned::Succeeded(value));
                    }
                    Err(error) => error,
                };
                match attempts.on_error(error, driver) {
                    ControlFlow::Continue(pause) => {
                        this.timer.as_mut().pause(pause.until);
                        *this.stage = Stage::Pausing;
                    }
                    ControlFlow::Break(error) => {
                        *this.stage = Stage::Done;
                        return Poll::Ready(Turned::Failed(error));
                    }
                }
            }
            Stage::Pausing => {}
            Stage::Start | Stage::Done => panic!("a turn polled before it began or after it ended"),
        }
        ready!(this.timer.poll_pause(cx));
        *this.stage = Stage::Start;
        Poll::Ready(Turned::Paused)
    }
}

pin_project! {
    /// The one timer of a retry chain: it cuts the attempt in flight (see
    /// [`Attempts::begin`] and [`Attempts::pending`]) and times the pause
    /// between attempts. Kept inline, so a chain allocates nothing.
    ///
    /// # Panics
    ///
    /// Like [`tokio::time::sleep`], arming it panics outside a Tokio runtime
    /// with the time driver enabled.
    #[derive(Debug, Default)]
    struct AttemptTimer {
        cut: Option<CutBy>,
        #[pin]
        sleep: Option<Sleep>,
    }
}

impl AttemptTimer {
    /// A timer that is not armed.
    const fn new() -> Self {
        Self {
            cut: None,
            sleep: None,
        }
    }

    /// Arms the timer for an attempt that is starting, with what
    /// [`Attempts::begin`] returned.
    #[inline]
    fn start(self: Pin<&mut Self>, timer: Option<(Instant, CutBy)>) {
        let mut this = self.project();
        *this.cut = timer.map(|(_, cut)| cut);
        if let Some((until, _)) = timer {
            arm(this.sleep.as_mut(), until);
        }
    }

    /// To be polled while the attempt is pending: ready with the [`CutBy`]
    /// once the timer fired. An attempt that started without a timer gets
    /// the chain's `max_elapsed` from its first `Pending` on.
    fn poll_cut<R, P: Borrow<Policy>, S: ErrorSlot>(
        self: Pin<&mut Self>,
        attempts: &mut Attempts<R, P, S>,
        cx: &mut Context<'_>,
    ) -> Poll<CutBy> {
        let mut this = self.project();
        let cut = match *this.cut {
            Some(cut) => cut,
            None => {
                let (until, cut) = attempts.pending();
                arm(this.sleep.as_mut(), until);
                *this.cut = Some(cut);
                cut
            }
        };
        match this.sleep.as_pin_mut() {
            Some(sleep) => sleep.poll(cx).map(|()| cut),
            None => Poll::Ready(cut),
        }
    }

    /// Arms the timer for the pause until `until` (after [`Attempts::on_error`]).
    fn pause(self: Pin<&mut Self>, until: Instant) {
        let mut this = self.project();
        *this.cut = None;
        arm(this.sleep.as_mut(), until);
    }

    /// Ready when the pause is over.
    fn poll_pause(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.project().sleep.as_pin_mut() {
            Some(sleep) => sleep.poll(cx),
            None => Poll::Ready(()),
        }
    }
}

fn arm(mut sleep: Pin<&mut Option<Sleep>>, until: Instant) {
    match sleep.as_mut().as_pin_mut() {
        Some(sleep) => sleep.reset(until),
        None => sleep.set(Some(crate::clock::sleep_until(until))),
    }
}
