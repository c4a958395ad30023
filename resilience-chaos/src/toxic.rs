//! The faults a proxy can inject, and the set of them it draws from.

use std::fmt::Write as _;
use std::time::Duration;

use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::Error;

/// The default [`Toxic::ResetBeforeResponse::wait`]: 200 ms.
pub const DEFAULT_RESPONSE_WAIT: Duration = Duration::from_millis(200);

/// The default [`Toxic::ResetAfterResponse::quiet`]: 50 ms.
pub const DEFAULT_QUIET: Duration = Duration::from_millis(50);

/// The most response bytes [`Toxic::ResetAfterResponse`] reads and discards
/// before it resets the client, when the upstream never goes quiet: 1 MiB.
pub const RESPONSE_CAP: u64 = 1 << 20;

/// One fault or network condition, applied to a whole connection.
///
/// Two kinds exist:
///
/// - **shaping** toxics ([`Latency`](Toxic::Latency),
///   [`Bandwidth`](Toxic::Bandwidth)) slow a connection down; each is drawn
///   on its own, so they combine with each other and with a fault;
/// - **faulting** toxics (every other variant) break a connection; at most
///   one of them applies to a connection, so their probabilities must add up
///   to at most 1.
///
/// The *response* below is what the upstream sends after the proxy started
/// forwarding the client's first bytes: bytes the upstream sends before
/// (a greeting) are forwarded as they are. The decision is made once per
/// connection, when it is accepted: with HTTP/1.1 keep-alive, the points
/// "mid-response" and "after N bytes" count from the connection's first
/// response, and later requests on a connection that survived its fault are
/// forwarded as they are.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use resilience_chaos::{Toxic, Toxics};
///
/// let toxics = Toxics::new()
///     .toxic(Toxic::latency(Duration::from_millis(20), Duration::from_millis(5)), 1.0)
///     .toxic(Toxic::reset_after_response(), 0.1)
///     .toxic(Toxic::close_mid_body(100), 0.1);
/// assert!(toxics.validate().is_ok());
/// assert!(Toxic::reset_after_response().is_fault());
/// assert!(!Toxic::bandwidth(1024).is_fault());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Toxic {
    /// The proxy holds each chunk it reads from the client for `delay` plus
    /// a uniform random `0..=jitter` before forwarding it (bytes that arrive
    /// meanwhile wait behind it), so every request/response round trip takes
    /// at least `delay` longer.
    Latency {
        /// The least added delay.
        delay: Duration,
        /// The most extra delay, drawn per chunk.
        jitter: Duration,
    },
    /// Each direction of the connection carries at most `bytes_per_sec`.
    Bandwidth {
        /// The rate, at least 1.
        bytes_per_sec: u64,
    },
    /// The connection is accepted, then nothing: no upstream connection, no
    /// answer, the client's bytes are read and discarded until it gives up.
    Blackhole,
    /// The client gets an RST when its first bytes arrive, which are never
    /// forwarded: the upstream sees no connection at all.
    ResetBeforeForward,
    /// The client's bytes are forwarded to the upstream; then the client
    /// gets an RST, and no response byte, as soon as the upstream's first
    /// response byte arrives (the request was processed) or the upstream
    /// stays silent for `wait` after the client's latest bytes, whichever
    /// comes first.
    ResetBeforeResponse {
        /// How long the upstream may stay silent before the reset anyway.
        wait: Duration,
    },
    /// The first `after_bytes` of the response reach the client, then it
    /// gets an RST (counting from the first response byte, so the request
    /// reached the upstream and was answered). With HTTP, `after_bytes` past
    /// the headers truncates the body.
    ResetMidResponse {
        /// How many response bytes are forwarded before the reset.
        after_bytes: u64,
    },
    /// The upstream's response is read whole by the proxy and discarded;
    /// the client gets an RST instead of it. "Whole" is a TCP-level
    /// heuristic: from the first response byte, the proxy reads until the
    /// upstream closes, stays `quiet` for that long, or has sent
    /// [`RESPONSE_CAP`] bytes.
    ResetAfterResponse {
        /// How long the upstream must stay silent for its response to count
        /// as complete (a keep-alive server does not close).
        quiet: Duration,
    },
    /// The connection is forwarded as it is until the client's bytes
    /// contain `request`; the upstream's answer to those bytes is then read
    /// (as [`ResetAfterResponse`](Self::ResetAfterResponse) reads one) and
    /// discarded, and the client gets an RST instead of it. For one
    /// statement of a long-lived connection: `b"COMMIT"` on a PostgreSQL
    /// connection is a commit that the server applied and whose answer the
    /// client never got.
    ///
    /// "The answer" is the first response bytes the upstream sends once
    /// the bytes holding `request` were forwarded: a client that waits for
    /// each answer before its next request (PostgreSQL's simple queries,
    /// HTTP/1.1 without pipelining) gets it exact.
    ResetAfterResponseTo {
        /// The bytes that arm the fault (at least one), matched across the
        /// client's reads.
        request: &'static [u8],
        /// As [`ResetAfterResponse`](Self::ResetAfterResponse)'s.
        quiet: Duration,
    },
    /// The first `after_bytes` of the response reach the client, then a
    /// clean close (FIN): with HTTP, a truncated body and an EOF.
    CloseMidBody {
        /// How many response bytes are forwarded before the close.
        after_bytes: u64,
    },
}

