//! Load-limit sites: the `static` of a `#[retry(limit = "…")]` or
//! `#[circuit_breaker(limit = "…")]` fn, which finds its limiter in the
//! registry once, and the attempt that takes a slot of it.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use crate::limit::{LimitConfig, Limiter, Priority, VegasConfig};
use crate::registry;
use crate::retry::{Classify, FromRuntimeError};

/// The load limiter of one `#[retry(limit = "…")]` site: the registry's
/// limiter of that name (`[limits.<name>]`, `RegistryBuilder::limit`), or
/// else an adaptive limit at Netflix's Vegas defaults, shared by every site
/// of that name; resolved on the first call.
#[derive(Debug)]
pub struct LimitSite {
    name: &'static str,
    priority: Priority,
    resolved: OnceLock<Option<Arc<Limiter>>>,
}

impl LimitSite {
    /// The site of the limiter `name`, whose attempts have `priority`.
    pub const fn new(name: &'static str, priority: Priority) -> Self {
        Self {
            name,
            priority,
            resolved: OnceLock::new(),
        }
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
    let limiter = site.resolved.get_or_init(|| {
        registry::global().limiter_or_default(site.name, LimitConfig::adaptive(VegasConfig::new()))
    });
    match limiter {
        Some(limiter) => {
            let priority = crate::limit::scoped_priority().unwrap_or(site.priority);
            limiter.call(priority, attempt).await
        }
        None => attempt.await,
    }
}
