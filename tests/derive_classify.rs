//! `#[derive(Classify)]` beside thiserror: every key's verdict, reason and
//! outcome, the `From<resilience::Error>` it writes, and the derived types
//! driving `#[retry]` and `#[circuit_breaker]` for real on tokio's paused
//! clock.
#![deny(warnings)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use resilience::retry::{AsHttpStatus, HttpStatus, Outcome, Reason, Verdict};
use resilience::{Classify, DependencyDown, circuit_breaker, retry};
use tokio::time::Instant;

#[derive(Debug, thiserror::Error, Classify)]
enum ApiError {
    #[error("HTTP {status}")]
    Status {
        #[classify(status)]
        status: u16,
        #[classify(retry_after)]
        retry_after: Option<Duration>,
    },
    #[error("HTTP {0}")]
    #[classify(status)]
    Code(reqwest::StatusCode),
    #[error(transparent)]
    #[classify(source)]
    Io(#[from] std::io::Error),
    #[error("pool busy")]
    #[classify(transient, reason = "timeout")]
    PoolBusy,
    #[error("throttled")]
    #[classify(transient)]
    Throttled(#[classify(retry_after)] Duration),
    #[error("overloaded")]
    #[classify(transient, reason = "5xx")]
    Overloaded { after: Option<Duration> },
    #[error("bad body: {0}")]
    #[classify(permanent)]
    Decode(String),
    #[error("query {query} failed")]
    #[classify(source)]
    Query {
        query: &'static str,
        #[source]
        cause: std::io::Error,
    },
    #[error(transparent)]
    #[classify(runtime)]
    Resilience(#[from] resilience::Error),
}

fn io(kind: std::io::ErrorKind) -> std::io::Error {
    std::io::Error::from(kind)
}

#[test]
fn every_key_gives_its_verdict_reason_and_outcome() {
    let two = Duration::from_secs(2);
    let cases: Vec<(ApiError, Verdict, Option<Reason>, Outcome)> = vec![
        (
            ApiError::Status {
                status: 502,
                retry_after: None,
            },
            Verdict::Transient,
            Some(Reason::ServerError),
            Outcome::Failure,
        ),
        (
            ApiError::Status {
                status: 429,
                retry_after: Some(two),
            },
            Verdict::RetryAfter(two),
            None,
            Outcome::Failure,
        ),
        (
            // `Retry-After` means nothing on a 404.
            ApiError::Status {
                status: 404,
                retry_after: Some(two),
            },
            Verdict::Permanent,
            None,
            Outcome::Success,
        ),
        (
            ApiError::Code(reqwest::StatusCode::GATEWAY_TIMEOUT),
            Verdict::Transient,
            Some(Reason::ServerError),
            Outcome::Failure,
        ),
        (
            ApiError::Code(reqwest::StatusCode::UNPROCESSABLE_ENTITY),
            Verdict::Permanent,
            None,
            Outcome::Success,
        ),
        (
            ApiError::Io(io(std::io::ErrorKind::ConnectionReset)),
            Verdict::Transient,
            Some(Reason::Network),
            Outcome::Failure,
        ),
        (
            ApiError::Io(io(std::io::ErrorKind::TimedOut)),
            Verdict::Transient,
            Some(Reason::Timeout),
            Outcome::Failure,
        ),
        (
            // Not retried, but a failure for the breaker: an `io::Error`
            // cannot say that the dependency answered (gobreaker counts
            // every error), and the source's outcome is forwarded.
            ApiError::Io(io(std::io::ErrorKind::NotFound)),
            Verdict::Permanent,
            Some(Reason::Network),
            Outcome::Failure,
        ),
        (
            ApiError::PoolBusy,
            Verdict::Transient,
            Some(Reason::Timeout),
            Outcome::Failure,
        ),
        (
            ApiError::Throttled(two),
            Verdict::RetryAfter(two),
            Some(Reason::Network),
            Outcome::Failure,
        ),
        (
            ApiError::Overloaded { after: Some(two) },
            // Not marked `retry_after`: the field is only data.
            Verdict::Transient,
            Some(Reason::ServerError),
            Outcome::Failure,
        ),
        (
            ApiError::Decode("[]".into()),
            Verdict::Permanent,
            None,
            Outcome::Success,
        ),
        (
            ApiError::Query {
                query: "select 1",
                cause: io(std::io::ErrorKind::ConnectionRefused),
            },
            Verdict::Transient,
            Some(Reason::Network),
            Outcome::Failure,
        ),
        (
            ApiError::from(resilience::Error::AttemptTimeout(two)),
            Verdict::Transient,
            Some(Reason::Timeout),
            Outcome::Failure,
        ),
        (
            ApiError::from(resilience::Error::max_elapsed_exceeded(two, 3)),
            Verdict::Fatal,
            Some(Reason::Timeout),
            Outcome::Failure,
        ),
        (
            ApiError::from(resilience::Error::from(DependencyDown::new("api", "open"))),
            Verdict::Ignored,
            Some(Reason::CircuitOpen),
            Outcome::Ignored,
        ),
    ];
    for (error, verdict, reason, outcome) in cases {
        assert_eq!(
            (error.classify(), error.reason(), error.outcome()),
            (verdict, reason, outcome),
            "{error:?}"
        );
    }
}

/// An outcome overridden by the field's type is the one the breaker reads.
#[derive(Debug)]
struct MustExist;

impl resilience::retry::Classify for MustExist {
    fn classify(&self) -> Verdict {
        Verdict::Permanent
    }
    fn outcome(&self) -> Outcome {
        Outcome::Failure
    }
}

#[derive(Debug, Classify)]
struct Lookup(#[classify(source)] MustExist);

#[test]
fn a_source_field_gives_its_own_outcome() {
    assert_eq!(Lookup(MustExist).classify(), Verdict::Permanent);
    assert_eq!(Lookup(MustExist).outcome(), Outcome::Failure);
}

/// Without thiserror: the derive writes `From<resilience::Error>` for the
/// `runtime` variant.
#[derive(Debug, Classify)]
enum StoreError {
    #[classify(permanent)]
    NotFound,
    #[classify(runtime)]
    Resilience(resilience::Error),
}

#[derive(Debug, Classify)]
enum NamedRuntime {
    #[classify(transient)]
    Busy,
    Runtime {
        #[classify(runtime)]
        inner: resilience::Error,
    },
}

#[test]
fn a_runtime_variant_without_from_gets_one() {
    let err = StoreError::from(resilience::Error::deadline_exceeded(0));
    assert!(matches!(
        err,
        StoreError::Resilience(resilience::Error::DeadlineExceeded { .. })
    ));
    assert_eq!(err.classify(), Verdict::Ignored);
    assert_eq!(StoreError::NotFound.classify(), Verdict::Permanent);
    let err = NamedRuntime::from(resilience::Error::AttemptTimeout(Duration::from_secs(1)));
    assert!(matches!(err, NamedRuntime::Runtime { .. }));
    assert_eq!(err.classify(), Verdict::Transient);
    assert_eq!(NamedRuntime::Busy.classify(), Verdict::Transient);
}

/// Structs, generics and a status type of one's own.
#[derive(Debug, Clone, Copy)]
struct GrpcCode(u16);

impl AsHttpStatus for GrpcCode {
    fn as_http_status(&self) -> HttpStatus {
        // UNAVAILABLE is a 503; everything else a 400 here.
        HttpStatus(if self.0 == 14 { 503 } else { 400 })
    }
}

#[derive(Debug, Classify)]
struct Grpc {
    #[classify(status)]
    code: GrpcCode,
    #[allow(dead_code)]
    message: String,
}

#[derive(Debug, Classify)]
#[classify(transient, reason = "network")]
struct Hiccup;

#[derive(Debug, Classify)]
enum Wrapped<E: std::fmt::Debug> {
    #[classify(source)]
    Inner(E),
    #[classify(runtime)]
    Runtime(resilience::Error),
}

#[derive(Debug, Classify)]
enum Never {}

#[test]
fn structs_generics_and_own_status_types() {
    let unavailable = Grpc {
        code: GrpcCode(14),
        message: "unavailable".into(),
    };
    assert_eq!(unavailable.classify(), Verdict::Transient);
    let invalid = Grpc {
        code: GrpcCode(3),
        message: "invalid argument".into(),
    };
    assert_eq!(invalid.classify(), Verdict::Permanent);
    assert_eq!(Hiccup.classify(), Verdict::Transient);
    assert_eq!(Hiccup.reason(), Some(Reason::Network));
    let inner: Wrapped<ApiError> = Wrapped::Inner(ApiError::PoolBusy);
    assert_eq!(inner.reason(), Some(Reason::Timeout));
    let runtime: Wrapped<ApiError> = resilience::Error::deadline_exceeded(2).into();
    assert_eq!(runtime.classify(), Verdict::Fatal);
    fn classifies<T: resilience::retry::Classify>() {}
    classifies::<Never>();
}

/// Hygiene: the expansion names nothing the user's scope could shadow.
mod hygiene {
    #![allow(dead_code)]
    mod core {}
    mod std {}
    type Result = ();
    type Option = ();
    struct Verdict;
    trait Classify {}

    #[derive(Debug, ::resilience::Classify)]
    enum Shadowed {
        #[classify(transient, reason = "timeout")]
        Busy(#[classify(retry_after)] ::core::option::Option<::core::time::Duration>),
        #[classify(status)]
        Status(u16),
        #[classify(runtime)]
        Runtime(::resilience::Error),
    }

    #[test]
    fn the_expansion_survives_shadowed_names() {
        use ::resilience::retry::Classify as _;
        assert_eq!(
            Shadowed::Status(503).classify(),
            ::resilience::retry::Verdict::Transient
        );
        let _ = Shadowed::from(::resilience::Error::deadline_exceeded(0));
        let _ = Shadowed::Busy(None);
    }
}

/// The derived type, as a `#[retry]` fn's error: 502, 502, 200 is three
/// attempts; a 404 one; `Retry-After` is honoured.
struct Script {
    statuses: Mutex<Vec<(u16, Option<Duration>)>>,
    calls: AtomicU32,
}

impl Script {
    fn new(statuses: &[(u16, Option<Duration>)]) -> Self {
        let mut statuses = statuses.to_vec();
        statuses.reverse();
        Self {
            statuses: Mutex::new(statuses),
            calls: AtomicU32::new(0),
        }
    }

    async fn call(&self) -> Result<u64, ApiError> {
        tokio::task::yield_now().await;
        self.calls.fetch_add(1, Ordering::Relaxed);
        match self.statuses.lock().unwrap().pop() {
            None | Some((200, _)) => Ok(7),
            Some((status, retry_after)) => Err(ApiError::Status {
                status,
                retry_after,
            }),
        }
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::Relaxed)
    }
}

#[retry(max = 3, initial = "100ms", max_elapsed = "10s")]
async fn get_user(script: &Script) -> Result<u64, ApiError> {
    script.call().await
}

#[tokio::test(start_paused = true)]
async fn the_derived_error_drives_the_retry_chain() {
    let script = Script::new(&[(502, None), (502, None), (200, None)]);
    assert_eq!(get_user(&script).await.unwrap(), 7);
    assert_eq!(script.calls(), 3);

    let script = Script::new(&[(404, None), (200, None)]);
    let err = get_user(&script).await.unwrap_err();
    assert!(matches!(err, ApiError::Status { status: 404, .. }), "{err}");
    assert_eq!(script.calls(), 1);

    let start = Instant::now();
    let script = Script::new(&[(429, Some(Duration::from_secs(3))), (200, None)]);
    assert_eq!(get_user(&script).await.unwrap(), 7);
    assert_eq!(script.calls(), 2);
    assert!(
        start.elapsed() >= Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
}

#[retry(max = 3, attempt_timeout = "1s", max_elapsed = "5s")]
async fn get_hanging() -> Result<(), ApiError> {
    std::future::pending().await
}

#[tokio::test(start_paused = true)]
async fn the_runtimes_errors_reach_the_runtime_variant() {
    let err = get_hanging().await.unwrap_err();
    assert!(
        matches!(
            err,
            ApiError::Resilience(resilience::Error::AttemptTimeout(_))
        ),
        "{err}"
    );
}

#[circuit_breaker(name = "derive_classify.store", min = 2, ratio = 0.5, cooldown = "30s")]
async fn load(script: &Script) -> Result<u64, ApiError> {
    script.call().await
}

#[tokio::test(start_paused = true)]
async fn the_breaker_reads_the_derived_outcome() {
    // Two 404s are answers: the breaker stays closed.
    let script = Script::new(&[(404, None), (404, None), (200, None)]);
    for _ in 0..2 {
        assert!(load(&script).await.is_err());
    }
    assert_eq!(load(&script).await.unwrap(), 7);
    // 503s are failures: at three of six it opens, and the next call runs
    // nothing.
    let script = Script::new(&[(503, None), (503, None), (503, None)]);
    for _ in 0..3 {
        assert!(load(&script).await.is_err());
    }
    let err = load(&script).await.unwrap_err();
    assert!(
        matches!(
            err,
            ApiError::Resilience(resilience::Error::DependencyDown(_))
        ),
        "{err}"
    );
    assert_eq!(script.calls(), 3);
}
