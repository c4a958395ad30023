//! Label values: every one from a closed set or fixed at startup.

use crate::retry::{Classify, Reason};

/// The `service` label when none is configured (OpenTelemetry's default);
/// `registry::UNKNOWN_SERVICE` names it for users.
pub(crate) const UNKNOWN_SERVICE: &str = "unknown_service";

/// This process's `service`: the global registry's, which it publishes
/// here when it is installed or created (see [`publish_service`]).
static SERVICE: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Makes `service` the one of [`Labels::of`], once per process: called by
/// the registry as it becomes the global one, so that labels need not
/// look the registry up.
pub(crate) fn publish_service(service: &'static str) {
    let _ = SERVICE.set(service);
}

/// The `service` and `target` labels shared by every metric of one
/// dependency.
///
/// `service` names this application (from its startup configuration),
/// `target` the dependency: the breaker or retry policy name. Both are
/// `&'static str` because both are fixed at startup; a name built per
/// request would make the number of series unbounded.
///
/// ```
/// use resilience::telemetry::Labels;
///
/// let labels = Labels::new("checkout", "user");
/// assert_eq!((labels.service(), labels.target()), ("checkout", "user"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Labels {
    service: &'static str,
    target: &'static str,
}

impl Labels {
    /// The labels of `target`, called by `service`.
    pub const fn new(service: &'static str, target: &'static str) -> Self {
        Self { service, target }
    }

    /// The labels of `target` for this process: `service` is the one of
    /// the [global registry](crate::registry::global), from the startup
    /// configuration, once that registry is installed or created
    /// (`"unknown_service"` before, and when none is configured).
    ///
    /// It reads what the registry published when it became the global one:
    /// no registry is looked up or created here.
    ///
    /// ```
    /// use resilience::registry::Registry;
    /// use resilience::telemetry::Labels;
    ///
    /// Registry::builder().service("checkout").install()?;
    /// assert_eq!(Labels::of("user"), Labels::new("checkout", "user"));
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn of(target: &'static str) -> Self {
        Self::new(SERVICE.get().copied().unwrap_or(UNKNOWN_SERVICE), target)
    }

    /// The `service` label: the calling application.
    pub const fn service(&self) -> &'static str {
        self.service
    }

    /// The `target` label: the dependency (breaker or policy name).
    pub const fn target(&self) -> &'static str {
        self.target
    }
}

/// The `result` label of `http_client_retries_total`: how one attempt
/// ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AttemptResult {
    /// The attempt succeeded.
    Success,
    /// The attempt failed with a transient error and another one follows.
    Retry,
    /// The attempt failed and the chain gave up: attempts, `max_elapsed` or
    /// the caller's deadline ran out.
    Exhausted,
}

impl AttemptResult {
    /// The label value: `success`, `retry` or `exhausted`.
    pub const fn as_str(self) -> &'static str {
        match self {
            AttemptResult::Success => "success",
            AttemptResult::Retry => "retry",
            AttemptResult::Exhausted => "exhausted",
        }
    }
}

/// The label values of `attempt`: exact up to 9, then one bucket.
const ATTEMPTS: [&str; 10] = ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10+"];

/// The `attempt` label of attempt `n` (from 1): `"1"` … `"9"`, and `"10+"`
/// for every later one, so that a policy with many attempts cannot
/// multiply the series. `0` (no attempt ran) is labelled `"1"`, the attempt
/// that could not start.
///
/// ```
/// use resilience::telemetry::attempt_label;
///
/// assert_eq!(attempt_label(3), "3");
/// assert_eq!(attempt_label(10), "10+");
/// assert_eq!(attempt_label(500), "10+");
/// ```
pub const fn attempt_label(n: u32) -> &'static str {
    let index = if n == 0 { 0 } else { n - 1 };
    if index as usize >= ATTEMPTS.len() {
        ATTEMPTS[ATTEMPTS.len() - 1]
    } else {
        ATTEMPTS[index as usize]
    }
}

/// The `status` label of `http_client_request_duration_seconds`: how a
/// whole logical call ended.
///
/// The failure values are the [`Reason`] of the error that reached the
/// caller, so the histogram and `dependency_errors_total` speak the same
/// language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// The call returned `Ok`.
    Ok,
    /// The call failed with an error that is not the dependency's fault
    /// ([`Classify::reason`] is `None`): a 4xx, a business rule.
    Error,
    /// The dependency, or the caller's deadline, timed out.
    Timeout,
    /// The dependency answered with a server error.
    ServerError,
    /// The connection failed.
    Network,
    /// A circuit breaker rejected the call.
    CircuitOpen,
    /// A load limiter shed the call before it was sent.
    Overloaded,
    /// The caller dropped the call before it finished.
    Cancelled,
}