impl Toxic {
    /// [`Toxic::Latency`]: `delay` plus up to `jitter` on each chunk the
    /// client sends.
    ///
    /// ```
    /// # use std::time::Duration; use resilience_chaos::Toxic;
    /// let t = Toxic::latency(Duration::from_millis(100), Duration::from_millis(10));
    /// assert_eq!(t.name(), "latency");
    /// ```
    pub const fn latency(delay: Duration, jitter: Duration) -> Self {
        Self::Latency { delay, jitter }
    }

    /// [`Toxic::Bandwidth`]: at most `bytes_per_sec` each way.
    ///
    /// ```
    /// # use resilience_chaos::Toxic;
    /// assert_eq!(Toxic::bandwidth(64 * 1024), Toxic::Bandwidth { bytes_per_sec: 65536 });
    /// ```
    pub const fn bandwidth(bytes_per_sec: u64) -> Self {
        Self::Bandwidth { bytes_per_sec }
    }

    /// [`Toxic::Blackhole`].
    ///
    /// ```
    /// # use resilience_chaos::Toxic;
    /// assert_eq!(Toxic::blackhole(), Toxic::Blackhole);
    /// ```
    pub const fn blackhole() -> Self {
        Self::Blackhole
    }

    /// [`Toxic::ResetBeforeForward`].
    ///
    /// ```
    /// # use resilience_chaos::Toxic;
    /// assert_eq!(Toxic::reset_before_forward(), Toxic::ResetBeforeForward);
    /// ```
    pub const fn reset_before_forward() -> Self {
        Self::ResetBeforeForward
    }

    /// [`Toxic::ResetBeforeResponse`] with a `wait` of
    /// [`DEFAULT_RESPONSE_WAIT`].
    ///
    /// ```
    /// # use resilience_chaos::{Toxic, DEFAULT_RESPONSE_WAIT};
    /// assert_eq!(Toxic::reset_before_response(), Toxic::ResetBeforeResponse { wait: DEFAULT_RESPONSE_WAIT });
    /// ```
    pub const fn reset_before_response() -> Self {
        Self::ResetBeforeResponse {
            wait: DEFAULT_RESPONSE_WAIT,
        }
    }

    /// [`Toxic::ResetMidResponse`] after `after_bytes` response bytes.
    ///
    /// ```
    /// # use resilience_chaos::Toxic;
    /// assert_eq!(Toxic::reset_mid_response(10), Toxic::ResetMidResponse { after_bytes: 10 });
    /// ```
    pub const fn reset_mid_response(after_bytes: u64) -> Self {
        Self::ResetMidResponse { after_bytes }
    }

    /// [`Toxic::ResetAfterResponse`] with a `quiet` of [`DEFAULT_QUIET`].
    ///
    /// ```
    /// # use resilience_chaos::{Toxic, DEFAULT_QUIET};
    /// assert_eq!(Toxic::reset_after_response(), Toxic::ResetAfterResponse { quiet: DEFAULT_QUIET });
    /// ```
    pub const fn reset_after_response() -> Self {
        Self::ResetAfterResponse {
            quiet: DEFAULT_QUIET,
        }
    }

