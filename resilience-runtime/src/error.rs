//! Errors that the runtime itself produces.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
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
///     Resilience(#[from] resilience::Error),
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
    /// Not retried: no later attempt could finish in time. With an attempt
    /// made it is a failure of the dependency ([`Verdict::Fatal`]); before
    /// any attempt it says nothing about it ([`Verdict::Ignored`]).
    ///
    /// [`Verdict::Fatal`]: crate::Verdict::Fatal
    /// [`Verdict::Ignored`]: crate::Verdict::Ignored
    #[error("the caller's deadline passed {}{}", after(*attempts), cause_suffix(last))]
    #[non_exhaustive]
    DeadlineExceeded {
        /// Attempts made, the one cut in flight included.
        attempts: u32,
        /// Why the attempt before the deadline failed, when one did and its
        /// error type could be kept (see [`Cause`]); also the error's
        /// `source()`.
        #[source]
        last: Option<Cause>,
    },
    /// The retry chain's time limit, its policy's `max_elapsed`, passed
    /// while an attempt was still in flight; the attempt was dropped. (Not
    /// the retry [`Budget`](crate::retry::Budget): a chain whose budget is
    /// empty stops making retries and ends with its last attempt's error.)
    ///
    /// Not retried, and a failure of the dependency
    /// ([`Verdict::Fatal`](crate::Verdict::Fatal)): a hung dependency.
    #[error(
        "the retry chain's max_elapsed of {max_elapsed:?} passed with attempt {attempts} in flight{}",
        cause_suffix(last)
    )]
    #[non_exhaustive]
    MaxElapsedExceeded {
        /// The policy's `max_elapsed`.
        max_elapsed: Duration,
        /// Attempts made, the one cut in flight included.
        attempts: u32,
        /// Why the attempt before the one cut failed (see
        /// [`DeadlineExceeded`](Self::DeadlineExceeded)).
        #[source]
        last: Option<Cause>,
    },
    /// A circuit breaker rejected the call without running it.
    #[error(transparent)]
    DependencyDown(#[from] DependencyDown),
    /// A load limiter ([`limit`](crate::limit)) shed the call (or one of
    /// its attempts) before it was sent: a bulkhead or an adaptive
    /// concurrency limit was full, or the client-side throttle rejected it.
    ///
    /// Not retried, and says nothing about the dependency for the breaker
    /// ([`Verdict::Ignored`](crate::Verdict::Ignored)): the dependency never
    /// saw the call. A `fallback =` answers it, as it answers an open
    /// breaker.
    #[error(transparent)]
    Overloaded(#[from] Overloaded),
    /// A retry chain was started inside a database transaction opened by
    /// the transaction helper (`db::transaction`, feature `sqlx-postgres`),
    /// and refused before its first attempt.
    ///
    /// Not retried, and says nothing about the dependency
    /// ([`Verdict::Ignored`](crate::Verdict::Ignored)): the call was never
    /// made. Retrying there would hold the transaction's row locks through
    /// every pause; retry around the transaction, or move the call out of
    /// it.
    #[error(
        "a retry chain was started inside a database transaction: each pause would hold the transaction's row locks while other queries wait on them; retry around the transaction (the transaction helper already runs it again on 40001/40P01), or move the external call out of it, e.g. into an outbox table sent after the commit"
    )]
    RetryInsideTransaction,
    /// The connection broke while a transaction was committing (feature
    /// `sqlx-postgres`): the server may have applied it, or not, and the
    /// client cannot tell which.
    ///
    /// Not retried, and a failure of the dependency
    /// ([`Verdict::Fatal`](crate::Verdict::Fatal)): running the transaction
    /// again could apply it twice. Find out whether it committed (read
    /// back a row it wrote, or give it a unique key so that a second run
    /// fails with a unique violation) before running it again.
    #[error(
        "the connection broke while the transaction was committing, so it may or may not have been applied; it is not run again, which could apply it twice: check whether it committed (e.g. read back a row it wrote) before running it again{}",
        cause_suffix_plain(cause)
    )]
    #[non_exhaustive]
    CommitOutcomeUnknown {
        /// The connection's error; also the error's `source()`.
        #[source]
        cause: Option<Cause>,
    },
}

