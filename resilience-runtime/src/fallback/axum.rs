//! The fallbacks as axum responses (cargo feature `axum`).

use axum_core::response::{IntoResponse, Response};
use http::header::{AGE, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use http::{HeaderName, StatusCode};

use super::MaybeStale;
use crate::error::{DependencyDown, Error};
use crate::telemetry::{self, Fallback, Labels};

/// The header that marks a stale answer.
const X_FROM_CACHE: HeaderName = HeaderName::from_static("x-from-cache");

/// `T`'s response; when stale, with `X-From-Cache: stale` and `Age` (its
/// age in whole seconds, as an HTTP cache sends it).
///
/// ```
/// use axum::response::IntoResponse;
/// use resilience::fallback::MaybeStale;
/// use std::time::Duration;
///
/// let response = MaybeStale::stale("Ada", Duration::from_secs(90)).into_response();
/// assert_eq!(response.headers()["x-from-cache"], "stale");
/// assert_eq!(response.headers()["age"], "90");
/// let response = MaybeStale::Fresh("Ada").into_response();
/// assert!(!response.headers().contains_key("x-from-cache"));
/// ```
impl<T: IntoResponse> IntoResponse for MaybeStale<T> {
    fn into_response(self) -> Response {
        match self {
            MaybeStale::Fresh(value) => value.into_response(),
            MaybeStale::Stale { value, age } => {
                let mut response = value.into_response();
                let headers = response.headers_mut();
                headers.insert(X_FROM_CACHE, HeaderValue::from_static("stale"));
                headers.insert(AGE, HeaderValue::from(age.as_secs()));
                response
            }
        }
    }
}

/// Fail fast: `503 Service Unavailable`, a plain-text body naming the
/// dependency and the breaker's state, and `Retry-After` (whole seconds,
/// rounded up) when the breaker was open on a cooldown whose end the
/// rejection carries (see [`DependencyDown::retry_after`]). Counted in
/// `http_client_fallbacks_total{kind="fail_fast"}`.
///
/// ```
/// use axum::response::IntoResponse;
/// use resilience::DependencyDown;
///
/// let response = DependencyDown::new("users", "open").into_response();
/// assert_eq!(response.status(), 503);
/// ```
impl IntoResponse for DependencyDown {
    fn into_response(self) -> Response {
        telemetry::fallback(Labels::of(self.breaker()), Fallback::FailFast);
        let retry_after = self.retry_after();
        let mut body = format!("{self}: the request was not sent");
        if let Some(after) = retry_after {
            body.push_str(&format!("; retry in {} s", whole_seconds(after)));
        }
        body.push('\n');
        let mut response = (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if let Some(after) = retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(whole_seconds(after)));
        }
        response
    }
}

/// [`Error::DependencyDown`] as [`DependencyDown`]'s response (503); a
/// timeout, a passed deadline or a spent retry budget as `504 Gateway
/// Timeout`; a call shed by a load limiter as `503`; a retry refused inside a transaction (a bug in the calling
/// code) as `500`. The body is the error's message.
///
/// ```
/// use axum::response::IntoResponse;
/// use resilience::Error;
///
/// let response = Error::deadline_exceeded(2).into_response();
/// assert_eq!(response.status(), 504);
/// ```
impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = match &self {
            Error::DependencyDown(down) => return down.into_response(),
            // Shed before it was sent: this process is over its limit for
            // the dependency, so it is unavailable here, now.
            Error::Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::AttemptTimeout(_)
            | Error::DeadlineExceeded { .. }
            | Error::MaxElapsedExceeded { .. } => StatusCode::GATEWAY_TIMEOUT,
            Error::RetryInsideTransaction | Error::CommitOutcomeUnknown { .. } => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        (status, format!("{self}\n")).into_response()
    }
}

fn whole_seconds(after: std::time::Duration) -> u64 {
    after.as_secs() + u64::from(after.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn retry_after_is_rounded_up_to_whole_seconds() {
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::from_secs(2)), 2);
        assert_eq!(whole_seconds(Duration::from_millis(2001)), 3);
    }
}
