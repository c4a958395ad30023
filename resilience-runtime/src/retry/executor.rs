//! The retry executor: a future that runs an operation under a [`Policy`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use rand::RngCore;

use super::attempts::{Attempts, Driver, ErrorSlot, Kept, NotKept};
use super::turn::{Stage, Turn, Turned};
use super::{Classify, DefaultRng, Event, FromRuntimeError, Outcome, Policy, Reason, Verdict};
use crate::error::Cause;

/// Decides, at one call site, whether an error is worth retrying.
///
/// The default, [`ByClassify`], asks the error's [`Classify`] impl. A
/// closure returning a [`Verdict`] or a `bool` (`true`: retry) overrides it
/// for one call site, as `#[retry(when = …)]` does. Every loop of the
/// library classifies through it: [`Retry`], the blocking executor and the
/// attributes' own chain.
// Neither `{Self}` nor `{E}` in the message: at a `#[retry(when = …)]`
// site the first is wrapped in the chain's keeper and the second is not
// inferred yet when rustc reports it.
#[diagnostic::on_unimplemented(
    message = "the `when` classifier cannot classify this error type",
    label = "not the error type the classifier takes",
    note = "a `when` classifier is a fn or closure taking a reference to the error type (`&E` of `Result<T, E>`) and returning a `Verdict`, or a `bool` where `true` means retry"
)]
pub trait Classifier<E> {
    /// The verdict for `error`.
    fn when(&mut self, error: &E) -> Verdict;

    /// What `error` says about the dependency, for a circuit breaker
    /// ([`CircuitBreaker::call_with`](crate::breaker::CircuitBreaker::call_with)).
    ///
    /// # Default
    ///
    /// The [outcome](Verdict::outcome) of [`when`](Self::when)'s verdict;
    /// [`ByClassify`] asks [`Classify::outcome`].
    fn outcome(&mut self, error: &E) -> Outcome {
        self.when(error).outcome()
    }

    /// Keeps a failed attempt's `error` as the [`Cause`] of the runtime
    /// error that may end the chain later.
    ///
    /// # Default
    ///
    /// Keeps nothing; [`Retry::keep_last_error`] keeps every error.
    fn keep(&mut self, error: E) -> Option<Cause> {
        drop(error);
        None
    }

    /// Why `error`, judged `verdict`, is the dependency's failure: the
    /// `reason` label of `dependency_errors_total`, or `None` when it is
    /// not one.
    ///
    /// # Default
    ///
    /// [`Reason::Network`] when the verdict's [outcome](Verdict::outcome)
    /// is a failure, as [`Classify::reason`]'s default; [`ByClassify`]
    /// asks [`Classify::reason`].
    fn reason(&mut self, error: &E, verdict: Verdict) -> Option<Reason> {
        let _ = error;
        (verdict.outcome() == Outcome::Failure).then_some(Reason::Network)
    }
}

/// A classifier that also keeps each failed attempt's error, from
/// [`Retry::keep_last_error`].
#[derive(Debug, Clone, Copy, Default)]
pub struct KeepLast<W>(W);

impl<W> KeepLast<W> {
    /// `when`, keeping every failed attempt's error.
    #[inline(always)]
    pub(crate) const fn new(when: W) -> Self {
        Self(when)
    }
}

impl<E, W> Classifier<E> for KeepLast<W>
where
    E: std::error::Error + Send + Sync + 'static,
    W: Classifier<E>,
{
    #[inline]
    fn when(&mut self, error: &E) -> Verdict {
        self.0.when(error)
    }

    #[inline]
    fn outcome(&mut self, error: &E) -> Outcome {
        self.0.outcome(error)
    }

    fn keep(&mut self, error: E) -> Option<Cause> {
        Some(Cause::new(error))
    }

    #[inline]
    fn reason(&mut self, error: &E, verdict: Verdict) -> Option<Reason> {
        self.0.reason(error, verdict)
    }
}

