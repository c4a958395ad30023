//! The attributes' retry loop: the expansion of `#[retry]` runs the fn's
//! body inline, once per attempt, and asks a [`Chain`] after each one
//! whether to stop or to pause and go again.
//!
//! It is a loop on [`Attempts`], as [`Retry`](super::Retry),
//! [`BlockingRetry`](super::BlockingRetry) and [`hedge`](super::hedge)
//! are: the rules are theirs, only the loop is written here. What the
//! chain reports to (the call's span, its attempt metrics) comes from
//! above, through [`Scope`], so this module knows nothing of telemetry.

use std::borrow::Borrow;
use std::fmt;
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;

use super::attempts::{AttemptTimer, Attempts, Driver};
use super::executor::When;
use super::{Classify, FromRuntimeError, Policy, Reason, Verdict, layer};
use super::{DefaultRng, Event, GiveUp};
use crate::error::{Cause, Error};

/// What a chain runs under: its policy and its name, behind one pointer
/// (the call site's, resolved once into a `static`).
pub trait Named: Borrow<Policy> {
    /// The chain's name, which marks the thread while an attempt is polled
    /// (see `retry/layer.rs`).
    fn name(&self) -> &'static &'static str;
}

/// The logical call a chain's attempts belong to, where they are reported:
/// the call's span, entered around each poll, and its attempt and call
/// metrics.
pub trait Scope {
    /// The guard of an entered scope.
    type Entered;

    /// Whether nothing listens to the call, so that an attempt may be
    /// polled without entering the scope.
    fn is_quiet(&self) -> bool;

    /// Enters the scope until the guard drops (around one poll).
    fn enter(&self) -> Self::Entered;

    /// One failed attempt's event, with why it failed.
    fn attempt<E>(&self, event: &Event<'_, E>, reason: Option<Reason>);

    /// Attempt `attempt` succeeded, and so did the call.
    fn succeed(&self, attempt: u32);

    /// The call failed, for `reason` (`None`: not the dependency's fault).
    fn fail(&self, reason: Option<Reason>);
}

/// One retry chain in progress: the state between the attempts of one
/// logical call, classified by `W` (see [`When`]), under the policy `P`
/// points to, reporting to `O`.
#[derive(Debug)]
pub struct Chain<W, P, O> {
    // The policy stays where `P` points (the site's `static`), not copied
    // per call. The slot is `Kept` whatever `W` keeps: a chain whose `W`
    // keeps nothing leaves it empty, which costs one inline test.
    attempts: Attempts<DefaultRng, P>,
    when: W,
    /// The logical call's span, clock and attempt metrics.
    scope: O,
    /// Why the last attempt failed, for the metrics.
    reason: Option<Reason>,
}

impl<W, P: Named, O> Chain<W, P, O> {
    /// A chain under `policy`, classifying with `when`, reporting to
    /// `scope`.
    #[inline(always)]
    pub fn new(policy: P, when: W, scope: O) -> Self {
        Self {
            attempts: Attempts::with_rng(policy, DefaultRng),
            when,
            scope,
            reason: None,
        }
    }

    /// The chain's name, reached through the policy's pointer rather than
    /// a second one.
    #[inline(always)]
    fn name(&self) -> &'static &'static str {
        self.attempts.policy_source().name()
    }
}

impl<W, P: Named, O: Scope> Chain<W, P, O> {
    /// Runs one attempt, then either ends the chain with its result
    /// (`Break`) or pauses before the next attempt (`Continue`).
    ///
    /// An opaque future, so that an error type that lacks an impl gets one
    /// error, at this call, rather than a second one at its `.await`.
    #[inline]
    pub fn attempt<Fut, T, E>(
        &mut self,
        attempt: Fut,
    ) -> impl Future<Output = ControlFlow<Result<T, E>>>
    where
        Fut: Future<Output = Result<T, E>>,
        E: FromRuntimeError,
        W: When<E>,
    {
        Attempt::new(self, attempt)
    }