impl Status {
    /// The status of a finished call.
    ///
    /// ```
    /// use resilience::retry::HttpStatus;
    /// use resilience::telemetry::Status;
    ///
    /// assert_eq!(Status::of(&Ok::<_, HttpStatus>(())), Status::Ok);
    /// assert_eq!(Status::of(&Err::<(), _>(HttpStatus(503))), Status::ServerError);
    /// assert_eq!(Status::of(&Err::<(), _>(HttpStatus(404))), Status::Error);
    /// ```
    pub fn of<T, E: Classify>(result: &Result<T, E>) -> Self {
        match result {
            Ok(_) => Status::Ok,
            Err(error) => Status::failed(error.reason()),
        }
    }

    /// The status of a call that failed for `reason` (`None`: not the
    /// dependency's fault), for errors classified without [`Classify`].
    pub const fn failed(reason: Option<Reason>) -> Self {
        match reason {
            None => Status::Error,
            Some(Reason::Timeout) => Status::Timeout,
            Some(Reason::ServerError) => Status::ServerError,
            Some(Reason::Network) => Status::Network,
            Some(Reason::CircuitOpen) => Status::CircuitOpen,
            Some(Reason::Overloaded) => Status::Overloaded,
        }
    }

    /// The label value: `ok`, `error`, `timeout`, `5xx`, `network`,
    /// `circuit_open`, `overloaded` or `cancelled`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Timeout => Reason::Timeout.as_str(),
            Status::ServerError => Reason::ServerError.as_str(),
            Status::Network => Reason::Network.as_str(),
            Status::CircuitOpen => Reason::CircuitOpen.as_str(),
            Status::Overloaded => Reason::Overloaded.as_str(),
            Status::Cancelled => "cancelled",
        }
    }

    /// `true` for [`Status::Ok`].
    pub const fn is_ok(self) -> bool {
        matches!(self, Status::Ok)
    }
}

/// The `kind` label of `http_client_fallbacks_total`: which of the guide's
/// [fallbacks](crate::guide#fallbacks) answered the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fallback {
    /// A stale cached value, marked as stale.
    Stale,
    /// A partial response with the failed part marked unavailable.
    Partial,
    /// A fast, meaningful failure (a 503 to the caller).
    FailFast,
    /// The fn named by `#[circuit_breaker(fallback = …)]`, when its answer
    /// is not a [`MaybeStale`](crate::fallback::MaybeStale) served stale or
    /// a [`Part`](crate::fallback::Part) unavailable (those count as
    /// [`Stale`](Self::Stale) and [`Partial`](Self::Partial)).
    Function,
}

impl Fallback {
    /// The label value: `stale`, `partial`, `fail_fast` or `fallback_fn`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Fallback::Stale => "stale",
            Fallback::Partial => "partial",
            Fallback::FailFast => "fail_fast",
            Fallback::Function => "fallback_fn",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use crate::retry::HttpStatus;
    use std::time::Duration;

    #[test]
    fn attempt_labels_are_bounded() {
        let labels: std::collections::BTreeSet<_> = (0..=1000).map(attempt_label).collect();
        assert_eq!(labels.len(), 10);
        assert_eq!(attempt_label(0), "1");
        assert_eq!(attempt_label(1), "1");
        assert_eq!(attempt_label(9), "9");
        assert_eq!(attempt_label(10), "10+");
        assert_eq!(attempt_label(u32::MAX), "10+");
    }

    #[test]
    fn status_follows_the_reason_of_the_error() {
        let status = |e: Error| Status::of(&Err::<(), _>(e));
        assert_eq!(status(Error::deadline_exceeded(0)), Status::Timeout);
        assert_eq!(
            status(Error::AttemptTimeout(Duration::from_millis(1))),
            Status::Timeout
        );
        assert_eq!(
            status(crate::DependencyDown::new("user", "open").into()),
            Status::CircuitOpen
        );
        assert_eq!(
            Status::of(&Err::<(), _>(std::io::Error::from(
                std::io::ErrorKind::ConnectionReset
            ))),
            Status::Network
        );
        assert_eq!(
            Status::of(&Err::<(), _>(HttpStatus(502))),
            Status::ServerError
        );
        assert_eq!(Status::of(&Err::<(), _>(HttpStatus(422))), Status::Error);
        assert_eq!(Status::of(&Ok::<_, HttpStatus>(1)), Status::Ok);
    }

    #[test]
    fn label_values_are_the_documented_ones() {
        let statuses = [
            Status::Ok,
            Status::Error,
            Status::Timeout,
            Status::ServerError,
            Status::Network,
            Status::CircuitOpen,
            Status::Cancelled,
        ]
        .map(Status::as_str);
        assert_eq!(
            statuses,
            [
                "ok",
                "error",
                "timeout",
                "5xx",
                "network",
                "circuit_open",
                "cancelled"
            ]
        );
        assert_eq!(
            [
                AttemptResult::Success,
                AttemptResult::Retry,
                AttemptResult::Exhausted
            ]
            .map(AttemptResult::as_str),
            ["success", "retry", "exhausted"]
        );
        assert_eq!(
            [Fallback::Stale, Fallback::Partial, Fallback::FailFast].map(Fallback::as_str),
            ["stale", "partial", "fail_fast"]
        );
    }
}
