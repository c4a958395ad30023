//! Load-limit sites: the `static` of a `#[retry(limit = "…")]` or
//! `#[circuit_breaker(limit = "…")]` fn, which finds its limiter in the
//! registry once, and the attempt that takes a slot of it.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use crate::limit::{Limiter, Priority};
use crate::registry::{self, LimitRate};
use crate::retry::{Classify, FromRuntimeError};

/// The load limiter of one `#[retry(limit = "…")]` site: the registry's
/// limiter of that name (`[limits.<name>]`, `RegistryBuilder::limit`, the
/// `rate` its sites declare), or else an adaptive limit at Netflix's Vegas
/// defaults, shared by every site of that name; resolved on the first call.
#[derive(Debug)]
pub struct LimitSite {
    name: &'static str,
    priority: Priority,
    /// The attribute's `rate` and `burst`, if any.
    rate: Option<LimitRate>,
    resolved: OnceLock<Option<Arc<Limiter>>>,
}

impl LimitSite {
    /// The site of the limiter `name`, whose attempts have `priority`.
    pub const fn new(name: &'static str, priority: Priority) -> Self {
        Self {
            name,
            priority,
            rate: None,
            resolved: OnceLock::new(),
        }
    }

    /// The same site, whose attribute declares the limiter's rate limit.
    pub const fn with_rate(mut self, rate: LimitRate) -> Self {
        self.rate = Some(rate);
        self
    }
}

/// One attempt through the site's limiter: shed with the caller's error
/// made from `Error::Overloaded` (not retried, nothing for the breaker), or
/// run and recorded.
pub async fn limited<F, T, E>(site: &'static LimitSite, attempt: F) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: Classify + FromRuntimeError,
{
    let limiter = site
        .resolved
        .get_or_init(|| registry::global().site_limiter(site.name, site.rate));
    match limiter {
        Some(limiter) => {
            let priority = crate::limit::scoped_priority().unwrap_or(site.priority);
            limiter.call(priority, attempt).await
        }
        None => attempt.await,
    }
}
