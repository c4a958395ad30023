//! The fallbacks of the [guide](crate::guide#fallbacks), in its order of
//! preference, as types a caller cannot mistake for a fresh, whole answer:
//!
//! 1. [`MaybeStale`]: a value that is either fresh or the last good one,
//!    marked stale; [`LastGood`] keeps the last good value per key and
//!    serves it, logged at WARN, when the dependency fails. With the
//!    `axum` feature a stale answer carries `X-From-Cache: stale`.
//! 2. [`Part`]: one part of a response that is either there or explicitly
//!    [`Unavailable`], so a page can be served without the part that
//!    failed, and say so.
//! 3. Fail fast: with the `axum` feature, [`DependencyDown`](crate::DependencyDown)
//!    and [`Error`](crate::Error) answer 503 (or 504 for a timeout) with a
//!    body naming the dependency, and `Retry-After` when the breaker knows
//!    when its cooldown ends.
//!
//! Every fallback answer is counted in `http_client_fallbacks_total{kind}`
//! (`stale`, `partial`, `fail_fast`, or `fallback_fn` for a
//! `#[circuit_breaker(fallback = …)]` fn that answers with neither type).
//! A `fallback =` fn that returns a [`MaybeStale`] or a [`Part`] is
//! counted by what it returned:
//!
//! ```
//! use resilience::circuit_breaker;
//! use resilience::fallback::{LastGood, MaybeStale};
//!
//! struct Prices {
//!     last_good: LastGood<String, u64>,
//! }
//!
//! impl Prices {
//!     #[circuit_breaker(name = "prices", fallback = Self::stale_price)]
//!     async fn price(&self, sku: String) -> Result<MaybeStale<u64>, std::io::Error> {
//!         let cents = prices_api::get(&sku).await?;
//!         Ok(self.last_good.fresh(sku, cents))
//!     }
//!
//!     // Runs when `price` failed or its breaker is open, with `price`'s
//!     // arguments and the error it ended with: the last good value,
//!     // marked stale, or that error when there is none.
//!     async fn stale_price(
//!         &self,
//!         sku: String,
//!         error: std::io::Error,
//!     ) -> Result<MaybeStale<u64>, std::io::Error> {
//!         self.last_good.stale(&sku).ok_or(error)
//!     }
//! }
//! # mod prices_api {
//! #     pub async fn get(_: &str) -> Result<u64, std::io::Error> { Ok(4200) }
//! # }
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let prices = Prices { last_good: LastGood::new("prices") };
//! let price = prices.price("boots".into()).await.unwrap();
//! assert!(!price.is_stale());
//! assert_eq!(*price.value(), 4200);
//! # }
//! ```

#[cfg(feature = "axum")]
mod axum;
mod partial;
mod stale;

pub use partial::{Part, Unavailable};
pub use stale::{LastGood, MaybeStale};

use crate::retry::{Classify, Outcome, Reason};
use crate::telemetry::Fallback;

/// Whether `error` calls for a fallback: the dependency failed (a 5xx, a
/// timeout, a network error), a breaker rejected the call or a load limiter
/// shed it (which is no failure for the breaker, but no answer either). A 4xx is an answer and a
/// cancelled call asked for nothing: neither falls back. What the macros'
/// `fallback =` answers too.
#[doc(hidden)]
pub fn falls_back<E: Classify>(error: &E) -> bool {
    error.outcome() == Outcome::Failure
        || matches!(
            error.reason(),
            Some(Reason::CircuitOpen | Reason::Overloaded)
        )
}

/// Which fallback a `fallback =` fn's answer is, for the macros'
/// expansion: a [`MaybeStale`] answered stale is [`Fallback::Stale`], a
/// [`Part`] answered unavailable is [`Fallback::Partial`], any other `Ok`
/// [`Fallback::Function`], and an `Err` none: a fallback that fails (the
/// `last_good.stale(&key).ok_or(error)` idiom with nothing cached) answered
/// nothing, and is neither counted nor logged as an answer. Called as
/// `(&answer).fallback_kind()`, so that the impls for these types win over
/// the one for every `&Result` (method resolution tries `&answer` before
/// `&&answer`).
#[doc(hidden)]
pub trait FallbackKind {
    /// The `kind` label of this answer; `None` when it is no answer.
    fn fallback_kind(&self) -> Option<Fallback>;
}

impl<T, E> FallbackKind for Result<MaybeStale<T>, E> {
    fn fallback_kind(&self) -> Option<Fallback> {
        match self {
            Ok(answer) if answer.is_stale() => Some(Fallback::Stale),
            Ok(_) => Some(Fallback::Function),
            Err(_) => None,
        }
    }
}

impl<T, E> FallbackKind for Result<Part<T>, E> {
    fn fallback_kind(&self) -> Option<Fallback> {
        match self {
            Ok(Part::Unavailable(_)) => Some(Fallback::Partial),
            Ok(_) => Some(Fallback::Function),
            Err(_) => None,
        }
    }
}

impl<T, E> FallbackKind for &Result<T, E> {
    fn fallback_kind(&self) -> Option<Fallback> {
        self.is_ok().then_some(Fallback::Function)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // `(&answer).fallback_kind()` is the form the macros expand to.
    #[allow(clippy::needless_borrow)]
    #[test]
    fn the_kind_is_read_from_the_answer() {
        let stale: Result<MaybeStale<u8>, ()> = Ok(MaybeStale::stale(1, Default::default()));
        let fresh: Result<MaybeStale<u8>, ()> = Ok(MaybeStale::Fresh(1));
        let partial: Result<Part<u8>, ()> = Ok(Part::Unavailable(Unavailable::new("recs")));
        let whole: Result<Part<u8>, ()> = Ok(Part::Available(1));
        let other: Result<u8, ()> = Ok(1);
        assert_eq!((&stale).fallback_kind(), Some(Fallback::Stale));
        assert_eq!((&fresh).fallback_kind(), Some(Fallback::Function));
        assert_eq!((&partial).fallback_kind(), Some(Fallback::Partial));
        assert_eq!((&whole).fallback_kind(), Some(Fallback::Function));
        assert_eq!((&other).fallback_kind(), Some(Fallback::Function));
    }

    // A fallback that fails answered nothing, whatever its type.
    #[allow(clippy::needless_borrow)]
    #[test]
    fn a_failed_fallback_is_no_answer() {
        let stale: Result<MaybeStale<u8>, ()> = Err(());
        let partial: Result<Part<u8>, ()> = Err(());
        let other: Result<u8, ()> = Err(());
        assert_eq!((&stale).fallback_kind(), None);
        assert_eq!((&partial).fallback_kind(), None);
        assert_eq!((&other).fallback_kind(), None);
    }
}