    /// [`Toxic::ResetAfterResponseTo`] the client's bytes holding
    /// `request`, with a `quiet` of [`DEFAULT_QUIET`].
    ///
    /// ```
    /// # use resilience_chaos::{Toxic, DEFAULT_QUIET};
    /// let commit = Toxic::reset_after_response_to(b"COMMIT");
    /// assert_eq!(commit, Toxic::ResetAfterResponseTo { request: b"COMMIT", quiet: DEFAULT_QUIET });
    /// assert_eq!(commit.name(), "reset_after_response_to");
    /// ```
    pub const fn reset_after_response_to(request: &'static [u8]) -> Self {
        Self::ResetAfterResponseTo {
            request,
            quiet: DEFAULT_QUIET,
        }
    }

    /// [`Toxic::CloseMidBody`] after `after_bytes` response bytes.
    ///
    /// ```
    /// # use resilience_chaos::Toxic;
    /// assert_eq!(Toxic::close_mid_body(10), Toxic::CloseMidBody { after_bytes: 10 });
    /// ```
    pub const fn close_mid_body(after_bytes: u64) -> Self {
        Self::CloseMidBody { after_bytes }
    }

    /// The toxic's name in errors and in [`Faults`](crate::Faults):
    /// `latency`, `bandwidth`, `blackhole`, `reset_before_forward`,
    /// `reset_before_response`, `reset_mid_response`, `reset_after_response`,
    /// `reset_after_response_to`, `close_mid_body`.
    ///
    /// ```
    /// # use resilience_chaos::Toxic;
    /// assert_eq!(Toxic::close_mid_body(1).name(), "close_mid_body");
    /// ```
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Latency { .. } => "latency",
            Self::Bandwidth { .. } => "bandwidth",
            Self::Blackhole => "blackhole",
            Self::ResetBeforeForward => "reset_before_forward",
            Self::ResetBeforeResponse { .. } => "reset_before_response",
            Self::ResetMidResponse { .. } => "reset_mid_response",
            Self::ResetAfterResponse { .. } => "reset_after_response",
            Self::ResetAfterResponseTo { .. } => "reset_after_response_to",
            Self::CloseMidBody { .. } => "close_mid_body",
        }
    }

    /// Whether this toxic breaks the connection (at most one per
    /// connection), rather than slowing it down.
    ///
    /// ```
    /// # use std::time::Duration; use resilience_chaos::Toxic;
    /// assert!(Toxic::blackhole().is_fault());
    /// assert!(!Toxic::latency(Duration::ZERO, Duration::ZERO).is_fault());
    /// ```
    pub const fn is_fault(&self) -> bool {
        !matches!(self, Self::Latency { .. } | Self::Bandwidth { .. })
    }

    fn validate(&self) -> Result<(), Error> {
        match *self {
            Self::Bandwidth { bytes_per_sec: 0 } => Err(Error::Parameter {
                toxic: self.name(),
                field: "bytes_per_sec",
                value: "0".to_owned(),
                expected: "at least 1",
            }),
            Self::ResetAfterResponseTo { request: [], .. } => Err(Error::Parameter {
                toxic: self.name(),
                field: "request",
                value: "b\"\"".to_owned(),
                expected: "at least one byte",
            }),
            Self::ResetAfterResponse { quiet } | Self::ResetAfterResponseTo { quiet, .. }
                if quiet.is_zero() =>
            {
                Err(Error::Parameter {
                    toxic: self.name(),
                    field: "quiet",
                    value: format!("{quiet:?}"),
                    expected: "more than zero",
                })
            }
            _ => Ok(()),
        }
    }
}

/// The toxics a proxy draws from for each new connection, each with its
/// probability.
///
/// Built without checks; [`validate`](Toxics::validate) (called by
/// [`Proxy::set`](crate::Proxy::set) and
/// [`Builder::start`](crate::Builder::start)) refuses probabilities outside
/// `0..=1`, faulting toxics whose probabilities add up to more than 1, a
/// kind listed twice and parameters out of range.
///
/// # Examples
///
/// ```
/// use resilience_chaos::{Toxic, Toxics};
///
/// let toxics = Toxics::new()
///     .toxic(Toxic::reset_before_forward(), 0.5)
///     .toxic(Toxic::blackhole(), 0.6);
/// assert_eq!(
///     toxics.validate().unwrap_err().to_string(),
///     "the probabilities of the faulting toxics add up to 1.1 (reset_before_forward = 0.5, \
///      blackhole = 0.6), more than 1: at most one of them applies to a connection",
/// );
/// assert!(Toxics::new().is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Toxics {
    entries: Vec<(Toxic, f64)>,
}

