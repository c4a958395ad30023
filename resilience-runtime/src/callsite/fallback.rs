//! The glue between a breaker site and its `fallback = …` fn: a call that
//! failed, was shed or was rejected is handed to the fallback, which is
//! logged at WARN and counted, so that no fallback answers unseen.

use std::sync::atomic::Ordering;

use super::breaker::{BreakerSite, SiteKind, rejected_call};
use crate::breaker::Permit;
pub use crate::fallback::FallbackKind;
use crate::retry::{Classify, FromRuntimeError, Outcome};
use crate::telemetry::{self, Fallback, Labels};
use crate::{DependencyDown, Error};

/// A fn that answers for a call: `fallback = f` calls `f(arguments…,
/// error)`, the protected fn's arguments (`self` first for a method) and
/// then the error the call ended with. The expansion calls the fallback
/// through this trait so that a fallback of the wrong shape (most often one
/// missing the error parameter) is reported at its path with the rule and
/// the fix, not only as rustc's "takes 1 argument but 2 were supplied".
/// Implemented for fns of up to 16 arguments before the error.
#[diagnostic::on_unimplemented(
    message = "this fn cannot be the `fallback`: a fallback is called with the protected fn's arguments and then the error the call ended with, `{E}`",
    label = "called as `fallback(arguments…, error)`",
    note = "add the error as the fallback's last parameter, `error: {E}`: the fallback of `async fn get_user(id: u64) -> Result<User, {E}>` is `async fn cached_user(id: u64, error: {E}) -> Result<User, {E}>`",
    note = "its other parameters are the protected fn's own, in its order (`self` first for a method); the error is the last attempt's, or `{E}::from(resilience::Error::DependencyDown(..))` when the breaker rejected the call"
)]
pub trait FallbackFn<Args, E> {
    /// What the fallback returns: a future of the fn's own `Result<T, E>`.
    type Answer;
    /// Calls the fallback with `args` and then `error`.
    fn answer(self, args: Args, error: E) -> Self::Answer;
}

macro_rules! fallback_fn {
    ($($arg:ident)*) => {
        impl<F, R, E, $($arg,)*> FallbackFn<($($arg,)*), E> for F
        where
            F: FnOnce($($arg,)* E) -> R,
        {
            type Answer = R;
            #[allow(non_snake_case)]
            fn answer(self, ($($arg,)*): ($($arg,)*), error: E) -> R {
                self($($arg,)* error)
            }
        }
    };
}

fallback_fn!();
fallback_fn!(A1);
fallback_fn!(A1 A2);
fallback_fn!(A1 A2 A3);
fallback_fn!(A1 A2 A3 A4);
fallback_fn!(A1 A2 A3 A4 A5);
fallback_fn!(A1 A2 A3 A4 A5 A6);
fallback_fn!(A1 A2 A3 A4 A5 A6 A7);
fallback_fn!(A1 A2 A3 A4 A5 A6 A7 A8);
fallback_fn!(A1 A2 A3 A4 A5 A6 A7 A8 A9);
fallback_fn!(A1 A2 A3 A4 A5 A6 A7 A8 A9 A10);
fallback_fn!(A1 A2 A3 A4 A5 A6 A7 A8 A9 A10 A11);
fallback_fn!(A1 A2 A3 A4 A5 A6 A7 A8 A9 A10 A11 A12);
fallback_fn!(A1 A2 A3 A4 A5 A6 A7 A8 A9 A10 A11 A12 A13);
fallback_fn!(A1 A2 A3 A4 A5 A6 A7 A8 A9 A10 A11 A12 A13 A14);
fallback_fn!(A1 A2 A3 A4 A5 A6 A7 A8 A9 A10 A11 A12 A13 A14 A15);
fallback_fn!(A1 A2 A3 A4 A5 A6 A7 A8 A9 A10 A11 A12 A13 A14 A15 A16);

/// Calls `fallback` with `args` and then `error`. The error comes first
/// so that its type is known when the fallback's shape is checked: a
/// fallback missing the error is then no fn of fewer arguments whose last
/// happens to be `E`, and [`FallbackFn`]'s message names the rule.
pub fn fallback<F, Args, E>(error: E, fallback: F, args: Args) -> F::Answer
where
    F: FallbackFn<Args, E>,
{
    fallback.answer(args, error)
}

/// What a call with a fallback came to.
#[derive(Debug)]
pub enum Answer<T, E> {
    /// The call ran and its result stands.
    Done(Result<T, E>),
    /// The breaker rejected the call (the error is its
    /// [`Error::DependencyDown`]), or the call failed after its retries,
    /// if any: the fallback answers, and is handed the error.
    Fallback(E),
}

/// Like [`settle`](super::settle), for a site with a fallback: a failure
/// (what is left after the retries, a hung dependency whose time ran out
/// included) or a call a load limiter shed hands the call to the
/// fallback, logged at WARN and counted. The breaker counts the outcome (a
/// shed call: nothing).
pub fn settle_or_fallback<T, E>(
    site: &'static BreakerSite<impl SiteKind>,
    permit: Permit<'_>,
    result: Result<T, E>,
) -> Answer<T, E>
where
    E: Classify + FromRuntimeError,
{
    let outcome = match &result {
        Ok(_) => Outcome::Success,
        Err(error) => error.outcome(),
    };
    permit.settle(outcome);
    match result {
        // A failure, or a call a load limiter shed: no answer either.
        Err(error) if crate::fallback::falls_back(&error) => {
            site.fallbacks.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                breaker = site.name,
                reason = error.reason().map_or("unknown", |reason| reason.as_str()),
                "call failed: the fallback answers"
            );
            Answer::Fallback(error)
        }
        result => Answer::Done(result),
    }
}

/// A call the breaker rejected, at a site with a fallback: the fallback
/// answers, handed the rejection as the caller's error, logged at WARN and
/// counted.
pub fn rejected<T, E: FromRuntimeError>(
    site: &'static BreakerSite<impl SiteKind>,
    down: DependencyDown,
) -> Answer<T, E> {
    rejected_call(down);
    site.fallbacks.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(
        breaker = site.name,
        state = down.state(),
        "dependency down: the fallback answers"
    );
    Answer::Fallback(E::from_runtime(Error::DependencyDown(down)))
}

/// Counts the fallback fn's answer in `http_client_fallbacks_total`, by
/// what it is (see [`FallbackKind`]), and logs it at WARN; a fallback that
/// returned an error (`None`) answered nothing and is not counted.
#[inline]
pub fn fell_back(site: &'static BreakerSite<impl SiteKind>, kind: Option<Fallback>) {
    if let Some(kind) = kind {
        telemetry::fallback(Labels::of(site.name), kind);
    }
}
