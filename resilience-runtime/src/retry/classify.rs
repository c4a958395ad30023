//! One classifier, one source of truth: may this error be retried, and did
//! the dependency fail?
//!
//! Retry, the circuit breaker, the fallback and the metrics all read the
//! same [`Verdict`] of an error, so they cannot disagree: a `400` is not
//! worth a second attempt and does not open a breaker either; a dependency
//! that hangs until the chain's `max_elapsed` runs out is not retried again, and
//! is a failure for the breaker, the fallback and `dependency_errors_total`
//! alike. [`Classify`] gives that verdict; [`Verdict::outcome`] is what the
//! breaker makes of it.
//!
//! | category | verdict | outcome |
//! |---|---|---|
//! | network: reset, aborted, refused, broken pipe, timed out, unexpected EOF, not connected, host or network unreachable or down, interrupted; an error no one can judge inside `io::Error::other` (a driver's, an SDK's) | [`Verdict::Transient`] | failure |
//! | any other `std::io::Error` (bad input, not found, permission denied) | [`Verdict::Permanent`] | failure: an `io::Error` cannot say that the dependency answered |
//! | HTTP 408, 500, 502, 503, 504 | [`Verdict::Transient`] | failure |
//! | HTTP 429 (and 503) with `Retry-After` | [`Verdict::RetryAfter`] | failure |
//! | every other 4xx, every 2xx | [`Verdict::Permanent`] | success: the dependency answered |
//! | SQLSTATE `40001`, `40P01` | [`Verdict::Transient`] | failure |
//! | SQLSTATE `23503`, `23505` and every other code | [`Verdict::Permanent`] | success |
//! | a per-attempt timeout ([`Error::AttemptTimeout`]) | [`Verdict::Transient`] | failure |
//! | the chain's `max_elapsed` or the caller's deadline passed with an attempt made ([`Error::MaxElapsedExceeded`], [`Error::DeadlineExceeded`]) | [`Verdict::Fatal`] | failure |
//! | the caller's deadline passed before any attempt, an open breaker further in, a retry refused inside a transaction | [`Verdict::Ignored`] | ignored |
//!
//! A call the caller cancelled (its future dropped) has no verdict: it
//! counts for nothing.

use std::fmt;
use std::time::Duration;

use crate::error::{ConfigError, Error};

/// What to do about a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// Worth another attempt after the policy's backoff.
    Transient,
    /// Worth another attempt, but not before this delay (a `Retry-After`).
    ///
    /// The executor waits `max(backoff, delay)`, and gives up at once when
    /// that wait does not fit in the time the chain has left.
    RetryAfter(Duration),
    /// The dependency answered, and another attempt would get the same
    /// answer (a `404`, a unique violation): stop now.
    ///
    /// A success for the circuit breaker: the dependency is up.
    Permanent,
    /// The dependency failed and no further attempt may run: the chain's
    /// budget or the caller's deadline was spent on it (a hung
    /// dependency). Stop now.
    ///
    /// A failure for the circuit breaker, the fallback and the metrics.
    Fatal,
    /// The call never reached the dependency (the caller's deadline had
    /// passed before any attempt started, or a breaker further in rejected
    /// it): stop now.
    ///
    /// Counts for nothing: it says nothing about the dependency's health.
    Ignored,
}

impl Verdict {
    /// `true` for [`Verdict::Transient`] and [`Verdict::RetryAfter`]: the
    /// verdicts worth another attempt.
    pub const fn is_retryable(self) -> bool {
        matches!(self, Verdict::Transient | Verdict::RetryAfter(_))
    }

    /// What the verdict means for the dependency's health: the one answer
    /// the circuit breaker, the fallback and the metrics read.
    ///
    /// ```
    /// use resilience::{Outcome, Verdict};
    ///
    /// assert_eq!(Verdict::Transient.outcome(), Outcome::Failure);
    /// assert_eq!(Verdict::Fatal.outcome(), Outcome::Failure);
    /// assert_eq!(Verdict::Permanent.outcome(), Outcome::Success);
    /// assert_eq!(Verdict::Ignored.outcome(), Outcome::Ignored);
    /// ```
    pub const fn outcome(self) -> Outcome {
        match self {
            Verdict::Transient | Verdict::RetryAfter(_) | Verdict::Fatal => Outcome::Failure,
            Verdict::Permanent => Outcome::Success,
            Verdict::Ignored => Outcome::Ignored,
        }
    }
}

