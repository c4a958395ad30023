//! What can go wrong when configuring or starting a proxy.

use std::io;
use std::net::SocketAddr;

/// A configuration the proxy refused, or a listener it could not open.
///
/// Every message names the toxic, the field and the value at fault.
///
/// # Examples
///
/// ```
/// use resilience_chaos::{Error, Toxic, Toxics};
///
/// let err = Toxics::new().toxic(Toxic::blackhole(), 1.5).validate().unwrap_err();
/// assert!(matches!(err, Error::Probability { toxic: "blackhole", .. }));
/// assert_eq!(err.to_string(), "probability of `blackhole` must be within 0..=1, got 1.5");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A probability outside `0..=1` (or not a number).
    #[error("probability of `{toxic}` must be within 0..=1, got {value}")]
    Probability {
        /// The toxic's name ([`Toxic::name`](crate::Toxic::name)).
        toxic: &'static str,
        /// The probability given.
        value: f64,
    },
    /// The faulting toxics' probabilities add up to more than 1, while at
    /// most one of them applies to a connection.
    #[error(
        "the probabilities of the faulting toxics add up to {sum} ({terms}), more than 1: at most one of them applies to a connection"
    )]
    ProbabilitySum {
        /// The sum.
        sum: f64,
        /// Each term, as `name = probability`.
        terms: String,
    },
    /// The same kind of toxic listed twice.
    #[error("`{toxic}` specified more than once")]
    Duplicate {
        /// The toxic's name.
        toxic: &'static str,
    },
    /// A toxic's parameter out of range.
    #[error("`{toxic}.{field}` must be {expected}, got {value}")]
    Parameter {
        /// The toxic's name.
        toxic: &'static str,
        /// The parameter's name.
        field: &'static str,
        /// The value given, formatted.
        value: String,
        /// What the value must be.
        expected: &'static str,
    },
    /// The listening socket could not be opened (at start, or by
    /// [`Proxy::accept`](crate::Proxy::accept) after
    /// [`Proxy::refuse`](crate::Proxy::refuse), when something else took the
    /// port meanwhile).
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address the proxy tried to listen on.
        addr: SocketAddr,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// [`Proxy::start`](crate::Proxy::start) was called outside a Tokio
    /// runtime.
    #[error("`Proxy::start` must be called within a Tokio runtime")]
    NoRuntime,
}
