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
