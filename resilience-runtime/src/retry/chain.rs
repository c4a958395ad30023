//! The attributes' retry loop: the expansion of `#[retry]` runs the fn's
//! body inline, once per attempt, and asks a [`Chain`] after each one
//! whether to stop or to pause and go again.
//!
//! Each attempt is one [`Turn`], the poll loop [`Retry`](super::Retry)
//! drives too, on the rules of [`Attempts`]: only where an attempt comes
//! from and where its outcome goes are written here. What the chain
//! reports to (the call's span, its attempt metrics) comes from above,
//! through [`Scope`], so this module knows nothing of telemetry.

use std::borrow::Borrow;
use std::fmt;
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;

use super::attempts::{Attempts, Driver};
use super::executor::Classifier;
use super::turn::{Stage, Turn, Turned};
use super::{Classify, FromRuntimeError, Policy, Reason, Verdict};
use super::{DefaultRng, Event};
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
/// logical call, classified by `W` (see [`Classifier`]), under the policy `P`
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
        W: Classifier<E>,
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
        #[pin]
        turn: Turn<Fut>,
    }
}

impl<Fut, W, P: Borrow<Policy>, O> fmt::Debug for Attempt<'_, Fut, W, P, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attempt")
            .field("attempt", &self.chain.attempts.attempt())
            .field("stage", &self.turn.stage())
            .finish_non_exhaustive()
    }
}

impl<'a, Fut, W, P, O> Attempt<'a, Fut, W, P, O> {
    #[inline]
    fn new(chain: &'a mut Chain<W, P, O>, fut: Fut) -> Self {
        Attempt {
            chain,
            turn: Turn::new(Some(fut)),
        }
    }
}

impl<Fut, T, E, W, P, O> Future for Attempt<'_, Fut, W, P, O>
where
    Fut: Future<Output = Result<T, E>>,
    E: FromRuntimeError,
    W: Classifier<E>,
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
        if chain.scope.is_quiet() && this.turn.as_mut().begin_untimed(&mut chain.attempts) {
            return match this.turn.as_mut().poll_attempt(chain.name(), cx) {
                Poll::Ready(Ok(value)) => {
                    this.turn.succeed();
                    Poll::Ready(chain.succeeded(value))
                }
                polled => self.poll_turn(Some(polled), cx),
            };
        }
        self.poll_entered(cx)
    }
}

impl<Fut, T, E, W, P, O> Attempt<'_, Fut, W, P, O>
where
    Fut: Future<Output = Result<T, E>>,
    E: FromRuntimeError,
    W: Classifier<E>,
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
        let this = self.as_mut().project();
        let chain = &mut **this.chain;
        match this.turn.stage() {
            Stage::Start => {
                let (attempts, mut hooks) = chain.hooks();
                if let Err(error) = this.turn.begin(attempts, &mut hooks) {
                    return Poll::Ready(chain.failed(error));
                }
            }
            Stage::Done => panic!("`Attempt` polled after it completed"),
            Stage::Running | Stage::Pausing => {}
        }
        self.poll_turn(None, cx)
    }

    /// The turn, after the poll of the attempt the caller made (`polled`)
    /// if any: the attempt succeeded, the chain ends, or the pause after
    /// a failed attempt is over. Out of line, so that the first poll of a
    /// quiet call keeps only its success inline.
    #[inline(never)]
    fn poll_turn(
        self: Pin<&mut Self>,
        polled: Option<Poll<Result<T, E>>>,
        cx: &mut Context<'_>,
    ) -> Poll<ControlFlow<Result<T, E>>> {
        let this = self.project();
        let chain = &mut **this.chain;
        let name = chain.name();
        let (attempts, mut hooks) = chain.hooks();
        let turned = ready!(this.turn.poll_turn(attempts, &mut hooks, name, polled, cx));
        Poll::Ready(match turned {
            Turned::Succeeded(value) => chain.succeeded(value),
            Turned::Failed(error) => chain.failed(error),
            Turned::Paused => ControlFlow::Continue(()),
        })
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

impl<E, W: Classifier<E>, O: Scope> Driver<E> for Hooks<'_, W, O> {
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