impl Toxics {
    /// No toxics: every connection is forwarded as it is.
    ///
    /// ```
    /// # use resilience_chaos::Toxics;
    /// assert_eq!(Toxics::new().iter().count(), 0);
    /// ```
    pub const fn new() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    /// Adds `toxic`, applied to a connection with `probability`.
    ///
    /// ```
    /// # use resilience_chaos::{Toxic, Toxics};
    /// let toxics = Toxics::new().toxic(Toxic::blackhole(), 0.25);
    /// assert_eq!(toxics.iter().next(), Some((Toxic::Blackhole, 0.25)));
    /// ```
    #[must_use]
    pub fn toxic(mut self, toxic: Toxic, probability: f64) -> Self {
        self.entries.push((toxic, probability));
        self
    }

    /// The toxics and their probabilities, in the order they were added.
    ///
    /// ```
    /// # use resilience_chaos::{Toxic, Toxics};
    /// let toxics = Toxics::new().toxic(Toxic::blackhole(), 1.0);
    /// assert_eq!(toxics.iter().collect::<Vec<_>>(), [(Toxic::Blackhole, 1.0)]);
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = (Toxic, f64)> + '_ {
        self.entries.iter().copied()
    }

    /// Whether there are no toxics.
    ///
    /// ```
    /// # use resilience_chaos::{Toxic, Toxics};
    /// assert!(!Toxics::new().toxic(Toxic::blackhole(), 0.0).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Checks the probabilities and parameters.
    ///
    /// # Errors
    ///
    /// [`Error::Probability`], [`Error::ProbabilitySum`],
    /// [`Error::Duplicate`] or [`Error::Parameter`], naming the toxic and
    /// the value at fault.
    ///
    /// ```
    /// # use resilience_chaos::{Toxic, Toxics};
    /// let err = Toxics::new().toxic(Toxic::bandwidth(0), 1.0).validate().unwrap_err();
    /// assert_eq!(err.to_string(), "`bandwidth.bytes_per_sec` must be at least 1, got 0");
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        for (i, &(toxic, probability)) in self.entries.iter().enumerate() {
            if !(0.0..=1.0).contains(&probability) {
                return Err(Error::Probability {
                    toxic: toxic.name(),
                    value: probability,
                });
            }
            if self.entries[..i]
                .iter()
                .any(|(other, _)| other.name() == toxic.name())
            {
                return Err(Error::Duplicate {
                    toxic: toxic.name(),
                });
            }
            toxic.validate()?;
        }
        let sum: f64 = self.faults().map(|(_, p)| p).sum();
        if sum > 1.0 + 1e-9 {
            let mut terms = String::new();
            for (toxic, p) in self.faults() {
                if !terms.is_empty() {
                    terms.push_str(", ");
                }
                let _ = write!(terms, "{} = {p}", toxic.name());
            }
            return Err(Error::ProbabilitySum { sum, terms });
        }
        Ok(())
    }

    fn faults(&self) -> impl Iterator<Item = (Toxic, f64)> + '_ {
        self.iter().filter(|(toxic, _)| toxic.is_fault())
    }

    /// Draws the toxics of one connection. Always takes the same number of
    /// values from `rng`, whatever the toxics, so a seed replays the same
    /// sequence of choices.
    pub(crate) fn draw(&self, rng: &mut StdRng) -> Plan {
        let shaping: f64 = rng.random();
        let bandwidth: f64 = rng.random();
        let fault: f64 = rng.random();
        let seed: u64 = rng.random();
        let mut plan = Plan {
            latency: None,
            bandwidth: None,
            fault: None,
            rng: StdRng::seed_from_u64(seed),
        };
        let mut cumulative = 0.0;
        for (toxic, p) in self.iter() {
            match toxic {
                Toxic::Latency { delay, jitter } if shaping < p => {
                    plan.latency = Some((delay, jitter));
                }
                Toxic::Bandwidth { bytes_per_sec } if bandwidth < p => {
                    plan.bandwidth = Some(bytes_per_sec);
                }
                Toxic::Latency { .. } | Toxic::Bandwidth { .. } => {}
                _ => {
                    cumulative += p;
                    if plan.fault.is_none() && fault < cumulative {
                        plan.fault = Some(toxic);
                    }
                }
            }
        }
        plan
    }
}

/// What one connection gets, drawn when it is accepted.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) latency: Option<(Duration, Duration)>,
    pub(crate) bandwidth: Option<u64>,
    /// A faulting toxic.
    pub(crate) fault: Option<Toxic>,
    /// The connection's own generator, for jitter.
    pub(crate) rng: StdRng,
}