/// What one finished call says about the dependency's health: what the
/// circuit breaker counts, what decides whether a fallback answers, and
/// whether `dependency_errors_total` counts an error.
///
/// It is derived from the [`Verdict`] (see [`Verdict::outcome`]), so that
/// "may this be retried" and "did the dependency fail" cannot drift apart;
/// an error type can still answer it differently by overriding
/// [`Classify::outcome`], and a breaker by its classifier
/// ([`CircuitBreaker::call_with`](crate::breaker::CircuitBreaker::call_with)).
///
/// ```
/// use resilience::{Classify, Error, Outcome};
/// use std::time::Duration;
///
/// // A hung dependency that used up the chain's max_elapsed is a failure, though
/// // it is not retried.
/// let hung = Error::max_elapsed_exceeded(Duration::from_secs(5), 2);
/// assert!(!hung.classify().is_retryable());
/// assert_eq!(hung.outcome(), Outcome::Failure);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The dependency answered: a value, or a business error such as a
    /// `404` or a unique violation.
    Success,
    /// The dependency failed: a transient error that outlived the retries,
    /// a timeout, a chain whose time ran out with an attempt in flight.
    Failure,
    /// The call says nothing about the dependency (it never reached it):
    /// not counted at all.
    Ignored,
}

impl Outcome {
    /// `success`, `failure` or `ignored`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Ignored => "ignored",
        }
    }
}

/// Why a dependency failed, as exported in the `reason` label of
/// `dependency_errors_total` (see the guide's
/// [metrics](crate::guide#metrics-and-alerts)). The set is closed so that
/// the label's cardinality stays bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// The dependency did not answer in time.
    Timeout,
    /// The dependency answered with a server error (5xx).
    ServerError,
    /// A circuit breaker rejected the call.
    CircuitOpen,
    /// The connection failed: reset, refused, closed, DNS.
    Network,
    /// A load limiter shed the call before it was sent
    /// ([`Error::Overloaded`]): not the dependency's failure, but no
    /// answer either.
    Overloaded,
}

impl Reason {
    /// The metric label value: `timeout`, `5xx`, `circuit_open`, `network`
    /// or `overloaded`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::Timeout => "timeout",
            Reason::ServerError => "5xx",
            Reason::CircuitOpen => "circuit_open",
            Reason::Network => "network",
            Reason::Overloaded => "overloaded",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Decides whether an error is worth retrying.
///
/// # Contract
///
/// - [`Verdict::Transient`] for failures that a later attempt may not see:
///   lost connections, timeouts of one attempt, overloaded servers.
/// - [`Verdict::RetryAfter`] when the dependency said when to come back.
/// - [`Verdict::Permanent`] for everything a second attempt would repeat:
///   bad requests, missing records, business rule violations. When in
///   doubt, permanent: a missed retry costs one error, a wrong one
///   multiplies the load on a struggling dependency.
/// - The runtime's own errors classify themselves: forward them to
///   [`Error::classify`], as the example does, and a hung dependency is
///   [`Verdict::Fatal`] (a failure, not retried) whatever your error type.
///
/// The circuit breaker, the fallback and the metrics read the same answer
/// through [`Verdict::outcome`]: transient and fatal failures count against
/// the dependency, permanent ones count as successes (a bad request says
/// nothing about the health of the server). To count a permanent error
/// against the dependency anyway, override [`outcome`](Classify::outcome).
///
/// # Example
///
/// ```
/// use resilience::retry::{Classify, HttpStatus, Verdict};
///
/// #[derive(Debug)]
/// enum ClientError {
///     Status(u16),
///     Decode(String),
///     Resilience(resilience::Error),
/// }
///
/// impl Classify for ClientError {
///     fn classify(&self) -> Verdict {
///         match self {
///             ClientError::Status(code) => HttpStatus(*code).classify(),
///             ClientError::Decode(_) => Verdict::Permanent,
///             ClientError::Resilience(err) => err.classify(),
///         }
///     }
/// }
///
/// assert_eq!(ClientError::Status(502).classify(), Verdict::Transient);
/// assert_eq!(ClientError::Status(404).classify(), Verdict::Permanent);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not say which of its errors may be retried",
    label = "this error type does not implement `Classify`",
    note = "derive it, `#[derive(resilience::Classify)]` with `#[classify(transient)]` or `#[classify(permanent)]` on each variant, or implement `resilience::retry::Classify` for `{Self}`: `Verdict::Transient` for errors a later attempt may not see (timeouts, resets, 5xx), `Verdict::Permanent` for the rest",
    note = "an error type that is not yours (`Box<dyn Error>`, `anyhow::Error`) cannot implement it in your crate: classify at the call site with `#[retry(when = my_classifier)]`, or wrap it in an error type of your own that derives `Classify`",
    note = "if `{Self}` is `reqwest::Error` or `sqlx::Error`, which resilience classifies, two major versions of that driver are in your build (`cargo tree -d` shows them): depend on the version resilience's README names, or use its re-export (`resilience::http::reqwest`, `resilience::db::sqlx`)"
)]
pub trait Classify {
    /// The verdict for this error.
    fn classify(&self) -> Verdict;

