//! The HTTP rules every HTTP client integration applies alike (the reqwest
//! middleware, the tower layer): what a response's status and
//! `Retry-After` say, and which requests go out once.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, Method, StatusCode};

use crate::idempotency::IDEMPOTENCY_KEY_HEADER;
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

/// `true` for a `POST` or `PATCH` without an `Idempotency-Key` header: a
/// retry could apply it twice.
pub(crate) fn lacks_idempotency_key(method: &Method, headers: &HeaderMap) -> bool {
    matches!(*method, Method::POST | Method::PATCH) && !headers.contains_key(IDEMPOTENCY_KEY_HEADER)
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

/// What one request asks of a client-wide layer (the reqwest middleware or
/// the tower layer), set as a request extension (`with_extension` on a
/// `reqwest_middleware::RequestBuilder`, `extensions_mut().insert(…)` on
/// an `http::Request`).
///
/// ```
/// # #[cfg(feature = "tower")] fn main() {
/// use resilience::tower::RetryOverride;
///
/// // A POST the server treats as a query (no side effects): retried
/// // like a GET although it carries no Idempotency-Key.
/// let mut request = http::Request::post("http://127.0.0.1:8080/reports/query")
///     .body(String::from("{\"from\":\"2026-11-01\"}"))
///     .unwrap();
/// request.extensions_mut().insert(RetryOverride::Idempotent);
/// # }
/// # #[cfg(not(feature = "tower"))] fn main() {}
/// ```
///
/// ```no_run
/// # #[cfg(feature = "reqwest-middleware")]
/// # async fn demo() -> Result<(), reqwest_middleware::Error> {
/// use resilience::http::{ResilienceMiddleware, RetryOverride};
/// use resilience::Policy;
///
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(ResilienceMiddleware::new("search", Policy::http()))
///     .build();
/// // A search that the user will repeat anyway: one attempt only.
/// let page = client
///     .get("http://127.0.0.1:8080/search?q=boots")
///     .with_extension(RetryOverride::Never)
///     .send()
///     .await?;
/// # Ok(()) }
/// ```
#[cfg(any(feature = "reqwest-middleware", feature = "tower"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryOverride {
    /// Send this request once, whatever the policy allows; the breaker
    /// still counts it.
    Never,
    /// This `POST` or `PATCH` has no side effect a second copy could
    /// repeat (a query sent as a POST, an upsert keyed by its body), so
    /// it may be retried without an `Idempotency-Key`. Only the caller
    /// knows this; a wrong claim can apply a request twice. A streaming
    /// body is still sent once.
    Idempotent,
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
