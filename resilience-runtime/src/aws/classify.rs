//! What an AWS SDK error says: [`Classify`] for `SdkError`, by the SDK's
//! own classifier lists.

use std::time::Duration;

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use aws_smithy_types::retry::ErrorKind;

use crate::error::Error;
use crate::retry::{Classify, Reason, Verdict};

/// The AWS error codes the SDK retries as throttling (`SlowDown`,
/// `Throttling`, `ThrottlingException`, `RequestLimitExceeded`,
/// `TooManyRequestsException`, …): the SDK's own list
/// (`aws_runtime::retries::classifiers::THROTTLING_ERRORS`), not a copy.
pub use aws_runtime::retries::classifiers::THROTTLING_ERRORS;

/// The AWS error codes the SDK retries as transient (`RequestTimeout`,
/// `RequestTimeoutException`): the SDK's own list
/// (`aws_runtime::retries::classifiers::TRANSIENT_ERRORS`).
pub use aws_runtime::retries::classifiers::TRANSIENT_ERRORS;

/// The HTTP statuses the SDK retries whatever the error code: 500, 502,
/// 503 and 504, the default of `aws-smithy-runtime`'s
/// `HttpStatusCodeClassifier` (which keeps its list private).
pub const TRANSIENT_STATUS_CODES: &[u16] = &[500, 502, 503, 504];

/// The SDK's errors, judged as the SDK's own retry classifiers judge them,
/// with the guide's outcome for the breaker:
///
/// | error | verdict | outcome |
/// |---|---|---|
/// | a service error whose code is in [`THROTTLING_ERRORS`] or [`TRANSIENT_ERRORS`] | [`Verdict::Transient`], or [`Verdict::RetryAfter`] with the server's `x-amz-retry-after` | failure |
/// | a service error with status 500, 502, 503 or 504 ([`TRANSIENT_STATUS_CODES`]) | [`Verdict::Transient`] | failure |
/// | any other 5xx | [`Verdict::Fatal`]: not retried, as by the SDK | failure |
/// | any other service error (`NoSuchKey`, `AccessDenied`, a 4xx) | [`Verdict::Permanent`] | success: S3 answered |
/// | a timeout (`SdkError::TimeoutError`) | [`Verdict::Transient`] | failure |
/// | a dispatch failure that is I/O (refused, reset) or a timeout | [`Verdict::Transient`] | failure |
/// | a dispatch failure of another kind the connector names | by that kind: throttling, transient and server errors transient, client errors permanent | |
/// | a dispatch failure the connector cannot judge | [`Verdict::Fatal`] | failure |
/// | a response that could not be read (`SdkError::ResponseError`) | [`Verdict::Transient`] | failure |
/// | a request that could not be built (`SdkError::ConstructionFailure`), and a dispatch failure the caller's own request caused (`is_user`) | [`Verdict::Ignored`]: never retried, and nothing sent, so nothing said about S3's health | ignored |
/// | the runtime's own error carried as an `SdkError` (see [`runtime_error`]) | that error's verdict: an open breaker ignored, a deadline that passed during the call a failure | |
///
/// ```
/// use aws_sdk_s3::operation::get_object::GetObjectError;
/// use aws_smithy_runtime_api::client::result::SdkError;
/// use aws_smithy_runtime_api::http::{Response, StatusCode};
/// use aws_smithy_types::body::SdkBody;
/// use aws_smithy_types::error::ErrorMetadata;
/// use resilience::{Classify, Verdict};
///
/// let slow_down = SdkError::service_error(
///     GetObjectError::generic(ErrorMetadata::builder().code("SlowDown").build()),
///     Response::new(StatusCode::try_from(503).unwrap(), SdkBody::empty()),
/// );
/// assert_eq!(slow_down.classify(), Verdict::Transient);
/// ```
impl<E> Classify for SdkError<E, HttpResponse>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    fn classify(&self) -> Verdict {
        match self {
            SdkError::ConstructionFailure(_) => {
                runtime_error(self).map_or(Verdict::Ignored, Error::classify)
            }
            SdkError::TimeoutError(_) | SdkError::ResponseError(_) => Verdict::Transient,
            SdkError::DispatchFailure(failure) => {
                if failure.is_io() || failure.is_timeout() {
                    Verdict::Transient
                } else if failure.is_user() {
                    Verdict::Ignored
                } else {
                    failure.as_other().map_or(Verdict::Fatal, by_kind)
                }
            }
            SdkError::ServiceError(service) => {
                let response = service.raw();
                service_verdict(
                    self.code(),
                    response.status().as_u16(),
                    retry_after(response),
                )
            }
            // A kind of error a later SDK adds: not retried, and a failure.
            _ => Verdict::Fatal,
        }
    }

    fn reason(&self) -> Option<Reason> {
        match self {
            SdkError::ConstructionFailure(_) => runtime_error(self).and_then(Error::reason),
            SdkError::TimeoutError(_) => Some(Reason::Timeout),
            SdkError::DispatchFailure(failure) if failure.is_timeout() => Some(Reason::Timeout),
            SdkError::DispatchFailure(failure) if failure.is_user() => None,
            SdkError::ServiceError(service) => {
                let status = service.raw().status().as_u16();
                match self.classify() {
                    Verdict::Permanent => None,
                    _ if status == 408 => Some(Reason::Timeout),
                    // A throttled request is a server that cannot keep up,
                    // whatever status carried it.
                    _ => Some(Reason::ServerError),
                }
            }
            _ => Some(Reason::Network),
        }
    }
}

