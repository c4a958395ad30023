//! The HTTP rules every HTTP client integration applies alike (the reqwest
//! middleware, the tower layer): what a response's status and
//! `Retry-After` say, and which requests go out once.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, Method, StatusCode};

use crate::idempotency::IDEMPOTENCY_KEY_HEADER;
#[cfg(any(feature = "reqwest-middleware", feature = "tower"))]
use crate::retry::RetryOverride;
use crate::retry::{HttpStatus, Verdict, parse_retry_after_bytes};

/// The `Retry-After` of a response, as a delay from now: either form of
/// the header (seconds or an HTTP date), `None` when absent or unreadable.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(http::header::RETRY_AFTER)?;
    parse_retry_after_bytes(value.as_bytes(), SystemTime::now())
}

/// The verdict for a response: its status, and its `Retry-After`.
pub(crate) fn response_verdict(status: StatusCode, headers: &HeaderMap) -> Verdict {
    HttpStatus(status.as_u16()).with_retry_after(retry_after(headers))
}

/// `true` for a `POST` or `PATCH` (`resilience_rules::idempotency`)
/// without an `Idempotency-Key` header: a retry could apply it twice.
pub(crate) fn lacks_idempotency_key(method: &Method, headers: &HeaderMap) -> bool {
    resilience_rules::idempotency::needs_key(method.as_str())
        && !headers.contains_key(IDEMPOTENCY_KEY_HEADER)
}

/// Why a request goes out once under a policy that allows retries, or
/// `None` when it may be retried: `replayable` says whether its body can
/// be sent again.
#[cfg(any(feature = "reqwest-middleware", feature = "tower"))]
pub(crate) fn sent_once_because(
    method: &Method,
    headers: &HeaderMap,
    replayable: bool,
    asked: Option<RetryOverride>,
) -> Option<&'static str> {
    if asked == Some(RetryOverride::Never) {
        return Some("marked RetryOverride::Never");
    }
    if !replayable {
        return Some("a streaming body cannot be sent again");
    }
    if lacks_idempotency_key(method, headers) && asked != Some(RetryOverride::Idempotent) {
        return Some("no Idempotency-Key: a retried POST or PATCH could be applied twice");
    }
    None
}

#[cfg(all(test, any(feature = "reqwest-middleware", feature = "tower")))]
mod tests {
    use super::*;

    #[test]
    fn which_requests_go_out_once() {
        let none = HeaderMap::new();
        let mut keyed = HeaderMap::new();
        keyed.insert(IDEMPOTENCY_KEY_HEADER, "k".parse().unwrap());
        assert_eq!(sent_once_because(&Method::GET, &none, true, None), None);
        assert!(sent_once_because(&Method::POST, &none, true, None).is_some());
        assert_eq!(sent_once_because(&Method::POST, &keyed, true, None), None);
        assert_eq!(
            sent_once_because(&Method::PATCH, &none, true, Some(RetryOverride::Idempotent)),
            None
        );
        assert!(sent_once_because(&Method::GET, &none, false, None).is_some());
        assert!(
            sent_once_because(&Method::PUT, &none, false, Some(RetryOverride::Idempotent))
                .is_some()
        );
        assert!(sent_once_because(&Method::GET, &none, true, Some(RetryOverride::Never)).is_some());
    }
}

/// One attempt through `limit` when there is one (at the request's
/// `priority`): what every HTTP layer's attempt goes through.
#[cfg(any(feature = "reqwest-middleware", feature = "tower"))]
pub(crate) async fn limited<F, T, E>(
    limit: Option<&crate::limit::Limiter>,
    priority: crate::limit::Priority,
    attempt: F,
) -> Result<T, E>
where
    F: std::future::Future<Output = Result<T, E>>,
    E: crate::retry::Classify + crate::retry::FromRuntimeError,
{
    match limit {
        Some(limit) => limit.call(priority, attempt).await,
        None => attempt.await,
    }
}

/// `call` through `breaker` when there is one: what every HTTP layer's
/// logical call goes through.
#[cfg(any(feature = "reqwest-middleware", feature = "tower"))]
pub(crate) async fn through<F, T, E>(
    breaker: Option<&crate::breaker::CircuitBreaker>,
    call: F,
) -> Result<T, E>
where
    F: std::future::Future<Output = Result<T, E>>,
    E: crate::retry::Classify + crate::retry::FromRuntimeError,
{
    match breaker {
        Some(breaker) => breaker.call(call).await,
        None => call.await,
    }
}

