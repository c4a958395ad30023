//! The classifier ([what may be retried](crate::guide#what-may-be-retried)) applied to reqwest's errors and responses.

use std::error::Error as StdError;
use std::time::Duration;

use crate::retry::{Classify, HttpStatus, Reason, Verdict};

/// The verdict for a response: its status, and `Retry-After` on `429` and
/// `503`, as the guide says [what may be retried](crate::guide#what-may-be-retried).
/// A `2xx` is [`Verdict::Permanent`]: nothing to retry.
///
/// ```
/// use resilience::http::classify_response;
/// use resilience::Verdict;
/// use std::time::Duration;
///
/// let response = |status: u16, retry_after: Option<&str>| {
///     let mut builder = http::Response::builder().status(status);
///     if let Some(value) = retry_after {
///         builder = builder.header("retry-after", value);
///     }
///     reqwest::Response::from(builder.body("").unwrap())
/// };
/// assert_eq!(classify_response(&response(502, None)), Verdict::Transient);
/// assert_eq!(classify_response(&response(400, None)), Verdict::Permanent);
/// assert_eq!(
///     classify_response(&response(429, Some("2"))),
///     Verdict::RetryAfter(Duration::from_secs(2)),
/// );
/// ```
pub fn classify_response(response: &reqwest::Response) -> Verdict {
    crate::http_rules::response_verdict(response.status(), response.headers())
}

/// The `Retry-After` of a response, as a delay from now: either form of
/// the header (seconds or an HTTP date), `None` when absent or unreadable.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    crate::http_rules::retry_after(headers)
}

/// Every transport error is transient, as [the guide](crate::guide#what-may-be-retried)
/// has it: the only errors a retry cannot help are the ones that are not about
/// the transport at all, listed here with their reason.
///
/// | reqwest error | verdict |
/// |---|---|
/// | timeout (`is_timeout`) | transient, reason `timeout` |
/// | connect, DNS, refused, unreachable (`is_connect`) | transient |
/// | connection closed or reset before or during the response, body cut short (EOF) | transient |
/// | any other error while sending the request or reading the response (`is_request`, `is_body`, and whatever reqwest adds) | transient |
/// | `error_for_status` (`is_status`) | by the status, as [`HttpStatus`] |
/// | builder (a bad URL or header: the same request fails the same way), redirect loop (the server's configuration), upgrade | permanent |
/// | decode of a complete body (e.g. invalid JSON: the server would send the same bytes again) | permanent |
impl Classify for reqwest::Error {
    fn classify(&self) -> Verdict {
        if let Some(status) = self.status() {
            return HttpStatus(status.as_u16()).classify();
        }
        if self.is_builder() || self.is_redirect() || self.is_upgrade() {
            return Verdict::Permanent;
        }
        if self.is_decode() && !broken_connection(self) {
            return Verdict::Permanent;
        }
        Verdict::Transient
    }

    fn reason(&self) -> Option<Reason> {
        if let Some(status) = self.status() {
            return HttpStatus(status.as_u16()).reason();
        }
        match self.classify() {
            Verdict::Permanent => None,
            _ if self.is_timeout() => Some(Reason::Timeout),
            _ => Some(Reason::Network),
        }
    }
}

/// Whether the connection broke under the request: hyper's "connection
/// closed before message completed" (the server went away between requests
/// on a pooled connection) and "canceled", or an I/O error of the
/// transient kinds (reset, broken pipe, a body cut short by EOF). reqwest
/// reports a body cut short as a *decode* error, hence the walk down the
/// chain rather than a look at the error kind.
fn broken_connection(err: &reqwest::Error) -> bool {
    let mut source = err.source();
    while let Some(cause) = source {
        if let Some(hyper) = cause.downcast_ref::<hyper::Error>()
            && (hyper.is_incomplete_message() || hyper.is_canceled() || hyper.is_closed())
        {
            return true;
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && io.classify().is_retryable()
        {
            return true;
        }
        source = cause.source();
    }
    false
}
