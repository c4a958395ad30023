//! Cut calls: a call through [`CircuitBreaker::call`](super::CircuitBreaker::call)
//! ended as a failure when its call timeout, probe timeout or the caller's
//! deadline passes while it is pending.

use super::*;

pin_project! {
    /// One logical call through a breaker; built by
    /// [`CircuitBreaker::call`], `.await` it.
    ///
    /// The breaker is asked at the first poll. Dropping the future before
    /// it completes cancels the call: nothing is counted, and a half-open
    /// probe slot it held is freed for the next call.
    ///
    /// # Panics
    ///
    /// Polling it again after it completed panics.
    #[must_use = "a call does nothing unless it is `.await`ed"]
    pub struct Call<'a, Fut, W = ByClassify> {
        pub(super) permit: Permit<'a>,
        pub(super) when: W,
        #[pin]
        pub(super) fut: Fut,
        // Armed when the call is first pending: a call that completes at
        // once reads no clock and arms no timer.
        #[pin]
        pub(super) cut: Option<CutTimer>,
    }
}

pin_project! {
    /// What cuts a pending call: the caller's deadline, the probe timeout
    /// of a probe or the call timeout of any other call, whichever comes
    /// first.
    pub(super) struct CutTimer {
        #[pin]
        pub(super) sleep: Sleep,
        pub(super) by: CutBy,
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) enum CutBy {
    Deadline,
    Timeout(Duration),
}

impl CutBy {
    /// What the caller of a cut call gets.
    pub(super) fn error(self) -> Error {
        match self {
            CutBy::Deadline => Error::deadline_exceeded(1),
            CutBy::Timeout(timeout) => Error::AttemptTimeout(timeout),
        }
    }
}

impl CutTimer {
    /// The cut of a call admitted as `admission`.
    pub(super) fn of(config: &BreakerConfig, admission: u64) -> Self {
        let probe = Admission::unpack(admission)
            .is_some_and(|admission| matches!(admission, Admission::Probe(_)));
        let timeout = if probe {
            config.probe_timeout()
        } else {
            config.call_timeout()
        };
        let end = Instant::now() + timeout;
        let (until, by) = match deadline::current() {
            Some(deadline) if deadline <= end => (deadline, CutBy::Deadline),
            _ => (end, CutBy::Timeout(timeout)),
        };
        CutTimer {
            sleep: crate::clock::sleep_until(until),
            by,
        }
    }
}

impl<Fut, T, E, W> Future for Call<'_, Fut, W>
where
    Fut: Future<Output = Result<T, E>>,
    E: FromRuntimeError,
    W: Classifier<E>,
{
    type Output = Result<T, E>;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.permit.admission {
            IDLE => {
                if let Err(down) = this.permit.start() {
                    return Poll::Ready(Err(E::from_runtime(Error::DependencyDown(down))));
                }
            }
            TAKEN => panic!("`Call` polled after it completed"),
            _ => {}
        }
        let result = match this.fut.poll(cx) {
            Poll::Ready(result) => result,
            Poll::Pending => return poll_cut(this.permit, this.cut, cx),
        };
        match &result {
            Ok(_) => this.permit.settle_in_place(false),
            Err(error) => match this.when.outcome(error) {
                Outcome::Success => this.permit.settle_in_place(false),
                Outcome::Failure => this.permit.settle_in_place(true),
                // Counts nothing, like a cancelled call.
                Outcome::Ignored => this.permit.ignore_in_place(),
            },
        }
        Poll::Ready(result)
    }
}

/// A pending call: arms its cut at the first pending poll, and ends it as
/// a failure when the cut fires (the call in flight is dropped with the
/// `Call`). Out of line: no healthy call is pending long.
#[inline(never)]
pub(super) fn poll_cut<T, E: FromRuntimeError>(
    permit: &mut Permit<'_>,
    mut cut: Pin<&mut Option<CutTimer>>,
    cx: &mut Context<'_>,
) -> Poll<Result<T, E>> {
    if cut.is_none() {
        cut.set(Some(CutTimer::of(
            &permit.breaker.machine.setup.config,
            permit.admission,
        )));
    }
    let Some(armed) = cut.as_mut().as_pin_mut() else {
        return Poll::Pending;
    };
    let armed = armed.project();
    ready!(armed.sleep.poll(cx));
    let error = armed.by.error();
    // A hung dependency: the call counts as failed.
    permit.settle_in_place(true);
    Poll::Ready(Err(E::from_runtime(error)))
}

impl<Fut, W> fmt::Debug for Call<'_, Fut, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("permit", &self.permit)
            .finish_non_exhaustive()
    }
}