/// The runtime's own errors (an open breaker, a deadline that passed, an
/// attempt timeout of a `#[retry]` around the call) as the SDK's error
/// type, so that a protected fn can return `SdkError` as it is: an
/// `SdkError::ConstructionFailure` whose source is the [`Error`], which
/// [`runtime_error`] gives back.
impl<E, R> From<Error> for SdkError<E, R> {
    fn from(error: Error) -> Self {
        SdkError::construction_failure(error)
    }
}

/// The runtime's [`Error`] an `SdkError` carries (an open breaker's
/// "dependency down", a passed deadline), if it is one.
///
/// ```
/// use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
/// use aws_smithy_runtime_api::client::result::SdkError;
/// use aws_smithy_types::error::ErrorMetadata;
/// use resilience::aws::runtime_error;
/// use resilience::Error;
///
/// let err: SdkError<ErrorMetadata, HttpResponse> = Error::deadline_exceeded(1).into();
/// assert!(matches!(runtime_error(&err), Some(Error::DeadlineExceeded { .. })));
/// ```
pub fn runtime_error<E, R>(error: &SdkError<E, R>) -> Option<&Error>
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match error {
        SdkError::ConstructionFailure(_) => {
            std::error::Error::source(error)?.downcast_ref::<Error>()
        }
        _ => None,
    }
}

/// The verdict on a service error with `code` and `status`, by the SDK's
/// lists.
pub(crate) fn service_verdict(
    code: Option<&str>,
    status: u16,
    retry_after: Option<Duration>,
) -> Verdict {
    let listed = code
        .is_some_and(|code| THROTTLING_ERRORS.contains(&code) || TRANSIENT_ERRORS.contains(&code));
    if listed {
        // The SDK attaches `x-amz-retry-after` to the codes it lists.
        return retry_after.map_or(Verdict::Transient, Verdict::RetryAfter);
    }
    if TRANSIENT_STATUS_CODES.contains(&status) {
        Verdict::Transient
    } else if status >= 500 {
        Verdict::Fatal
    } else {
        Verdict::Permanent
    }
}

/// A retryable kind the SDK names, as a verdict.
pub(crate) fn by_kind(kind: ErrorKind) -> Verdict {
    match kind {
        ErrorKind::ClientError => Verdict::Permanent,
        // Throttling, transient and server errors; and any kind a later
        // SDK adds, which it names to be retried.
        _ => Verdict::Transient,
    }
}

/// The server's `x-amz-retry-after` (milliseconds), as the SDK reads it.
pub(crate) fn retry_after(response: &HttpResponse) -> Option<Duration> {
    response
        .headers()
        .get("x-amz-retry-after")
        .and_then(|value| value.parse::<u64>().ok())
        .map(Duration::from_millis)
}