fn after(attempts: u32) -> String {
    match attempts {
        0 => "before any attempt".to_owned(),
        1 => "with attempt 1 in flight".to_owned(),
        n => format!("after {n} attempts"),
    }
}

fn cause_suffix_plain(cause: &Option<Cause>) -> String {
    match cause {
        Some(cause) => format!(" ({cause})"),
        None => String::new(),
    }
}

fn cause_suffix(last: &Option<Cause>) -> String {
    match last {
        Some(cause) => format!("; the last attempt failed: {cause}"),
        None => String::new(),
    }
}

impl Error {
    /// [`Error::DeadlineExceeded`] after `attempts` attempts, without a
    /// cause: 0 when the deadline had passed before the first one.
    ///
    /// ```
    /// use resilience::{Classify, Error, Verdict};
    ///
    /// assert_eq!(Error::deadline_exceeded(0).classify(), Verdict::Ignored);
    /// assert_eq!(
    ///     Error::deadline_exceeded(0).to_string(),
    ///     "the caller's deadline passed before any attempt",
    /// );
    /// ```
    pub const fn deadline_exceeded(attempts: u32) -> Self {
        Error::DeadlineExceeded {
            attempts,
            last: None,
        }
    }

    /// [`Error::MaxElapsedExceeded`]: `max_elapsed` passed with attempt
    /// `attempts` in flight, without a cause.
    ///
    /// ```
    /// use resilience::Error;
    /// use std::time::Duration;
    ///
    /// assert_eq!(
    ///     Error::max_elapsed_exceeded(Duration::from_secs(5), 2).to_string(),
    ///     "the retry chain's max_elapsed of 5s passed with attempt 2 in flight",
    /// );
    /// ```
    pub const fn max_elapsed_exceeded(max_elapsed: Duration, attempts: u32) -> Self {
        Error::MaxElapsedExceeded {
            max_elapsed,
            attempts,
            last: None,
        }
    }

    /// The same error, with `cause` as the last attempt's error: kept by
    /// [`DeadlineExceeded`](Self::DeadlineExceeded) and
    /// [`MaxElapsedExceeded`](Self::MaxElapsedExceeded), ignored by the others.
    #[must_use]
    pub fn with_last(mut self, cause: Option<Cause>) -> Self {
        if let Error::DeadlineExceeded { last, .. } | Error::MaxElapsedExceeded { last, .. } =
            &mut self
        {
            *last = cause;
        }
        self
    }

    /// The last attempt's error, for a chain cut by its `max_elapsed` or
    /// the caller's deadline after an attempt that failed.
    pub fn last(&self) -> Option<&Cause> {
        match self {
            Error::DeadlineExceeded { last, .. } | Error::MaxElapsedExceeded { last, .. } => {
                last.as_ref()
            }
            _ => None,
        }
    }
}

/// The error of an earlier attempt, kept by a chain that then ran out of
/// time, so that the caller learns what the dependency answered before it
/// hung: the [`Error`]'s `source()` and the end of its `Display`.
///
/// A chain keeps one when the error type is a
/// `std::error::Error + Send + Sync + 'static`: always with the
/// attributes, with [`Retry::keep_last_error`](crate::retry::Retry::keep_last_error)
/// by hand. Two causes are equal when they print the same.
///
/// ```
/// use resilience::{Cause, Error};
/// use std::error::Error as _;
/// use std::time::Duration;
///
/// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// let err = Error::max_elapsed_exceeded(Duration::from_secs(5), 3).with_last(Some(Cause::new(refused)));
/// assert!(err.to_string().ends_with("; the last attempt failed: connection refused"));
/// let source = err.source().unwrap().downcast_ref::<Cause>().unwrap();
/// assert!(source.get().downcast_ref::<std::io::Error>().is_some());
/// ```
#[derive(Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl Cause {
    /// Keeps `error`.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }

    /// The error kept, to `downcast_ref` to its own type.
    pub fn get(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.to_string() == other.to_string()
    }
}