/// The default classifier: the error's own [`Classify`] impl.
#[derive(Debug, Clone, Copy, Default)]
pub struct ByClassify;

impl<E: Classify> Classifier<E> for ByClassify {
    #[inline]
    fn when(&mut self, error: &E) -> Verdict {
        error.classify()
    }

    #[inline]
    fn outcome(&mut self, error: &E) -> Outcome {
        error.outcome()
    }

    #[inline]
    fn reason(&mut self, error: &E, _: Verdict) -> Option<Reason> {
        error.reason()
    }
}

impl<E, F, V> Classifier<E> for F
where
    F: FnMut(&E) -> V,
    V: Into<Verdict>,
{
    fn when(&mut self, error: &E) -> Verdict {
        self(error).into()
    }
}

impl From<bool> for Verdict {
    /// `true` is [`Verdict::Transient`], `false` is [`Verdict::Permanent`].
    fn from(retry: bool) -> Self {
        if retry {
            Verdict::Transient
        } else {
            Verdict::Permanent
        }
    }
}

/// A hook that sees each attempt's outcome: for logs, metrics, and the
/// dead-letter queue of a background consumer.
pub trait Notify<E> {
    /// Called once per attempt.
    fn notify(&mut self, event: &Event<'_, E>);
}

/// The default hook: does nothing, and costs nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoNotify;

impl<E> Notify<E> for NoNotify {
    #[inline(always)]
    fn notify(&mut self, _: &Event<'_, E>) {}
}

impl<E, F: FnMut(&Event<'_, E>)> Notify<E> for F {
    fn notify(&mut self, event: &Event<'_, E>) {
        self(event)
    }
}

impl<E, A: Notify<E>, B: Notify<E>> Notify<E> for (A, B) {
    fn notify(&mut self, event: &Event<'_, E>) {
        self.0.notify(event);
        self.1.notify(event);
    }
}

pin_project! {
    /// A retry chain in progress: runs `op` until it succeeds, fails
    /// permanently, or the policy, the elapsed time or the caller's
    /// deadline says stop.
    ///
    /// Built by [`Policy::retry`]; `.await` it. Dropping it cancels
    /// everything: the attempt in flight and the pending timer are dropped
    /// with it, and nothing is left running.
    ///
    /// The first attempt costs no clock read, no allocation and no random
    /// number when it succeeds at its first poll; the clock is read when an
    /// attempt is first pending, so `max_elapsed` still covers it.
    ///
    /// # Panics
    ///
    /// Like [`tokio::time::sleep`], a chain that has to pause or time an
    /// attempt panics outside a Tokio runtime with the time driver enabled.
    /// Polling it again after it completed panics.
    #[must_use = "a retry chain does nothing unless it is `.await`ed"]
    // `repr(C)`, the chain (`attempts`, its policy) first, at the start of
    // the future: laid out by the compiler, the success path takes 13 more
    // instructions (BENCHMARKS.md, "Hot-path techniques").
    #[repr(C)]
    pub struct Retry<F, Fut, N = NoNotify, W = ByClassify, R = DefaultRng, S = NotKept> {
        attempts: Attempts<R, Policy, S>,
        op: F,
        notify: N,
        when: W,
        #[pin]
        turn: Turn<Fut>,
    }
}

impl Policy {
    /// Runs `op` under this policy; see [`Retry`].
    ///
    /// `op` builds one attempt: it is called again for every retry, so the
    /// future it returns must own (clones of) what it needs.
    #[inline(always)]
    pub fn retry<F, Fut, T, E>(self, op: F) -> Retry<F, Fut>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        Retry::fresh(
            Attempts::with_rng(self, DefaultRng),
            op,
            NoNotify,
            ByClassify,
        )
    }
}

impl<F, Fut, T, E, N, W, R, S: ErrorSlot> Retry<F, Fut, N, W, R, S>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    /// Calls `notify` with every attempt's outcome (see [`Event`]).
    pub fn notify<N2>(self, notify: N2) -> Retry<F, Fut, N2, W, R, S>
    where
        N2: FnMut(&Event<'_, E>),
    {
        self.notify_with(notify)
    }

    /// Like [`notify`](Self::notify), for any [`Notify`] implementation.
    pub fn notify_with<N2: Notify<E>>(self, notify: N2) -> Retry<F, Fut, N2, W, R, S> {
        let Retry {
            attempts, op, when, ..
        } = self;
        Retry::fresh(attempts, op, notify, when)
    }

    /// Classifies errors with `when` instead of their [`Classify`] impl;
    /// `when` returns a [`Verdict`], or a `bool` where `true` means retry.
    pub fn when<W2, V>(self, when: W2) -> Retry<F, Fut, N, W2, R, S>
    where
        W2: FnMut(&E) -> V,
        V: Into<Verdict>,
    {
        let Retry {
            attempts,
            op,
            notify,
            ..
        } = self;
        Retry::fresh(attempts, op, notify, when)
    }

    /// Keeps each failed attempt's error, so that a chain that then runs
    /// out of time ([`Error::MaxElapsedExceeded`](crate::Error::MaxElapsedExceeded), [`Error::DeadlineExceeded`](crate::Error::DeadlineExceeded))
    /// tells the caller what the dependency answered before it hung, as
    /// the error's `source()` and in its message. Costs one allocation per
    /// retried attempt; the attributes always do it for an error type that
    /// is a `std::error::Error + Send + Sync + 'static`.
    ///
    /// ```
    /// use resilience::{Error, Policy};
    /// use std::error::Error as _;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let policy = Policy::builder().with_max_elapsed(Duration::from_secs(1)).build().unwrap();
    /// let mut first = true;
    /// let err = policy
    ///     .retry(|| {
    ///         let refused = std::mem::take(&mut first);
    ///         async move {
    ///             if refused {
    ///                 return Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    ///             }
    ///             std::future::pending::<Result<(), std::io::Error>>().await // hangs
    ///         }
    ///     })
    ///     .keep_last_error()
    ///     .await
    ///     .unwrap_err();
    /// let runtime = err.get_ref().unwrap().downcast_ref::<Error>().unwrap();
    /// assert!(matches!(runtime, Error::MaxElapsedExceeded { attempts: 2, .. }));
    /// assert_eq!(runtime.last().unwrap().to_string(), "connection refused");
    /// # }
    /// ```
    pub fn keep_last_error(self) -> Retry<F, Fut, N, KeepLast<W>, R, Kept>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let Retry {
            attempts,
            op,
            notify,
            when,
            ..
        } = self;
        Retry::fresh(attempts.keeping(), op, notify, KeepLast(when))
    }