    /// Why the dependency failed, for the `reason` metric label, or `None`
    /// when the error is not the dependency's fault.
    ///
    /// # Default
    ///
    /// `None` unless the [outcome](Self::outcome) is a failure, then
    /// [`Reason::Network`].
    fn reason(&self) -> Option<Reason> {
        match self.outcome() {
            Outcome::Failure => Some(Reason::Network),
            Outcome::Success | Outcome::Ignored => None,
        }
    }

    /// What this error says about the dependency's health, for the
    /// circuit breaker and the fallback.
    ///
    /// # Default
    ///
    /// [`Verdict::outcome`] of [`classify`](Self::classify): override it to
    /// count a permanent error against the dependency (say, a `404` from a
    /// service that must know every id), or to ignore one.
    fn outcome(&self) -> Outcome {
        self.classify().outcome()
    }
}

/// An error type that the runtime's own [`Error`] can become: what a
/// timed-out attempt, a passed deadline or an open breaker turns into when
/// it reaches the caller of a protected fn.
///
/// Implemented for every `E: From<resilience::Error>`; write that `From`
/// impl (thiserror's `#[from]`), or let `#[derive(Classify)]` write it
/// for the variant marked `#[classify(runtime)]`.
///
/// ```
/// use resilience::retry::FromRuntimeError;
/// use resilience::{Classify, Error};
///
/// #[derive(Debug, Classify)]
/// enum ApiError {
///     #[classify(permanent)]
///     NotFound,
///     #[classify(runtime)]
///     Resilience(Error),
/// }
///
/// let err = ApiError::from_runtime(Error::deadline_exceeded(0));
/// assert!(matches!(err, ApiError::Resilience(_)));
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot carry the runtime's errors (attempt timeout, deadline, dependency down)",
    label = "`From<resilience::Error>` is not implemented for this error type",
    note = "give `{Self}` a variant for them: with `#[derive(resilience::Classify)]`, `Resilience(#[classify(runtime)] resilience::Error)`; with thiserror alone, `#[error(transparent)] Resilience(#[from] resilience::Error)`; or write `impl From<resilience::Error> for {Self}`"
)]
pub trait FromRuntimeError: Sized {
    /// The runtime's `error`, as this type.
    fn from_runtime(error: Error) -> Self;
}

impl<E: From<Error>> FromRuntimeError for E {
    #[inline]
    fn from_runtime(error: Error) -> Self {
        E::from(error)
    }
}

impl<T: Classify + ?Sized> Classify for &T {
    fn classify(&self) -> Verdict {
        (**self).classify()
    }
    fn reason(&self) -> Option<Reason> {
        (**self).reason()
    }
    fn outcome(&self) -> Outcome {
        (**self).outcome()
    }
}

impl<T: Classify + ?Sized> Classify for Box<T> {
    fn classify(&self) -> Verdict {
        (**self).classify()
    }
    fn reason(&self) -> Option<Reason> {
        (**self).reason()
    }
    fn outcome(&self) -> Outcome {
        (**self).outcome()
    }
}