    /// The chain's rules and the hooks they report to, borrowed apart.
    fn hooks(&mut self) -> (&mut Attempts<DefaultRng, P>, Hooks<'_, W, O>) {
        let name = *self.name();
        (
            &mut self.attempts,
            Hooks {
                when: &mut self.when,
                scope: &self.scope,
                reason: &mut self.reason,
                name,
            },
        )
    }

    fn refused<E: FromRuntimeError>(&mut self, reason: GiveUp) -> E
    where
        W: When<E>,
    {
        let (attempts, mut hooks) = self.hooks();
        attempts.on_refused(reason, &mut hooks)
    }

    /// The attempt succeeded: so did the call.
    #[inline(always)]
    fn succeeded<T, E>(&mut self, value: T) -> ControlFlow<Result<T, E>> {
        self.scope.succeed(self.attempts.attempt());
        ControlFlow::Break(Ok(value))
    }

    /// The chain ends with `error`: it closes the call's scope.
    fn failed<T, E>(&self, error: E) -> ControlFlow<Result<T, E>> {
        self.scope.fail(self.reason);
        ControlFlow::Break(Err(error))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Start,
    Running,
    Pausing,
}

pin_project! {
    /// One attempt of a chain and the pause after it, if any.
    ///
    /// The same rules as the runtime's `Retry` executor: an attempt runs
    /// under whichever comes first of the per-attempt timeout, the chain's
    /// `max_elapsed` and the caller's deadline; one that has none of
    /// these reads no clock until it is first pending, and is then cut by
    /// `max_elapsed`. A hand-written future, because the success path is
    /// what every call pays for.
    #[must_use = "an attempt does nothing unless `.await`ed"]
    pub struct Attempt<'a, Fut, W, P, O> {
        chain: &'a mut Chain<W, P, O>,
        stage: Stage,
        #[pin]
        fut: Option<Fut>,
        #[pin]
        timer: AttemptTimer,
    }
}

impl<Fut, W, P: Borrow<Policy>, O> fmt::Debug for Attempt<'_, Fut, W, P, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attempt")
            .field("attempt", &self.chain.attempts.attempt())
            .field("stage", &self.stage)
            .finish_non_exhaustive()
    }
}

impl<'a, Fut, W, P, O> Attempt<'a, Fut, W, P, O> {
    #[inline]
    fn new(chain: &'a mut Chain<W, P, O>, fut: Fut) -> Self {
        Attempt {
            chain,
            stage: Stage::Start,
            fut: Some(fut),
            timer: AttemptTimer::new(),
        }
    }
}

impl<Fut, T, E, W, P, O> Future for Attempt<'_, Fut, W, P, O>
where
    Fut: Future<Output = Result<T, E>>,
    E: FromRuntimeError,
    W: When<E>,
    P: Named,
    O: Scope,
{
    type Output = ControlFlow<Result<T, E>>;

    /// The first poll of an attempt that nothing listens to and no timer
    /// cuts, which is every healthy call's, runs here; the rest out of
    /// line, inside the call's scope.
    #[inline(never)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.as_mut().project();
        let chain = &mut **this.chain;
        if *this.stage == Stage::Start && chain.scope.is_quiet() && chain.attempts.begin_untimed() {
            *this.stage = Stage::Running;
            if let Some(fut) = this.fut.as_mut().as_pin_mut() {
                let polled = {
                    let _polling = layer::polling(chain.name());
                    fut.poll(cx)
                };
                return match polled {
                    Poll::Ready(Ok(value)) => {
                        this.fut.set(None);
                        Poll::Ready(chain.succeeded(value))
                    }
                    polled => self.on_polled(polled, cx),
                };
            }
        }
        self.poll_entered(cx)
    }
}