    /// Draws jitter from `rng`: a seeded generator makes a schedule
    /// reproducible in tests. Never share one seed between processes in
    /// production: identical jitter is no jitter.
    pub fn with_rng<R2: RngCore>(self, rng: R2) -> Retry<F, Fut, N, W, R2, S> {
        let Retry {
            attempts,
            op,
            notify,
            when,
            ..
        } = self;
        let policy = *attempts.policy();
        Retry::fresh(Attempts::with_rng(policy, rng), op, notify, when)
    }
}

impl<F, Fut, N, W, R, S: ErrorSlot> Retry<F, Fut, N, W, R, S> {
    #[inline(always)]
    fn fresh(attempts: Attempts<R, Policy, S>, op: F, notify: N, when: W) -> Self {
        Retry {
            attempts,
            op,
            notify,
            when,
            turn: Turn::new(None),
        }
    }

    /// Attempts started so far.
    pub fn attempts(&self) -> u32 {
        self.attempts.attempt()
    }

    /// The policy this chain runs under.
    pub fn policy(&self) -> &Policy {
        self.attempts.policy()
    }
}

impl<F, Fut, N, W, R, S: ErrorSlot> fmt::Debug for Retry<F, Fut, N, W, R, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("policy", self.attempts.policy())
            .field("attempt", &self.attempts.attempt())
            .field("started", &self.attempts.started())
            .finish_non_exhaustive()
    }
}