/// Transport errors are transient, as [the guide](crate::guide#what-may-be-retried)
/// has it (every transport error but a cancellation): a refused connection is a
/// pod restarting, an unreachable host or network a route that flaps.
///
/// An `io::Error` that wraps another error is judged by what it wraps,
/// looked up through [`get_ref`](std::io::Error::get_ref): the runtime's
/// own [`Error`] (through its `From` impl) classifies as itself, a nested
/// `io::Error` as that one does. A wrapped error nobody can judge
/// ([`io::Error::other`](std::io::Error::other) around a Redis, SDK or
/// driver error, the idiomatic way to carry one) is taken for a transport
/// error, transient, as the guide's `IsRetryable` has it ("network errors
/// are mostly transient"). What is not a transport error (a missing file,
/// bad input, a denied permission, an unsupported operation) is not
/// retried.
///
/// For the circuit breaker every `io::Error` is a failure, retried or not
/// (gobreaker counts every error): an `io::Error` has no way to say that
/// the dependency answered. Only the runtime's own errors inside one keep
/// their outcome (a cancelled call or an open breaker further in counts
/// for nothing).
///
/// ```
/// use resilience::{Classify, Outcome, Verdict};
/// use std::io;
///
/// #[derive(Debug)]
/// struct RedisDown;
/// impl std::fmt::Display for RedisDown {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("connection refused by redis")
///     }
/// }
/// impl std::error::Error for RedisDown {}
///
/// let wrapped = io::Error::other(RedisDown);
/// assert_eq!(wrapped.classify(), Verdict::Transient);
/// assert_eq!(wrapped.outcome(), Outcome::Failure);
/// let bad_input = io::Error::from(io::ErrorKind::InvalidInput);
/// assert_eq!(bad_input.classify(), Verdict::Permanent);
/// assert_eq!(bad_input.outcome(), Outcome::Failure);
/// ```
impl Classify for std::io::Error {
    fn classify(&self) -> Verdict {
        use std::io::ErrorKind::*;
        match inside(self) {
            Inside::Runtime(runtime) => return runtime.classify(),
            Inside::Io(io) => return io.classify(),
            Inside::Opaque => return Verdict::Transient,
            Inside::Nothing => {}
        }
        match self.kind() {
            ConnectionReset | ConnectionAborted | ConnectionRefused | BrokenPipe | TimedOut
            | UnexpectedEof | NotConnected | Interrupted | HostUnreachable | NetworkUnreachable
            | NetworkDown | AddrNotAvailable | WouldBlock | WriteZero | Other => Verdict::Transient,
            _ => Verdict::Permanent,
        }
    }

    fn reason(&self) -> Option<Reason> {
        match inside(self) {
            Inside::Runtime(runtime) => return runtime.reason(),
            Inside::Io(io) => return io.reason(),
            Inside::Opaque | Inside::Nothing => {}
        }
        match self.kind() {
            std::io::ErrorKind::TimedOut => Some(Reason::Timeout),
            _ => Some(Reason::Network),
        }
    }

    fn outcome(&self) -> Outcome {
        match inside(self) {
            Inside::Runtime(runtime) => runtime.outcome(),
            Inside::Io(io) => io.outcome(),
            Inside::Opaque | Inside::Nothing => Outcome::Failure,
        }
    }
}

/// What an `io::Error` wraps.
enum Inside<'a> {
    Runtime(&'a Error),
    Io(&'a std::io::Error),
    /// An error of a type this crate cannot judge.
    Opaque,
    /// Nothing: a bare kind, or a message.
    Nothing,
}

fn inside(error: &std::io::Error) -> Inside<'_> {
    let Some(inner) = error.get_ref() else {
        return Inside::Nothing;
    };
    if let Some(runtime) = inner.downcast_ref::<Error>() {
        Inside::Runtime(runtime)
    } else if let Some(io) = inner.downcast_ref::<std::io::Error>() {
        Inside::Io(io)
    } else if error.kind() == std::io::ErrorKind::Other {
        // `io::Error::other(e)`: a driver's error carried as is. One made
        // with another kind says what it is through the kind.
        Inside::Opaque
    } else {
        Inside::Nothing
    }
}