impl<Fut, T, E, W, P, O> Attempt<'_, Fut, W, P, O>
where
    Fut: Future<Output = Result<T, E>>,
    E: FromRuntimeError,
    W: When<E>,
    P: Named,
    O: Scope,
{
    /// Any poll, inside the call's scope (for a call nothing listens to,
    /// entering it is one test).
    #[inline(never)]
    fn poll_entered(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<ControlFlow<Result<T, E>>> {
        let _entered = self.as_mut().project().chain.scope.enter();
        let mut this = self.as_mut().project();
        let chain = &mut **this.chain;
        if *this.stage == Stage::Start {
            match chain.attempts.begin() {
                Ok(timer) => this.timer.as_mut().start(timer),
                Err(reason) => {
                    this.fut.set(None);
                    let error = chain.refused(reason);
                    return Poll::Ready(chain.failed(error));
                }
            }
            *this.stage = Stage::Running;
        }
        if *this.stage == Stage::Running {
            let Some(fut) = this.fut.as_mut().as_pin_mut() else {
                panic!("`Attempt` polled after it completed");
            };
            let polled = {
                let _polling = layer::polling(chain.name());
                fut.poll(cx)
            };
            return self.on_polled(polled, cx);
        }
        self.poll_pause(cx)
    }

    /// The attempt in flight was polled: it succeeded, failed, or is still
    /// pending under its timer. Out of line, so that the first poll of a
    /// quiet call keeps only its success inline.
    #[inline(never)]
    fn on_polled(
        mut self: Pin<&mut Self>,
        polled: Poll<Result<T, E>>,
        cx: &mut Context<'_>,
    ) -> Poll<ControlFlow<Result<T, E>>> {
        let mut this = self.as_mut().project();
        let chain = &mut **this.chain;
        let result = match polled {
            Poll::Ready(result) => result,
            Poll::Pending => {
                let cut = ready!(this.timer.as_mut().poll_cut(&mut chain.attempts, cx));
                // The timer fired: drop the attempt in flight.
                this.fut.set(None);
                let (attempts, mut hooks) = chain.hooks();
                match attempts.on_cut(cut, &mut hooks) {
                    Ok(timed_out) => Err(timed_out),
                    Err(error) => return Poll::Ready(chain.failed(error)),
                }
            }
        };
        // Drop the finished attempt before pausing.
        this.fut.set(None);
        let error = match result {
            Ok(value) => return Poll::Ready(chain.succeeded(value)),
            Err(error) => error,
        };
        let (attempts, mut hooks) = chain.hooks();
        match attempts.on_error(error, &mut hooks) {
            ControlFlow::Break(error) => Poll::Ready(chain.failed(error)),
            ControlFlow::Continue(pause) => {
                this.timer.as_mut().pause(pause.until);
                *this.stage = Stage::Pausing;
                self.poll_pause(cx)
            }
        }
    }

    /// The pause after a failed attempt: the next one may start once it
    /// is over.
    #[inline(always)]
    fn poll_pause(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ControlFlow<Result<T, E>>> {
        ready!(self.project().timer.poll_pause(cx));
        Poll::Ready(ControlFlow::Continue(()))
    }
}

/// A chain's side of the runtime's rules: its classifier, which also says
/// what to keep of an error, and its call's scope, where every attempt's
/// outcome is reported with the reason of the last failure.
struct Hooks<'a, W, O> {
    when: &'a mut W,
    scope: &'a O,
    reason: &'a mut Option<Reason>,
    name: &'static str,
}

impl<E, W: When<E>, O: Scope> Driver<E> for Hooks<'_, W, O> {
    #[inline]
    fn judge(&mut self, error: &E) -> Verdict {
        let verdict = self.when.when(error);
        *self.reason = self.when.reason(error, verdict);
        verdict
    }

    fn keep(&mut self, error: E) -> Option<Cause> {
        self.when.keep(error)
    }

    fn notify(&mut self, event: &Event<'_, E>) {
        self.scope.attempt(event, *self.reason);
    }

    fn runtime_error(&mut self, error: &Error) {
        *self.reason = error.reason();
    }

    fn name(&self) -> &'static str {
        self.name
    }
}