impl Eq for Cause {}

/// A call rejected by a circuit breaker: the dependency is considered down.
///
/// Carries the breaker's name so that the caller's logs say which
/// dependency is down, and, when the breaker was open on its cooldown, the
/// instant that cooldown ends ([`retry_after`](Self::retry_after)). It is
/// never a success in disguise: callers either surface it or choose an
/// explicit, marked fallback (see the [guide](crate::guide#circuit-breaker)).
///
/// Two rejections are equal when they name the same breaker and state;
/// the end of the cooldown is left out of the comparison and of `Debug`.
#[derive(Clone, Copy, thiserror::Error)]
#[error("dependency down: circuit breaker `{breaker}` is {state}")]
pub struct DependencyDown {
    breaker: &'static str,
    state: &'static str,
    /// When the breaker lets a probe through: the end of its cooldown, as
    /// known when it rejected the call, in nanoseconds from [`EPOCH`];
    /// [`NOT_KNOWN`] when none was.
    ///
    /// One integer rather than an `Option<Instant>`: at 40 bytes the
    /// rejection leaves [`Error`]'s tag in front of its fields, where the
    /// optimizer sees through a caller's `is_ok()` (with the 48 bytes of an
    /// `Option<Instant>`, the tag moves into an `Instant`'s spare values and
    /// every call through a breaker copied its result around; see
    /// BENCHMARKS.md, circuit breaker).
    reopens: i64,
}

/// What [`DependencyDown::reopens`] counts from: one instant for the
/// process, fixed the first time a cooldown end is recorded.
static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

const NOT_KNOWN: i64 = i64::MIN;

/// `at` in nanoseconds from [`EPOCH`] (negative before it: a paused tokio
/// clock can be behind the epoch), saturating ±292 years out.
pub(crate) fn nanos_from_epoch(at: tokio::time::Instant) -> i64 {
    let epoch = *EPOCH.get_or_init(std::time::Instant::now);
    let at = at.into_std();
    let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    match at.checked_duration_since(epoch) {
        Some(after) => nanos(after),
        None => -nanos(epoch.saturating_duration_since(at)),
    }
}

/// The instant `nanos` from [`EPOCH`], when it can be represented.
fn instant_from_epoch(nanos: i64) -> Option<tokio::time::Instant> {
    let epoch = *EPOCH.get()?;
    let offset = Duration::from_nanos(nanos.unsigned_abs());
    let at = if nanos >= 0 {
        epoch.checked_add(offset)
    } else {
        epoch.checked_sub(offset)
    }?;
    Some(tokio::time::Instant::from_std(at))
}

impl DependencyDown {
    /// A rejection by the breaker `breaker`, which was in `state`
    /// (`"open"`, `"half-open"` or `"forced open"`), with no cooldown
    /// known.
    pub const fn new(breaker: &'static str, state: &'static str) -> Self {
        Self {
            breaker,
            state,
            reopens: NOT_KNOWN,
        }
    }

    /// The same rejection by a breaker open until `at` (on tokio's clock):
    /// what [`retry_after`](Self::retry_after) counts down to.
    ///
    /// ```
    /// use std::time::Duration;
    /// use resilience::DependencyDown;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let at = tokio::time::Instant::now() + Duration::from_secs(30);
    /// let down = DependencyDown::new("users", "open").reopening_at(at);
    /// assert_eq!(down.retry_after(), Some(Duration::from_secs(30)));
    /// tokio::time::sleep(Duration::from_secs(10)).await;
    /// assert_eq!(down.retry_after(), Some(Duration::from_secs(20)));
    /// # }
    /// ```
    pub fn reopening_at(self, at: tokio::time::Instant) -> Self {
        self.reopening_from_epoch(nanos_from_epoch(at))
    }