impl Classify for Error {
    fn classify(&self) -> Verdict {
        match self {
            Error::AttemptTimeout(_) => Verdict::Transient,
            Error::MaxElapsedExceeded { .. } => Verdict::Fatal,
            Error::DeadlineExceeded { attempts: 0, .. }
            | Error::DependencyDown(_)
            | Error::Overloaded(_)
            | Error::RetryInsideTransaction => Verdict::Ignored,
            Error::DeadlineExceeded { .. } | Error::CommitOutcomeUnknown { .. } => Verdict::Fatal,
        }
    }

    fn reason(&self) -> Option<Reason> {
        // A deadline that passed before any attempt is still a timeout for
        // the caller's metrics; that no dependency error is counted is the
        // chain's doing (no attempt failed).
        match self {
            Error::AttemptTimeout(_)
            | Error::MaxElapsedExceeded { .. }
            | Error::DeadlineExceeded { .. } => Some(Reason::Timeout),
            Error::DependencyDown(_) => Some(Reason::CircuitOpen),
            Error::Overloaded(_) => Some(Reason::Overloaded),
            Error::RetryInsideTransaction => None,
            Error::CommitOutcomeUnknown { .. } => Some(Reason::Network),
        }
    }
}

/// An HTTP status code, classified as the guide says
/// [what may be retried](crate::guide#what-may-be-retried).
///
/// ```
/// use resilience::retry::{Classify, HttpStatus, Verdict};
/// use std::time::Duration;
///
/// assert_eq!(HttpStatus(503).classify(), Verdict::Transient);
/// assert_eq!(HttpStatus(422).classify(), Verdict::Permanent);
/// assert_eq!(
///     HttpStatus(429).with_retry_after(Some(Duration::from_secs(2))),
///     Verdict::RetryAfter(Duration::from_secs(2)),
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HttpStatus(pub u16);

impl HttpStatus {
    /// The verdict when the response also carried a parsed `Retry-After`
    /// (see [`parse_retry_after`](super::parse_retry_after)).
    ///
    /// `Retry-After` is honoured on `429` and `503`, the two statuses for
    /// which HTTP defines it, and on `409`: the IETF idempotency-key draft
    /// answers `409` with `Retry-After` while the original request with the
    /// same key is still in flight, meaning "retry later with the same
    /// key". Other statuses keep their plain verdict, and so does a `409`
    /// without `Retry-After` (a business conflict).
    pub const fn with_retry_after(self, retry_after: Option<Duration>) -> Verdict {
        match (self.0, retry_after) {
            (409 | 429 | 503, Some(delay)) => Verdict::RetryAfter(delay),
            _ => self.verdict(),
        }
    }

    const fn verdict(self) -> Verdict {
        match self.0 {
            408 | 429 | 500 | 502 | 503 | 504 => Verdict::Transient,
            _ => Verdict::Permanent,
        }
    }
}

impl Classify for HttpStatus {
    fn classify(&self) -> Verdict {
        self.verdict()
    }

    fn reason(&self) -> Option<Reason> {
        match self.0 {
            408 => Some(Reason::Timeout),
            500..=599 => Some(Reason::ServerError),
            _ => None,
        }
    }
}

/// A value that carries an HTTP status: what a field marked
/// `#[classify(status)]` must be, so that `#[derive(Classify)]` classifies
/// it as [`HttpStatus`] does.
///
/// Implemented for `u16`, [`HttpStatus`] and (with the `reqwest` or the
/// `idempotency-server` feature) `http::StatusCode`, which is also
/// `reqwest::StatusCode`. Implement it for a status type of your own.
///
/// ```
/// use resilience::retry::{AsHttpStatus, Classify, HttpStatus, Verdict};
///
/// assert_eq!(502u16.as_http_status(), HttpStatus(502));
/// assert_eq!(503u16.as_http_status().classify(), Verdict::Transient);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an HTTP status",
    label = "`#[classify(status)]` needs a field that holds an HTTP status",
    note = "a status field is a `u16`, an `http::StatusCode` (also `reqwest::StatusCode`) or a `resilience::retry::HttpStatus`; implement `resilience::retry::AsHttpStatus` for `{Self}` to use it as one"
)]
pub trait AsHttpStatus {
    /// The status.
    fn as_http_status(&self) -> HttpStatus;
}

