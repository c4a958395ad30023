//! `sqlx` errors classified by the one classifier.

use crate::error::Error;
use crate::retry::{Classify, Outcome, Reason, SqlState, Verdict};

/// `sqlx` errors, classified by SQLSTATE for what the server answered and
/// as transport errors for the rest:
///
/// | error | verdict | why |
/// |---|---|---|
/// | `Database` with SQLSTATE `40001` serialization_failure or `40P01` deadlock_detected | [`Verdict::Transient`] | a conflict with another transaction: the same transaction run again usually commits |
/// | `Database` with any other SQLSTATE (`23505` unique violation, `23503` foreign key, syntax, permissions…) or none | [`Verdict::Permanent`] | a business or programming error: a second run gets the same answer |
/// | `Io` (connection refused, reset, closed…) | as [`std::io::Error`]: transient for transport errors | the connection broke; a new one may not |
/// | `PoolTimedOut` | [`Verdict::Fatal`] | see below |
/// | `PoolClosed` | [`Verdict::Ignored`] | the application is shutting its pool down; the database was never asked |
/// | every other variant (`RowNotFound`, `Decode`, `Protocol`, `Tls`, `Configuration`…) | [`Verdict::Permanent`] | when in doubt, permanent |
///
/// **A pool that timed out waiting for a connection is not retried**, and
/// counts as a timeout: every connection is busy and the wait already
/// lasted the pool's `acquire_timeout` (30 s by default), longer than any
/// retry budget; another attempt would queue again behind the same busy
/// connections and add to the load that exhausted them. The pool is the
/// database's protection: size it, and bound every statement with
/// `statement_timeout`.
///
/// The runtime's own errors travel inside `sqlx::Error::Io` (see the `From`
/// impl below) and keep their own verdict, so `sqlx::Error` can be the
/// error type of a transaction or of a `#[retry]` fn as it is.
///
/// ```
/// use resilience::{Classify, Verdict};
///
/// assert_eq!(sqlx::Error::PoolTimedOut.classify(), Verdict::Fatal);
/// assert_eq!(sqlx::Error::RowNotFound.classify(), Verdict::Permanent);
/// let reset = sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into());
/// assert_eq!(reset.classify(), Verdict::Transient);
/// ```
impl Classify for sqlx::Error {
    fn classify(&self) -> Verdict {
        match self {
            sqlx::Error::Database(error) => match error.code() {
                Some(code) => SqlState::new(&code).map_or(Verdict::Permanent, |s| s.classify()),
                None => Verdict::Permanent,
            },
            sqlx::Error::Io(error) => error.classify(),
            sqlx::Error::PoolTimedOut => Verdict::Fatal,
            sqlx::Error::PoolClosed => Verdict::Ignored,
            _ => Verdict::Permanent,
        }
    }

    /// A conflict between transactions is nobody's failure: no reason. A
    /// pool timeout is a timeout; a broken connection is a network error.
    fn reason(&self) -> Option<Reason> {
        match self {
            sqlx::Error::Io(error) => error.reason(),
            sqlx::Error::PoolTimedOut => Some(Reason::Timeout),
            _ => None,
        }
    }

    fn outcome(&self) -> Outcome {
        self.classify().outcome()
    }
}

/// A runtime error as a `sqlx::Error`: inside `sqlx::Error::Io`, through
/// the runtime error's [`std::io::Error`] conversion, so that it
/// [classifies](Classify) as itself.
///
/// ```
/// use resilience::{Classify, Error, Verdict};
///
/// let err = sqlx::Error::from(Error::deadline_exceeded(0));
/// assert_eq!(err.classify(), Verdict::Ignored);
/// assert!(err.to_string().contains("the caller's deadline passed before any attempt"));
/// ```
impl From<Error> for sqlx::Error {
    fn from(error: Error) -> Self {
        sqlx::Error::Io(error.into())
    }
}
