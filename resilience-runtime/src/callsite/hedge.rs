//! Hedge sites: the `static` each `#[hedge]` fn holds, its values checked
//! at compile time, and the call that runs the fn's body as hedged
//! attempts under the runtime's [`Policy::hedge`].

use crate::retry::{Classify, FromRuntimeError, Hedge, Policy};
use crate::telemetry::{self, Labels};

/// The hedge of one `#[hedge]` call site, its values checked at compile
/// time.
#[derive(Debug)]
pub struct HedgeSite {
    hedge: Hedge,
}

impl HedgeSite {
    /// A site named `name` hedging after `delay`, up to `max` attempts.
    pub const fn new(name: &'static str, delay: std::time::Duration, max: u32) -> Self {
        Self {
            hedge: Hedge::new_unchecked(name, delay, max),
        }
    }
}

/// A `#[hedge]` fn's call: its body, an async closure, called once per
/// attempt while earlier attempts are still in flight, under the HTTP
/// policy's `max_elapsed` and the caller's deadline. Observed as one
/// logical call (its span, in which each hedge is logged, and its
/// duration), as a retry chain is.
pub async fn hedge<F, T, E>(site: &'static HedgeSite, attempt: F) -> Result<T, E>
where
    F: AsyncFn() -> Result<T, E>,
    E: Classify + FromRuntimeError,
{
    let attempt = &attempt;
    let policy = Policy::http();
    let call = policy.hedge(site.hedge, move || attempt());
    telemetry::observe(Labels::of(site.hedge.name()), call).await
}