    /// The same rejection by a breaker open until `nanos` from the epoch
    /// (see [`nanos_from_epoch`]): a rejection's whole cost is this store.
    #[inline]
    pub(crate) const fn reopening_from_epoch(mut self, nanos: i64) -> Self {
        // `NOT_KNOWN` is 292 years before the epoch: no cooldown ends then.
        self.reopens = if nanos == NOT_KNOWN {
            NOT_KNOWN + 1
        } else {
            nanos
        };
        self
    }

    /// The name of the breaker that rejected the call.
    pub const fn breaker(&self) -> &'static str {
        self.breaker
    }

    /// The state the breaker was in when it rejected the call.
    pub const fn state(&self) -> &'static str {
        self.state
    }

    /// How long until the breaker lets a probe through: what is left of
    /// the cooldown the breaker was on when it rejected the call (zero
    /// once it has passed). `None` when no cooldown was known: the breaker
    /// was half-open (its probe is in flight) or forced open, or the
    /// rejection was built by hand with [`new`](Self::new).
    ///
    /// It reads only what the rejection carries: no registry is looked up
    /// or created.
    ///
    /// ```
    /// use std::time::Duration;
    /// use resilience::breaker::{BreakerConfig, CircuitBreaker};
    /// use resilience::DependencyDown;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), resilience::ConfigError> {
    /// let config = BreakerConfig::new().with_min_requests(1).with_cooldown(Duration::from_secs(30));
    /// let breaker = CircuitBreaker::new("users", config)?;
    /// breaker.try_acquire().unwrap().failure(); // 1 of 1 failed: open
    /// let down = breaker.try_acquire().unwrap_err();
    /// assert_eq!(down.retry_after(), Some(Duration::from_secs(30)));
    /// // Built by hand: nothing known.
    /// assert_eq!(DependencyDown::new("nowhere", "open").retry_after(), None);
    /// # Ok(()) }
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        if self.reopens == NOT_KNOWN {
            return None;
        }
        let at = instant_from_epoch(self.reopens)?;
        Some(at.saturating_duration_since(tokio::time::Instant::now()))
    }
}

impl fmt::Debug for DependencyDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The instant is left out: it differs from run to run.
        f.debug_struct("DependencyDown")
            .field("breaker", &self.breaker)
            .field("state", &self.state)
            .finish()
    }
}

impl PartialEq for DependencyDown {
    fn eq(&self, other: &Self) -> bool {
        (self.breaker, self.state) == (other.breaker, other.state)
    }
}

impl Eq for DependencyDown {}

/// A call shed by a load limiter (see [`limit`](crate::limit)) before it
/// was sent.
///
/// Carries the limiter's name, which of its parts shed the call, and the
/// concurrency limit in force then (none for the throttle), so that the
/// caller's logs say which dependency is overloaded and why.
///
/// ```
/// use resilience::{Classify, Error, Verdict};
/// use resilience::limit::{Bulkhead, Priority};
///
/// let bulkhead = Bulkhead::new("user", 1)?;
/// let _held = bulkhead.try_acquire(Priority::Default)?;
/// let shed = bulkhead.try_acquire(Priority::Default).unwrap_err();
/// assert_eq!(shed.limiter(), "user");
/// assert_eq!(
///     shed.to_string(),
///     "overloaded: the bulkhead of `user` is full (limit 1 in flight); the call was not sent",
/// );
/// assert_eq!(Error::from(shed).classify(), Verdict::Ignored);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("overloaded: {}; the call was not sent", self.describe())]
pub struct Overloaded {
    limiter: &'static str,
    by: ShedBy,
    limit: u32,
    retry_after: Option<Duration>,
}