/// The builder every HTTP client integration shares (the reqwest
/// middleware, the tower layer): a name, a policy, an optional breaker and
/// an optional hedge, for a struct `$ty` with those four fields; `$path`
/// is its path through the facade, `$what` what it is, for the docs.
#[cfg(any(feature = "reqwest-middleware", feature = "tower"))]
macro_rules! layer_builder {
    ($ty:ident, $path:literal, $what:literal) => {
        impl $ty {
            #[doc = concat!("A ", $what, " named `name` (in logs) that applies `policy`.")]
            ///
            /// ```
            #[doc = concat!("use ", $path, ";")]
            /// use resilience::Policy;
            ///
            #[doc = concat!("let layer = ", stringify!($ty), "::new(\"users\", Policy::http());")]
            /// assert_eq!((layer.name(), layer.policy().max_attempts()), ("users", 3));
            /// assert!(layer.breaker().is_none() && layer.hedge().is_none());
            /// ```
            pub fn new(name: &'static str, policy: $crate::retry::Policy) -> Self {
                Self {
                    name,
                    policy,
                    breaker: None,
                    hedge: None,
                    limit: None,
                }
            }

            /// The policy and the breaker named `name` in the process-wide
            /// [`registry`](crate::registry::global): what the config file or the
            /// code registered for `name`, else the HTTP defaults. The breaker is
            /// the one every `#[circuit_breaker(name = ...)]` of the same name
            /// shares, configured as those sites declare it whether the layer
            /// is built before or after their first call. The load limiter
            /// of that name, if one is configured (`[limits.<name>]` in the file,
            /// [`RegistryBuilder::limit`](crate::registry::RegistryBuilder::limit)),
            /// takes each attempt. A name that only layers use (no attribute carries it) is
            /// declared in the builder
            /// ([`RegistryBuilder::breaker`](crate::registry::RegistryBuilder::breaker),
            /// [`RegistryBuilder::policy`](crate::registry::RegistryBuilder::policy))
            /// for `install()` to accept its sections of the config file.
            ///
            /// ```
            #[doc = concat!("use ", $path, ";")]
            ///
            #[doc = concat!("let layer = ", stringify!($ty), "::named(\"inventory\");")]
            /// assert_eq!(layer.breaker().unwrap().name(), "inventory");
            /// ```
            pub fn named(name: &'static str) -> Self {
                Self::from_registry($crate::registry::global(), name)
            }

            /// Like [`named`](Self::named), from `registry`.
            pub fn from_registry(registry: &$crate::registry::Registry, name: &'static str) -> Self {
                Self {
                    name,
                    policy: registry.policy(name, $crate::retry::PolicyBuilder::http()),
                    breaker: Some(registry.layer_breaker(name).clone()),
                    hedge: None,
                    limit: registry.limiter(name),
                }
            }

            /// Puts every request behind `breaker` (a clone shares its state).
            #[must_use]
            pub fn with_breaker(mut self, breaker: $crate::breaker::CircuitBreaker) -> Self {
                self.breaker = Some(breaker);
                self
            }

            /// Hedges the requests that may be retried instead of retrying
            /// them, by the rules of [`Policy::hedge`](crate::retry::Hedge)
            /// under this policy's `max_elapsed` and budget: after `hedge`'s
            /// delay without an answer another copy goes out, the first good
            /// answer wins and the others are dropped. A request sent once (a
            /// keyless `POST`, a body that cannot be sent twice,
            /// `RetryOverride::Never`) is not hedged either.
            ///
            /// ```
            /// use std::time::Duration;
            /// use resilience::retry::Hedge;
            #[doc = concat!("use ", $path, ";")]
            /// use resilience::Policy;
            ///
            /// let hedge = Hedge::new("search", Duration::from_millis(50), 2)?;
            #[doc = concat!("let layer = ", stringify!($ty), "::new(\"search\", Policy::http()).with_hedge(hedge);")]
            /// assert_eq!(layer.hedge(), Some(hedge));
            /// # Ok::<(), resilience::ConfigError>(())
            /// ```
            #[must_use]
            pub fn with_hedge(mut self, hedge: $crate::retry::Hedge) -> Self {
                self.hedge = Some(hedge);
                self
            }

            /// Puts every attempt behind `limiter` (see
            /// [`resilience::limit`](crate::limit)): an attempt it sheds is
            /// not sent, ends the call with `Error::Overloaded` (not
            /// retried, nothing for the breaker), and the limiter learns
            /// from the others. A request's priority is the
            /// [`Priority`](crate::limit::Priority) in its extensions
            /// (`Default` when none).
            ///
            /// ```
            #[doc = concat!("use ", $path, ";")]
            /// use resilience::limit::{AdaptiveLimit, Limiter, VegasConfig};
            /// use resilience::Policy;
            ///
            /// let limit = AdaptiveLimit::new("search", VegasConfig::new())?;
            #[doc = concat!("let layer = ", stringify!($ty), "::new(\"search\", Policy::http()).with_limit(Limiter::adaptive(limit));")]
            /// assert_eq!(layer.limit().and_then(|l| l.as_adaptive()).map(|l| l.limit()), Some(20));
            /// # Ok::<(), resilience::ConfigError>(())
            /// ```
            #[must_use]
            pub fn with_limit(mut self, limiter: $crate::limit::Limiter) -> Self {
                self.limit = Some(::std::sync::Arc::new(limiter));
                self
            }

            /// The limiter given to [`with_limit`](Self::with_limit).
            pub fn limit(&self) -> Option<&$crate::limit::Limiter> {
                self.limit.as_deref()
            }

            /// The hedge given to [`with_hedge`](Self::with_hedge).
            pub fn hedge(&self) -> Option<$crate::retry::Hedge> {
                self.hedge
            }

            /// The breaker, when there is one.
            pub fn breaker(&self) -> Option<&$crate::breaker::CircuitBreaker> {
                self.breaker.as_ref()
            }

            /// The name given to [`new`](Self::new).
            pub fn name(&self) -> &'static str {
                self.name
            }

            /// The retry policy applied to each request.
            pub fn policy(&self) -> &$crate::retry::Policy {
                &self.policy
            }
        }
    };
}

#[cfg(any(feature = "reqwest-middleware", feature = "tower"))]
pub(crate) use layer_builder;
