//! Errors that the runtime itself produces.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

/// An error produced by the runtime rather than by the operation it runs.
///
/// The error type of every protected operation must be buildable from this
/// one (`E: From<Error>`): a timed-out attempt, a passed deadline or an open
/// breaker all have to reach the caller as the caller's own error type. With
/// `thiserror` that is one variant:
///
/// ```
/// #[derive(Debug, thiserror::Error)]
/// enum ClientError {
///     #[error("http status {0}")]
///     Status(u16),
///     #[error(transparent)]
///     Resilience(#[from] resilience_runtime::Error),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// One attempt ran longer than the policy's `attempt_timeout`.
    ///
    /// Transient: the next attempt gets a fresh time slot.
    #[error("attempt timed out after {0:?}")]
    AttemptTimeout(Duration),
    /// The caller's deadline (see [`deadline`](crate::deadline)) passed.
    ///
    /// Permanent: no later attempt could finish in time.
    #[error("the caller's deadline passed")]
    DeadlineExceeded,
    /// The retry chain's `max_elapsed` budget ran out while an attempt was
    /// still in flight; the attempt was dropped.
    ///
    /// Permanent: the budget of the whole chain is spent.
    #[error("the retry budget of {0:?} ran out with an attempt in flight")]
    BudgetExhausted(Duration),
    /// A circuit breaker rejected the call without running it.
    #[error(transparent)]
    DependencyDown(#[from] DependencyDown),
}

/// A call rejected by a circuit breaker: the dependency is considered down.
///
/// Carries the breaker's name so that the caller's logs say which
/// dependency is down. It is never a success in disguise (SPEC §5): callers
/// either surface it or choose an explicit, marked fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("dependency down: circuit breaker `{breaker}` is {state}")]
pub struct DependencyDown {
    breaker: &'static str,
    state: &'static str,
}

impl DependencyDown {
    /// A rejection by the breaker `breaker`, which was in `state`
    /// (`"open"`, `"half-open"` or `"forced open"`).
    pub const fn new(breaker: &'static str, state: &'static str) -> Self {
        Self { breaker, state }
    }

    /// The name of the breaker that rejected the call.
    pub const fn breaker(&self) -> &'static str {
        self.breaker
    }

    /// The state the breaker was in when it rejected the call.
    pub const fn state(&self) -> &'static str {
        self.state
    }
}

impl From<Error> for std::io::Error {
    fn from(err: Error) -> Self {
        let kind = match err {
            Error::AttemptTimeout(_) | Error::BudgetExhausted(_) | Error::DeadlineExceeded => {
                std::io::ErrorKind::TimedOut
            }
            Error::DependencyDown(_) => std::io::ErrorKind::ConnectionRefused,
        };
        std::io::Error::new(kind, err)
    }
}

/// A configuration value that was rejected, naming what was configured,
/// the field, the value and the rule it broke.
///
/// ```
/// use resilience_runtime::retry::Policy;
///
/// let err = Policy::builder().with_max_attempts(0).build().unwrap_err();
/// assert_eq!(err.field(), "max_attempts");
/// assert_eq!(
///     err.to_string(),
///     "invalid retry policy: `max_attempts = 0`: at least one attempt is needed; use 1 to disable retries",
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    subject: Cow<'static, str>,
    field: Cow<'static, str>,
    value: String,
    reason: Cow<'static, str>,
}

impl ConfigError {
    /// A rejected `field = value` of `subject` (e.g. `"retry policy"`),
    /// with the rule it broke as `reason`.
    pub fn new(
        subject: impl Into<Cow<'static, str>>,
        field: impl Into<Cow<'static, str>>,
        value: impl fmt::Display,
        reason: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self {
            subject: subject.into(),
            field: field.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    /// Replaces what was being configured, e.g. `"retry policy `user`"` or
    /// `"breakers.user in config.toml"`.
    #[must_use]
    pub fn with_subject(mut self, subject: impl Into<Cow<'static, str>>) -> Self {
        self.subject = subject.into();
        self
    }

    /// What was being configured.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The offending field.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The offending value, as written.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The rule the value broke, with the fix where there is one.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {}: `{} = {}`: {}",
            self.subject, self.field, self.value, self.reason
        )
    }
}

impl std::error::Error for ConfigError {}