/// Which part of a load limiter shed a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ShedBy {
    /// A bulkhead: a fixed number of calls in flight.
    Bulkhead,
    /// An adaptive concurrency limit (Vegas).
    ConcurrencyLimit,
    /// The client-side throttle (the SRE book's adaptive throttling).
    Throttle,
    /// A rate limit: calls per period ([`RateLimit`](crate::limit::RateLimit)).
    RateLimit,
}

impl ShedBy {
    /// The metric label value: `bulkhead`, `concurrency_limit`,
    /// `throttle` or `rate_limit`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ShedBy::Bulkhead => "bulkhead",
            ShedBy::ConcurrencyLimit => "concurrency_limit",
            ShedBy::Throttle => "throttle",
            ShedBy::RateLimit => "rate_limit",
        }
    }
}

impl Overloaded {
    /// A call shed by the part `by` of the limiter `limiter`, whose
    /// concurrency limit was `limit` (0 for the throttle and a rate limit).
    pub const fn new(limiter: &'static str, by: ShedBy, limit: u32) -> Self {
        Self {
            limiter,
            by,
            limit,
            retry_after: None,
        }
    }

    /// The same, saying that a call would be admitted `retry_after` from
    /// now (what a rate limit knows).
    #[must_use]
    pub const fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }

    /// How long until the limiter would admit a call of the same priority,
    /// if it knows: a [rate limit](crate::limit::RateLimit) does (the next
    /// free place in its schedule); a concurrency limit cannot (it depends
    /// on when the calls in flight end).
    pub const fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The name of the limiter that shed the call.
    pub const fn limiter(&self) -> &'static str {
        self.limiter
    }

    /// Which of its parts shed it.
    pub const fn by(&self) -> ShedBy {
        self.by
    }

    /// The concurrency limit in force when the call was shed (0 when the
    /// throttle shed it).
    pub const fn limit(&self) -> u32 {
        self.limit
    }

    fn describe(&self) -> String {
        match self.by {
            ShedBy::Bulkhead => format!(
                "the bulkhead of `{}` is full (limit {} in flight)",
                self.limiter, self.limit
            ),
            ShedBy::ConcurrencyLimit => format!(
                "the adaptive concurrency limit of `{}` is reached (limit {} in flight)",
                self.limiter, self.limit
            ),
            ShedBy::Throttle => format!(
                "the client-side throttle of `{}` rejected it (the dependency accepted too few of the recent calls)",
                self.limiter
            ),
            ShedBy::RateLimit => match self.retry_after {
                Some(after) => format!(
                    "the rate limit of `{}` is reached (the next call is admitted in {})",
                    self.limiter,
                    resilience_rules::duration::display(after)
                ),
                None => format!("the rate limit of `{}` is reached", self.limiter),
            },
        }
    }
}

impl From<Error> for std::io::Error {
    fn from(err: Error) -> Self {
        let kind = match err {
            Error::AttemptTimeout(_)
            | Error::MaxElapsedExceeded { .. }
            | Error::DeadlineExceeded { .. } => std::io::ErrorKind::TimedOut,
            Error::DependencyDown(_) => std::io::ErrorKind::ConnectionRefused,
            // Not `WouldBlock` or a connection error: nothing was sent, and
            // a classifier that reads only the kind must not retry it.
            Error::Overloaded(_) => std::io::ErrorKind::Other,
            // `Other`, not a connection error kind: a classifier that reads
            // only the kind must not take it for a retryable reset.
            Error::RetryInsideTransaction | Error::CommitOutcomeUnknown { .. } => {
                std::io::ErrorKind::Other
            }
        };
        std::io::Error::new(kind, err)
    }
}

