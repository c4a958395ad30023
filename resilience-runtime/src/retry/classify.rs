//! One classifier, one source of truth: may this error be retried?
//!
//! Retry and the circuit breaker both ask the same question of an error, and
//! they must get the same answer (SPEC §2): a `400` is not worth a second
//! attempt and must not open a breaker either. [`Classify`] is that answer.
//!
//! | category | verdict |
//! |---|---|
//! | network: reset, aborted, broken pipe, timed out, unexpected EOF, not connected, interrupted | [`Verdict::Transient`] |
//! | HTTP 408, 500, 502, 503, 504 | [`Verdict::Transient`] |
//! | HTTP 429 (and 503) with `Retry-After` | [`Verdict::RetryAfter`] |
//! | every other 4xx, every 2xx | [`Verdict::Permanent`] |
//! | SQLSTATE `40001`, `40P01` | [`Verdict::Transient`] |
//! | SQLSTATE `23503`, `23505` and every other code | [`Verdict::Permanent`] |
//! | a per-attempt timeout ([`Error::AttemptTimeout`]) | [`Verdict::Transient`] |
//! | the caller's deadline, a spent retry budget, an open breaker | [`Verdict::Permanent`] |

use std::fmt;
use std::time::Duration;

use crate::error::{ConfigError, Error};

/// What to do about a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Worth another attempt after the policy's backoff.
    Transient,
    /// Worth another attempt, but not before this delay (a `Retry-After`).
    ///
    /// The executor waits `max(backoff, delay)`, and gives up at once when
    /// that wait does not fit in the budget left.
    RetryAfter(Duration),
    /// Another attempt would fail the same way: stop now.
    Permanent,
}

impl Verdict {
    /// `true` unless the verdict is [`Verdict::Permanent`].
    pub const fn is_retryable(self) -> bool {
        !matches!(self, Verdict::Permanent)
    }
}

/// Why a dependency failed, as exported in the `reason` label of
/// `dependency_errors_total` (SPEC §7). The set is closed so that the
/// label's cardinality stays bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The dependency did not answer in time.
    Timeout,
    /// The dependency answered with a server error (5xx).
    ServerError,
    /// A circuit breaker rejected the call.
    CircuitOpen,
    /// The connection failed: reset, refused, closed, DNS.
    Network,
}

impl Reason {
    /// The metric label value: `timeout`, `5xx`, `circuit_open` or `network`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::Timeout => "timeout",
            Reason::ServerError => "5xx",
            Reason::CircuitOpen => "circuit_open",
            Reason::Network => "network",
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
///   bad requests, missing records, business rule violations, the caller's
///   own deadline. When in doubt, permanent: a missed retry costs one error,
///   a wrong one multiplies the load on a struggling dependency.
///
/// The circuit breaker uses the same answer: transient failures count
/// against the dependency, permanent ones count as successes (a bad
/// request says nothing about the health of the server).
///
/// # Example
///
/// ```
/// use resilience_runtime::retry::{Classify, HttpStatus, Verdict};
///
/// #[derive(Debug)]
/// enum ClientError {
///     Status(u16),
///     Decode(String),
///     Resilience(resilience_runtime::Error),
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
    note = "implement `resilience::retry::Classify` for `{Self}`: return `Verdict::Transient` for errors a later attempt may not see (timeouts, resets, 5xx) and `Verdict::Permanent` for the rest",
    note = "or classify at the call site with a predicate: `#[retry(when = my_classifier)]`"
)]
pub trait Classify {
    /// The verdict for this error.
    fn classify(&self) -> Verdict;

    /// Why the dependency failed, for the `reason` metric label, or `None`
    /// when the error is not the dependency's fault.
    ///
    /// # Default
    ///
    /// `None` for permanent errors, [`Reason::Network`] for the others.
    fn reason(&self) -> Option<Reason> {
        match self.classify() {
            Verdict::Permanent => None,
            Verdict::Transient | Verdict::RetryAfter(_) => Some(Reason::Network),
        }
    }
}