impl AsHttpStatus for u16 {
    fn as_http_status(&self) -> HttpStatus {
        HttpStatus(*self)
    }
}

impl AsHttpStatus for HttpStatus {
    fn as_http_status(&self) -> HttpStatus {
        *self
    }
}

#[cfg(feature = "reqwest")]
impl AsHttpStatus for reqwest::StatusCode {
    fn as_http_status(&self) -> HttpStatus {
        HttpStatus(self.as_u16())
    }
}

// `reqwest::StatusCode` is `http::StatusCode`: one impl, whichever feature
// brings the type.
#[cfg(all(feature = "idempotency-server", not(feature = "reqwest")))]
impl AsHttpStatus for http::StatusCode {
    fn as_http_status(&self) -> HttpStatus {
        HttpStatus(self.as_u16())
    }
}

impl<T: AsHttpStatus + ?Sized> AsHttpStatus for &T {
    fn as_http_status(&self) -> HttpStatus {
        (**self).as_http_status()
    }
}

/// A five-character SQLSTATE code, classified as the guide says
/// [what may be retried](crate::guide#what-may-be-retried): only
/// `40001` (serialization_failure) and `40P01` (deadlock_detected) are
/// transient; every other code, `23503` and `23505` included, is a
/// business error.
///
/// ```
/// use resilience::retry::{Classify, SqlState, Verdict};
///
/// assert_eq!(SqlState::new("40P01")?.classify(), Verdict::Transient);
/// assert_eq!(SqlState::new("23505")?.classify(), Verdict::Permanent);
/// assert!(SqlState::new("4000").is_err());
/// # Ok::<(), resilience::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SqlState([u8; 5]);

impl SqlState {
    /// `serialization_failure`.
    pub const SERIALIZATION_FAILURE: SqlState = SqlState(*b"40001");
    /// `deadlock_detected`.
    pub const DEADLOCK_DETECTED: SqlState = SqlState(*b"40P01");

    /// Parses a SQLSTATE: exactly five ASCII digits or uppercase letters.
    pub fn new(code: &str) -> Result<Self, ConfigError> {
        let bytes: [u8; 5] = code.as_bytes().try_into().map_err(|_| {
            ConfigError::new(
                "SQLSTATE",
                "code",
                format!("{code:?}"),
                "a SQLSTATE has exactly five characters, e.g. \"40001\"",
            )
        })?;
        if !bytes
            .iter()
            .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
        {
            return Err(ConfigError::new(
                "SQLSTATE",
                "code",
                format!("{code:?}"),
                "a SQLSTATE holds only digits and uppercase letters",
            ));
        }
        Ok(Self(bytes))
    }

    /// The code as written, e.g. `"40001"`.
    pub fn as_str(&self) -> &str {
        // Only ASCII is ever stored.
        std::str::from_utf8(&self.0).unwrap_or("?????")
    }
}

impl fmt::Display for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Classify for SqlState {
    fn classify(&self) -> Verdict {
        if *self == Self::SERIALIZATION_FAILURE || *self == Self::DEADLOCK_DETECTED {
            Verdict::Transient
        } else {
            Verdict::Permanent
        }
    }