/// The hooks of a [`Retry`] or a [`BlockingRetry`](super::BlockingRetry)
/// chain, for [`Attempts`]' rules: its classifier and its [`Notify`].
pub(super) struct Hooks<'a, W, N> {
    pub(super) when: &'a mut W,
    pub(super) notify: &'a mut N,
}

impl<E, W: Classifier<E>, N: Notify<E>> Driver<E> for Hooks<'_, W, N> {
    #[inline]
    fn judge(&mut self, error: &E) -> Verdict {
        self.when.when(error)
    }

    #[inline]
    fn keep(&mut self, error: E) -> Option<Cause> {
        self.when.keep(error)
    }

    #[inline]
    fn notify(&mut self, event: &Event<'_, E>) {
        self.notify.notify(event);
    }

    fn name(&self) -> &'static str {
        super::layer::UNNAMED
    }
}

impl<F, Fut, T, E, N, W, R, S: ErrorSlot> Future for Retry<F, Fut, N, W, R, S>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: FromRuntimeError,
    N: Notify<E>,
    W: Classifier<E>,
    R: RngCore,
{
    type Output = Result<T, E>;

    // The first poll of a chain whose first attempt needs no timer is
    // inlined into the caller: on the success path every call takes, it is
    // the attempt's own poll and a few stores. Everything else is
    // `poll_chain`, out of line.
    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.as_mut().project();
        let first = if this.turn.as_mut().begin_untimed(this.attempts) {
            this.turn.as_mut().set_attempt((this.op)());
            match this.turn.as_mut().poll_attempt(&super::layer::UNNAMED, cx) {
                Poll::Ready(Ok(value)) => {
                    this.turn.as_mut().succeed();
                    let attempt = this.attempts.attempt();
                    this.notify.notify(&Event::Success { attempt });
                    return Poll::Ready(Ok(value));
                }
                polled => Some(polled),
            }
        } else {
            None
        };
        poll_chain(self, first, cx)
    }
}

/// Everything but the first poll of a plain first attempt; `first` is the
/// outcome of that poll when [`Retry::poll`] made it.
// It takes the future, not its projection: a projection handed over by
// value was written to memory on the success path too, 5 instructions per
// call (BENCHMARKS.md, `Policy::retry`).
#[inline(never)]
fn poll_chain<F, Fut, T, E, N, W, R, S: ErrorSlot>(
    retry: Pin<&mut Retry<F, Fut, N, W, R, S>>,
    mut first: Option<Poll<Result<T, E>>>,
    cx: &mut Context<'_>,
) -> Poll<Result<T, E>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: FromRuntimeError,
    N: Notify<E>,
    W: Classifier<E>,
    R: RngCore,
{
    let mut this = retry.project();
    loop {
        let mut hooks = Hooks {
            when: &mut *this.when,
            notify: &mut *this.notify,
        };
        match this.turn.stage() {
            Stage::Start => {
                if let Err(error) = this.turn.as_mut().begin(this.attempts, &mut hooks) {
                    return Poll::Ready(Err(error));
                }
                this.turn.as_mut().set_attempt((this.op)());
            }
            Stage::Done => panic!("`Retry` polled after it completed"),
            Stage::Running | Stage::Pausing => {}
        }
        let turned = this.turn.as_mut().poll_turn(
            this.attempts,
            &mut hooks,
            &super::layer::UNNAMED,
            first.take(),
            cx,
        );
        match ready!(turned) {
            Turned::Succeeded(value) => {
                let attempt = this.attempts.attempt();
                this.notify.notify(&Event::Success { attempt });
                return Poll::Ready(Ok(value));
            }
            Turned::Failed(error) => return Poll::Ready(Err(error)),
            Turned::Paused => {}
        }
    }
}