impl<T: Classify + ?Sized> Classify for &T {
    fn classify(&self) -> Verdict {
        (**self).classify()
    }
    fn reason(&self) -> Option<Reason> {
        (**self).reason()
    }
}

impl<T: Classify + ?Sized> Classify for Box<T> {
    fn classify(&self) -> Verdict {
        (**self).classify()
    }
    fn reason(&self) -> Option<Reason> {
        (**self).reason()
    }
}

impl Classify for std::io::Error {
    fn classify(&self) -> Verdict {
        use std::io::ErrorKind::*;
        match self.kind() {
            ConnectionReset | ConnectionAborted | BrokenPipe | TimedOut | UnexpectedEof
            | NotConnected | Interrupted => Verdict::Transient,
            _ => Verdict::Permanent,
        }
    }

    fn reason(&self) -> Option<Reason> {
        match self.kind() {
            std::io::ErrorKind::TimedOut => Some(Reason::Timeout),
            _ if self.classify().is_retryable() => Some(Reason::Network),
            _ => None,
        }
    }
}

impl Classify for Error {
    fn classify(&self) -> Verdict {
        match self {
            Error::AttemptTimeout(_) => Verdict::Transient,
            Error::BudgetExhausted(_) | Error::DeadlineExceeded | Error::DependencyDown(_) => {
                Verdict::Permanent
            }
        }
    }

    fn reason(&self) -> Option<Reason> {
        match self {
            Error::AttemptTimeout(_) | Error::BudgetExhausted(_) | Error::DeadlineExceeded => {
                Some(Reason::Timeout)
            }
            Error::DependencyDown(_) => Some(Reason::CircuitOpen),
        }
    }
}

/// An HTTP status code, classified by SPEC §2.
///
/// ```
/// use resilience_runtime::retry::{Classify, HttpStatus, Verdict};
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
    /// which HTTP defines it; other statuses keep their plain verdict.
    pub const fn with_retry_after(self, retry_after: Option<Duration>) -> Verdict {
        match (self.0, retry_after) {
            (429 | 503, Some(delay)) => Verdict::RetryAfter(delay),
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

/// A five-character SQLSTATE code, classified by SPEC §2: only
/// `40001` (serialization_failure) and `40P01` (deadlock_detected) are
/// transient; every other code, `23503` and `23505` included, is a
/// business error.
///
/// ```
/// use resilience_runtime::retry::{Classify, SqlState, Verdict};
///
/// assert_eq!(SqlState::new("40P01")?.classify(), Verdict::Transient);
/// assert_eq!(SqlState::new("23505")?.classify(), Verdict::Permanent);
/// assert!(SqlState::new("4000").is_err());
/// # Ok::<(), resilience_runtime::ConfigError>(())
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
        ] {
            assert_eq!(
                io::Error::from(kind).classify(),
                Verdict::Permanent,
                "{kind:?}"
            );
        }
        assert_eq!(
            io::Error::from(io::ErrorKind::TimedOut).reason(),
            Some(Reason::Timeout)
        );
        assert_eq!(
            io::Error::from(io::ErrorKind::BrokenPipe).reason(),
            Some(Reason::Network)
        );
        assert_eq!(io::Error::from(io::ErrorKind::NotFound).reason(), None);
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
    fn retry_after_applies_to_429_and_503_only() {
        let d = Some(Duration::from_secs(3));
        assert_eq!(
            HttpStatus(429).with_retry_after(d),
            Verdict::RetryAfter(Duration::from_secs(3))
        );
        assert_eq!(
            HttpStatus(503).with_retry_after(d),
            Verdict::RetryAfter(Duration::from_secs(3))
        );
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
        assert_eq!(Error::DeadlineExceeded.classify(), Verdict::Permanent);
        let down = Error::from(crate::DependencyDown::new("user", "open"));
        assert_eq!(down.classify(), Verdict::Permanent);
        assert_eq!(down.reason(), Some(Reason::CircuitOpen));
        assert_eq!(
            down.to_string(),
            "dependency down: circuit breaker `user` is open"
        );
    }
}