/// A configuration value that was rejected, naming what was configured,
/// the field, the value and the rule it broke.
///
/// ```
/// use resilience::retry::Policy;
///
/// let err = Policy::builder().with_max_attempts(0).build().unwrap_err();
/// assert_eq!(err.field(), "max_attempts");
/// assert_eq!(
///     err.to_string(),
///     "invalid retry policy: `max_attempts = 0`: at least one attempt is needed; use 1 to disable retries",
/// );
/// ```
///
/// Its `Debug` is its `Display` message, as `anyhow`'s is: `main` returning
/// `Result<(), Box<dyn Error>>` prints an error it returns with `{:?}`.
#[derive(Clone, PartialEq, Eq)]
pub struct ConfigError {
    subject: Cow<'static, str>,
    field: Cow<'static, str>,
    value: String,
    reason: Cow<'static, str>,
    /// The other errors found in the same check, so that one start shows
    /// every mistake of a file.
    others: Vec<ConfigError>,
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
            others: Vec::new(),
        }
    }

    /// One error for all of `errors` (the first, carrying the others), or
    /// `None` when there are none.
    pub fn combine(errors: impl IntoIterator<Item = ConfigError>) -> Option<ConfigError> {
        let mut errors = errors.into_iter().flat_map(ConfigError::into_all);
        let mut first = errors.next()?;
        first.others.extend(errors);
        Some(first)
    }

    /// Every error of the check, this one first.
    pub fn errors(&self) -> impl Iterator<Item = &ConfigError> {
        std::iter::once(self).chain(self.others.iter())
    }

    pub(crate) fn into_all(mut self) -> Vec<ConfigError> {
        let others = std::mem::take(&mut self.others);
        let mut all = vec![self];
        all.extend(others.into_iter().flat_map(ConfigError::into_all));
        all
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
        )?;
        for other in &self.others {
            write!(f, "\n{other}")?;
        }
        Ok(())
    }
}

/// The `Display` message (what, field, value and reason of every error of
/// the check): `fn main() -> Result<(), Box<dyn Error>>` prints a returned
/// error with `{:?}`, and the message is what the user needs there.
impl fmt::Debug for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for ConfigError {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// `fn main() -> Result<(), Box<dyn Error>>` prints a returned error
    /// with `{:?}`: a `ConfigError` shows its message there, every error
    /// of the check, not a struct of its fields.
    #[test]
    fn config_error_debug_is_its_message() {
        let err = ConfigError::combine([
            ConfigError::new(
                "retry policy",
                "max_attempts",
                0,
                "at least one attempt is needed",
            ),
            ConfigError::new("breaker", "ratio", 1.5, "a ratio is at most 1"),
        ])
        .unwrap();
        let debug = format!("{err:?}");
        assert_eq!(debug, format!("{err}"));
        assert!(
            debug.contains(
                "invalid retry policy: `max_attempts = 0`: at least one attempt is needed"
            ),
            "{debug}"
        );
        assert!(debug.contains("invalid breaker: `ratio = 1.5`"), "{debug}");
        assert!(!debug.contains("ConfigError {"), "{debug}");
        let boxed: Box<dyn std::error::Error> = Box::new(err.clone());
        assert_eq!(format!("{boxed:?}"), format!("{err}"));
    }

    /// A rejection's end of cooldown survives the trip through the epoch
    /// on both sides of it (a paused tokio clock can be behind the epoch),
    /// to the nanosecond.
    #[test]
    fn a_cooldown_end_round_trips_through_the_epoch() {
        let epoch = *EPOCH.get_or_init(std::time::Instant::now);
        let second = Duration::from_secs(1);
        let mut instants = vec![epoch, epoch + second + Duration::from_nanos(7)];
        instants.extend(epoch.checked_sub(second));
        for at in instants {
            let at = tokio::time::Instant::from_std(at);
            let nanos = nanos_from_epoch(at);
            assert_eq!(instant_from_epoch(nanos), Some(at));
            let down = DependencyDown::new("users", "open").reopening_at(at);
            assert_eq!(down.reopens, nanos);
        }
        assert_eq!(DependencyDown::new("users", "open").retry_after(), None);
    }
}