    /// Always `None`: a database conflict is not a dependency outage.
    fn reason(&self) -> Option<Reason> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn io_errors_follow_the_table() {
        for kind in [
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::ConnectionAborted,
            io::ErrorKind::BrokenPipe,
            io::ErrorKind::TimedOut,
            io::ErrorKind::UnexpectedEof,
            io::ErrorKind::NotConnected,
            io::ErrorKind::Interrupted,
            io::ErrorKind::ConnectionRefused,
            io::ErrorKind::HostUnreachable,
            io::ErrorKind::NetworkUnreachable,
            io::ErrorKind::NetworkDown,
        ] {
            assert_eq!(
                io::Error::from(kind).classify(),
                Verdict::Transient,
                "{kind:?}"
            );
        }
        for kind in [
            io::ErrorKind::NotFound,
            io::ErrorKind::PermissionDenied,
            io::ErrorKind::InvalidInput,
            io::ErrorKind::InvalidData,
            io::ErrorKind::AlreadyExists,
            io::ErrorKind::Unsupported,
        ] {
            assert_eq!(
                io::Error::from(kind).classify(),
                Verdict::Permanent,
                "{kind:?}"
            );
            // Not retried, but a failure all the same: an `io::Error`
            // cannot say that the dependency answered (gobreaker counts
            // every error).
            assert_eq!(
                io::Error::from(kind).outcome(),
                Outcome::Failure,
                "{kind:?}"
            );
        }
        // What nobody can judge is a transport error (the guide's
        // `IsRetryable`: "network errors are mostly transient").
        assert_eq!(
            io::Error::from(io::ErrorKind::Other).classify(),
            Verdict::Transient
        );
        assert_eq!(
            io::Error::from(io::ErrorKind::TimedOut).reason(),
            Some(Reason::Timeout)
        );
        assert_eq!(
            io::Error::from(io::ErrorKind::BrokenPipe).reason(),
            Some(Reason::Network)
        );
        assert_eq!(
            io::Error::from(io::ErrorKind::NotFound).reason(),
            Some(Reason::Network)
        );
    }

    /// `io::Error::other(e)`, the idiomatic way to carry a Redis, SDK or
    /// driver error, is judged by what it wraps: the runtime's errors and
    /// nested `io::Error`s as themselves, anything else as a transport
    /// error. Before, it was permanent and a success for the breaker: a
    /// dependency refusing every connection never opened it.
    #[test]
    fn a_wrapped_error_is_judged_by_what_it_wraps() {
        #[derive(Debug)]
        struct DriverError;
        impl std::fmt::Display for DriverError {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("driver: connection refused")
            }
        }
        impl std::error::Error for DriverError {}

