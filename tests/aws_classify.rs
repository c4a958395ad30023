//! `Classify` for the AWS SDK's `SdkError`, against the SDK's own retry
//! classifier lists: every entry of `aws-runtime`'s `THROTTLING_ERRORS` and
//! `TRANSIENT_ERRORS` (aws-runtime 1.10, `src/retries/classifiers.rs`) and
//! of `aws-smithy-runtime`'s `TRANSIENT_ERROR_STATUS_CODES` (1.16,
//! `src/client/retries/classifiers.rs`), written out here so that a change
//! in the SDK's lists shows up as a failing test rather than silently.
#![cfg(feature = "aws")]

use std::time::Duration;

use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::{ConnectorError, SdkError};
use aws_smithy_runtime_api::http::{Response, StatusCode};
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::error::ErrorMetadata;
use aws_smithy_types::retry::ErrorKind;
use resilience::aws::{THROTTLING_ERRORS, TRANSIENT_ERRORS, TRANSIENT_STATUS_CODES};
use resilience::retry::Reason;
use resilience::{Classify, Outcome, Verdict};

/// aws-runtime 1.10's `THROTTLING_ERRORS`, in its order.
const SDK_THROTTLING: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
];

/// aws-runtime 1.10's `TRANSIENT_ERRORS`.
const SDK_TRANSIENT: &[&str] = &["RequestTimeout", "RequestTimeoutException"];

/// aws-smithy-runtime 1.16's `TRANSIENT_ERROR_STATUS_CODES`.
const SDK_STATUSES: &[u16] = &[500, 502, 503, 504];

type GetError = SdkError<GetObjectError, HttpResponse>;

fn response(status: u16) -> HttpResponse {
    Response::new(StatusCode::try_from(status).unwrap(), SdkBody::empty())
}

fn service(status: u16, code: Option<&str>) -> GetError {
    let mut meta = ErrorMetadata::builder();
    if let Some(code) = code {
        meta = meta.code(code);
    }
    SdkError::service_error(GetObjectError::generic(meta.build()), response(status))
}

#[test]
fn the_lists_are_the_sdks() {
    assert_eq!(THROTTLING_ERRORS, SDK_THROTTLING);
    assert_eq!(TRANSIENT_ERRORS, SDK_TRANSIENT);
    assert_eq!(TRANSIENT_STATUS_CODES, SDK_STATUSES);
}

#[test]
fn throttling_codes_are_transient_whatever_the_status() {
    for code in SDK_THROTTLING {
        for status in [400, 403, 429, 503] {
            let err = service(status, Some(code));
            assert_eq!(err.classify(), Verdict::Transient, "{code} over {status}");
            assert_eq!(err.outcome(), Outcome::Failure, "{code} over {status}");
            assert_eq!(
                err.reason(),
                Some(Reason::ServerError),
                "{code} over {status}"
            );
        }
    }
}

#[test]
fn transient_codes_are_transient() {
    for code in SDK_TRANSIENT {
        assert_eq!(
            service(400, Some(code)).classify(),
            Verdict::Transient,
            "{code}"
        );
    }
}

#[test]
fn the_sdks_statuses_are_transient_without_a_code() {
    for status in SDK_STATUSES {
        let err = service(*status, None);
        assert_eq!(err.classify(), Verdict::Transient, "{status}");
        assert_eq!(err.reason(), Some(Reason::ServerError), "{status}");
    }
}

#[test]
fn other_5xx_are_failures_the_sdk_does_not_retry() {
    // The SDK retries 500/502/503/504 only; the guide counts every 5xx as
    // the dependency's failure.
    for status in [501, 505, 507] {
        let err = service(status, Some("NotImplemented"));
        assert_eq!(err.classify(), Verdict::Fatal, "{status}");
        assert_eq!(err.outcome(), Outcome::Failure, "{status}");
    }
}

#[test]
fn other_4xx_are_answers() {
    // The guide: other 4xx are not retried, and say the dependency is up.
    for (status, code) in [
        (404, "NoSuchKey"),
        (404, "NoSuchBucket"),
        (403, "AccessDenied"),
        (403, "SignatureDoesNotMatch"),
        (400, "InvalidArgument"),
        (409, "BucketAlreadyOwnedByYou"),
    ] {
        let err = service(status, Some(code));
        assert_eq!(err.classify(), Verdict::Permanent, "{code}");
        assert_eq!(err.outcome(), Outcome::Success, "{code}");
        assert_eq!(err.reason(), None, "{code}");
    }
}

#[test]
fn the_servers_retry_after_is_honoured_on_listed_codes() {
    // The SDK reads `x-amz-retry-after` (milliseconds) on the codes it lists.
    let mut raw = response(503);
    raw.headers_mut().insert("x-amz-retry-after", "1500");
    let err: GetError = SdkError::service_error(
        GetObjectError::generic(ErrorMetadata::builder().code("SlowDown").build()),
        raw,
    );
    assert_eq!(
        err.classify(),
        Verdict::RetryAfter(Duration::from_millis(1500))
    );
}

#[test]
fn timeouts_and_io_failures_are_transient() {
    // aws-smithy-runtime's `TransientErrorClassifier`: timeouts, I/O
    // connector errors and response errors are retried.
    let timeout: GetError = SdkError::timeout_error("attempt timed out");
    assert_eq!(timeout.classify(), Verdict::Transient);
    assert_eq!(timeout.reason(), Some(Reason::Timeout));

    let reset: GetError = SdkError::dispatch_failure(ConnectorError::io("connection reset".into()));
    assert_eq!(reset.classify(), Verdict::Transient);
    assert_eq!(reset.reason(), Some(Reason::Network));

    let connect: GetError =
        SdkError::dispatch_failure(ConnectorError::timeout("connect timed out".into()));
    assert_eq!(connect.classify(), Verdict::Transient);
    assert_eq!(connect.reason(), Some(Reason::Timeout));

    let garbled: GetError = SdkError::response_error("unreadable body", response(200));
    assert_eq!(garbled.classify(), Verdict::Transient);
}

#[test]
fn a_connector_error_of_a_named_kind_follows_the_kind() {
    let throttled: GetError = SdkError::dispatch_failure(ConnectorError::other(
        "busy".into(),
        Some(ErrorKind::ThrottlingError),
    ));
    assert_eq!(throttled.classify(), Verdict::Transient);
    let client: GetError = SdkError::dispatch_failure(ConnectorError::other(
        "bad".into(),
        Some(ErrorKind::ClientError),
    ));
    assert_eq!(client.classify(), Verdict::Permanent);
    // The SDK does not retry what no one can judge; the guide counts it a
    // failure.
    let opaque: GetError = SdkError::dispatch_failure(ConnectorError::other("?".into(), None));
    assert_eq!(opaque.classify(), Verdict::Fatal);
    assert_eq!(opaque.outcome(), Outcome::Failure);
}

#[test]
fn a_request_never_sent_is_not_retried_and_counts_for_nothing() {
    let construction: GetError = SdkError::construction_failure("missing bucket");
    assert_eq!(construction.classify(), Verdict::Ignored);
    assert_eq!(construction.outcome(), Outcome::Ignored);
    let user: GetError = SdkError::dispatch_failure(ConnectorError::user("bad request".into()));
    assert_eq!(user.classify(), Verdict::Ignored);
}
