//! The errors of an HTTP call.

use std::fmt;
use std::time::Duration;

use reqwest::{Method, StatusCode, Url};

use crate::error::Error;
use crate::retry::{Classify, HttpStatus, Reason, Verdict};

/// A response whose status is not a success, turned into an error.
///
/// Built by [`ResponseExt::check`](super::ResponseExt::check), which drains
/// the body first: the connection goes back to the pool clean (or is closed
/// when the body is large), so nothing of this attempt leaks into the next.
/// The first bytes of the body are kept for the error message.
///
/// Classified by its status and `Retry-After`, as
/// [`HttpStatus::with_retry_after`] does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusError(Box<StatusInner>);

// Boxed: errors travel on the cold path, and a small `Result` keeps the
// hot one fast.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StatusInner {
    status: StatusCode,
    retry_after: Option<Duration>,
    url: Url,
    body: String,
}

impl StatusError {
    pub(super) fn new(
        status: StatusCode,
        retry_after: Option<Duration>,
        url: Url,
        body: String,
    ) -> Self {
        Self(Box::new(StatusInner {
            status,
            retry_after,
            url,
            body,
        }))
    }

    /// The status of the response.
    pub fn status(&self) -> StatusCode {
        self.0.status
    }

    /// The response's `Retry-After`, as a delay from when it arrived.
    pub fn retry_after(&self) -> Option<Duration> {
        self.0.retry_after
    }

    /// The URL that answered (after redirects).
    pub fn url(&self) -> &Url {
        &self.0.url
    }

    /// The start of the response body, lossily decoded, at most
    /// [`StatusError::BODY_EXCERPT`] bytes.
    pub fn body(&self) -> &str {
        &self.0.body
    }

    /// How much of an error body is kept for the message.
    pub const BODY_EXCERPT: usize = 512;
}

impl fmt::Display for StatusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let StatusInner {
            status,
            retry_after,
            url,
            body,
        } = &*self.0;
        write!(f, "HTTP {status} from {url}")?;
        if let Some(delay) = retry_after {
            write!(f, " (Retry-After: {}s)", delay.as_secs())?;
        }
        if !body.is_empty() {
            write!(f, ": {body}")?;
        }
        Ok(())
    }
}

impl std::error::Error for StatusError {}

impl Classify for StatusError {
    fn classify(&self) -> Verdict {
        HttpStatus(self.status().as_u16()).with_retry_after(self.retry_after())
    }

    fn reason(&self) -> Option<Reason> {
        HttpStatus(self.status().as_u16()).reason()
    }
}

/// Why an HTTP call failed: what [`RetriedRequest`](super::RetriedRequest)
/// returns, and an error type a `#[retry]` fn over reqwest can return as
/// is (it implements [`Classify`] and `From<resilience::Error>`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The server answered with a non-success status.
    #[error(transparent)]
    Status(#[from] StatusError),
    /// The request could not be built or sent, or the response could not
    /// be read; classified by [`Classify`] for [`reqwest::Error`].
    #[error(transparent)]
    Transport(#[from] reqwest::Error),
    /// The request's body is a stream: it could be sent once, not again.
    /// Refused before the first attempt; permanent.
    #[error(
        "the body of `{method} {url}` is a stream and cannot be sent again on a retry; \
         buffer it (`.body(bytes)`) or send it without a retry policy"
    )]
    BodyNotReplayable {
        /// The request's method.
        method: Method,
        /// The request's URL.
        url: Box<Url>,
    },
    /// A `POST` or `PATCH` was to be retried without an `Idempotency-Key`
    /// header: a retry could run it twice (the guide's
    /// [idempotency first, retry second](crate::guide#idempotency-first-retry-second)). Refused before the
    /// first attempt by [`RequestBuilderExt::with_policy`](super::RequestBuilderExt::with_policy)
    /// and [`ReplayableRequest::new`](super::ReplayableRequest::new), which
    /// are asked to retry; permanent. The client-wide middleware sends such
    /// a request once instead.
    #[error(
        "`{method} {url}` would be retried without an `Idempotency-Key` header; \
         add one with `.idempotency_key(&IdempotencyKey::new())`, the same for every attempt"
    )]
    MissingIdempotencyKey {
        /// The request's method.
        method: Method,
        /// The request's URL.
        url: Box<Url>,
    },
    /// The runtime stopped the call: an attempt timed out, the caller's
    /// deadline passed, or a breaker is open.
    #[error(transparent)]
    Resilience(#[from] Error),
}

impl HttpError {
    /// The response's status, when the server answered with an error.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            HttpError::Status(err) => Some(err.status()),
            HttpError::Transport(err) => err.status(),
            _ => None,
        }
    }

    /// `true` when a circuit breaker rejected the call without sending it.
    pub fn is_dependency_down(&self) -> bool {
        matches!(self, HttpError::Resilience(Error::DependencyDown(_)))
    }
}

impl Classify for HttpError {
    fn classify(&self) -> Verdict {
        match self {
            HttpError::Status(err) => err.classify(),
            HttpError::Transport(err) => err.classify(),
            HttpError::Resilience(err) => err.classify(),
            HttpError::BodyNotReplayable { .. } | HttpError::MissingIdempotencyKey { .. } => {
                Verdict::Permanent
            }
        }
    }

    fn reason(&self) -> Option<Reason> {
        match self {
            HttpError::Status(err) => err.reason(),
            HttpError::Transport(err) => err.reason(),
            HttpError::Resilience(err) => err.reason(),
            HttpError::BodyNotReplayable { .. } | HttpError::MissingIdempotencyKey { .. } => None,
        }
    }
}