        let opaque = io::Error::other(DriverError);
        assert_eq!(opaque.classify(), Verdict::Transient);
        assert_eq!(opaque.outcome(), Outcome::Failure);
        assert_eq!(opaque.reason(), Some(Reason::Network));
        let message = io::Error::other("redis said no");
        assert_eq!(message.classify(), Verdict::Transient);
        let nested = io::Error::other(io::Error::from(io::ErrorKind::PermissionDenied));
        assert_eq!(nested.classify(), Verdict::Permanent);
        let runtime = io::Error::other(Error::deadline_exceeded(0));
        assert_eq!(runtime.classify(), Verdict::Ignored);
        assert_eq!(runtime.outcome(), Outcome::Ignored);
        let runtime = io::Error::from(Error::deadline_exceeded(0));
        assert_eq!(runtime.outcome(), Outcome::Ignored);
    }

    /// An enum that forwards only `classify` to the runtime's error, as the
    /// docs teach, gets the runtime's outcome too.
    #[test]
    fn a_forwarding_error_type_gets_the_runtime_outcome() {
        enum ClientError {
            Status(u16),
            Resilience(Error),
        }
        impl Classify for ClientError {
            fn classify(&self) -> Verdict {
                match self {
                    ClientError::Status(code) => HttpStatus(*code).classify(),
                    ClientError::Resilience(err) => err.classify(),
                }
            }
        }
        let hung = ClientError::Resilience(Error::max_elapsed_exceeded(Duration::from_secs(1), 1));
        assert_eq!(hung.outcome(), Outcome::Failure);
        assert_eq!(hung.reason(), Some(Reason::Network));
        assert_eq!(ClientError::Status(404).outcome(), Outcome::Success);
        assert_eq!(ClientError::Status(503).outcome(), Outcome::Failure);
        let early = ClientError::Resilience(Error::deadline_exceeded(0));
        assert_eq!(early.outcome(), Outcome::Ignored);
    }

    #[test]
    fn an_io_error_made_from_the_runtime_error_classifies_as_it() {
        let hung = io::Error::from(Error::max_elapsed_exceeded(Duration::from_secs(1), 1));
        assert_eq!(hung.kind(), io::ErrorKind::TimedOut);
        assert_eq!(
            (hung.classify(), hung.outcome(), hung.reason()),
            (Verdict::Fatal, Outcome::Failure, Some(Reason::Timeout))
        );
        let down = io::Error::from(Error::from(crate::DependencyDown::new("user", "open")));
        assert_eq!(
            (down.classify(), down.reason()),
            (Verdict::Ignored, Some(Reason::CircuitOpen))
        );
        let early = io::Error::from(Error::deadline_exceeded(0));
        assert_eq!(
            (early.outcome(), early.reason()),
            (Outcome::Ignored, Some(Reason::Timeout))
        );
    }

    #[test]
    fn http_statuses_follow_the_table() {
        for code in [408, 429, 500, 502, 503, 504] {
            assert_eq!(HttpStatus(code).classify(), Verdict::Transient, "{code}");
        }
        for code in [200, 201, 204, 301, 400, 401, 403, 404, 409, 422, 501, 505] {
            assert_eq!(HttpStatus(code).classify(), Verdict::Permanent, "{code}");
        }
        assert_eq!(HttpStatus(502).reason(), Some(Reason::ServerError));
        assert_eq!(HttpStatus(408).reason(), Some(Reason::Timeout));
        assert_eq!(HttpStatus(404).reason(), None);
    }

    #[test]
    fn retry_after_applies_to_409_429_and_503_only() {
        let d = Some(Duration::from_secs(3));
        assert_eq!(
            HttpStatus(429).with_retry_after(d),
            Verdict::RetryAfter(Duration::from_secs(3))
        );
        assert_eq!(
            HttpStatus(503).with_retry_after(d),
            Verdict::RetryAfter(Duration::from_secs(3))
        );
        assert_eq!(
            HttpStatus(409).with_retry_after(d),
            Verdict::RetryAfter(Duration::from_secs(3))
        );
        assert_eq!(HttpStatus(409).with_retry_after(None), Verdict::Permanent);
        assert_eq!(HttpStatus(422).with_retry_after(d), Verdict::Permanent);
        assert_eq!(HttpStatus(502).with_retry_after(d), Verdict::Transient);
        assert_eq!(HttpStatus(400).with_retry_after(d), Verdict::Permanent);
        assert_eq!(HttpStatus(429).with_retry_after(None), Verdict::Transient);
    }

    #[test]
    fn sqlstates_follow_the_table() {
        assert_eq!(
            SqlState::new("40001").unwrap().classify(),
            Verdict::Transient
        );
        assert_eq!(
            SqlState::new("40P01").unwrap().classify(),
            Verdict::Transient
        );
        for code in ["23503", "23505", "42P01", "08006", "57014"] {
            assert_eq!(
                SqlState::new(code).unwrap().classify(),
                Verdict::Permanent,
                "{code}"
            );
        }
        let err = SqlState::new("40p01").unwrap_err();
        assert!(err.to_string().contains("\"40p01\""), "{err}");
        assert!(SqlState::new("400011").is_err());
        assert!(SqlState::new("").is_err());
    }

    #[test]
    fn runtime_errors() {
        assert_eq!(
            Error::AttemptTimeout(Duration::from_millis(5)).classify(),
            Verdict::Transient
        );
        // Spent with an attempt made: a failure that is not retried.
        for spent in [
            Error::deadline_exceeded(1),
            Error::max_elapsed_exceeded(Duration::from_secs(5), 3),
        ] {
            assert_eq!(spent.classify(), Verdict::Fatal, "{spent}");
            assert_eq!(spent.outcome(), Outcome::Failure, "{spent}");
            assert_eq!(spent.reason(), Some(Reason::Timeout), "{spent}");
        }
        // Passed before anything was sent: nothing to say of the dependency.
        let early = Error::deadline_exceeded(0);
        assert_eq!(early.classify(), Verdict::Ignored);
        assert_eq!(early.outcome(), Outcome::Ignored);
        assert_eq!(early.reason(), Some(Reason::Timeout));
        let down = Error::from(crate::DependencyDown::new("user", "open"));
        assert_eq!(down.classify(), Verdict::Ignored);
        assert_eq!(down.outcome(), Outcome::Ignored);
        assert_eq!(down.reason(), Some(Reason::CircuitOpen));
        assert_eq!(
            down.to_string(),
            "dependency down: circuit breaker `user` is open"
        );
    }
}
