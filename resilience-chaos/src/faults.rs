//! Counters of connections and injected faults.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::Toxic;

/// A snapshot of a proxy's counters ([`Proxy::faults`](crate::Proxy::faults)).
///
/// A faulting toxic is counted when it is injected (the reset sent, the
/// close done, the blackhole entered), so a connection that ends before its
/// fault's trigger point (say, a response shorter than `after_bytes`) counts
/// in `connections` only. A shaping toxic is counted when it is given to a
/// connection. When every drawn fault is reached,
/// `connections == clean + faults()`.
///
/// # Examples
///
/// ```
/// use resilience_chaos::{Proxy, Toxic};
/// use tokio::io::AsyncReadExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// # let upstream = echo.local_addr()?;
/// let proxy = Proxy::builder(upstream).toxic(Toxic::reset_before_forward(), 1.0).start().await?;
/// let mut client = tokio::net::TcpStream::connect(proxy.addr()).await?;
/// tokio::io::AsyncWriteExt::write_all(&mut client, b"ping").await?;
/// let err = client.read(&mut [0; 4]).await.unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);
///
/// let faults = proxy.faults();
/// assert_eq!((faults.connections, faults.reset_before_forward, faults.clean), (1, 1, 0));
/// assert_eq!(faults.total(), 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Faults {
    /// Connections accepted.
    pub connections: u64,
    /// Connections that were drawn no faulting toxic.
    pub clean: u64,
    /// Connections given [`Toxic::Latency`].
    pub latency: u64,
    /// Connections given [`Toxic::Bandwidth`].
    pub bandwidth: u64,
    /// [`Toxic::Blackhole`] injected.
    pub blackhole: u64,
    /// [`Toxic::ResetBeforeForward`] injected.
    pub reset_before_forward: u64,
    /// [`Toxic::ResetBeforeResponse`] injected.
    pub reset_before_response: u64,
    /// [`Toxic::ResetMidResponse`] injected.
    pub reset_mid_response: u64,
    /// [`Toxic::ResetAfterResponse`] injected.
    pub reset_after_response: u64,
    /// [`Toxic::ResetAfterResponseTo`] injected.
    pub reset_after_response_to: u64,
    /// [`Toxic::CloseMidBody`] injected.
    pub close_mid_body: u64,
    /// Connections the proxy reset because it could not connect to the
    /// upstream (not a toxic: what a client would see without the proxy).
    pub upstream_errors: u64,
}

impl Faults {
    /// The faulting toxics injected, all kinds together.
    ///
    /// ```
    /// # use resilience_chaos::Faults;
    /// assert_eq!(Faults::default().total(), 0);
    /// ```
    pub const fn total(&self) -> u64 {
        self.blackhole
            + self.reset_before_forward
            + self.reset_before_response
            + self.reset_mid_response
            + self.reset_after_response
            + self.reset_after_response_to
            + self.close_mid_body
    }

    /// The counter of `toxic`'s kind.
    ///
    /// ```
    /// # use resilience_chaos::{Faults, Toxic};
    /// assert_eq!(Faults::default().of(Toxic::blackhole()), 0);
    /// ```
    pub const fn of(&self, toxic: Toxic) -> u64 {
        match toxic {
            Toxic::Latency { .. } => self.latency,
            Toxic::Bandwidth { .. } => self.bandwidth,
            Toxic::Blackhole => self.blackhole,
            Toxic::ResetBeforeForward => self.reset_before_forward,
            Toxic::ResetBeforeResponse { .. } => self.reset_before_response,
            Toxic::ResetMidResponse { .. } => self.reset_mid_response,
            Toxic::ResetAfterResponse { .. } => self.reset_after_response,
            Toxic::ResetAfterResponseTo { .. } => self.reset_after_response_to,
            Toxic::CloseMidBody { .. } => self.close_mid_body,
        }
    }
}

/// The live counters behind [`Faults`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    connections: AtomicU64,
    clean: AtomicU64,
    latency: AtomicU64,
    bandwidth: AtomicU64,
    blackhole: AtomicU64,
    reset_before_forward: AtomicU64,
    reset_before_response: AtomicU64,
    reset_mid_response: AtomicU64,
    reset_after_response: AtomicU64,
    reset_after_response_to: AtomicU64,
    close_mid_body: AtomicU64,
    upstream_errors: AtomicU64,
}

impl Counters {
    pub(crate) fn connection(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn clean(&self) {
        self.clean.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn upstream_error(&self) {
        self.upstream_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn injected(&self, toxic: Toxic) {
        let counter = match toxic {
            Toxic::Latency { .. } => &self.latency,
            Toxic::Bandwidth { .. } => &self.bandwidth,
            Toxic::Blackhole => &self.blackhole,
            Toxic::ResetBeforeForward => &self.reset_before_forward,
            Toxic::ResetBeforeResponse { .. } => &self.reset_before_response,
            Toxic::ResetMidResponse { .. } => &self.reset_mid_response,
            Toxic::ResetAfterResponse { .. } => &self.reset_after_response,
            Toxic::ResetAfterResponseTo { .. } => &self.reset_after_response_to,
            Toxic::CloseMidBody { .. } => &self.close_mid_body,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Faults {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Faults {
            connections: load(&self.connections),
            clean: load(&self.clean),
            latency: load(&self.latency),
            bandwidth: load(&self.bandwidth),
            blackhole: load(&self.blackhole),
            reset_before_forward: load(&self.reset_before_forward),
            reset_before_response: load(&self.reset_before_response),
            reset_mid_response: load(&self.reset_mid_response),
            reset_after_response: load(&self.reset_after_response),
            reset_after_response_to: load(&self.reset_after_response_to),
            close_mid_body: load(&self.close_mid_body),
            upstream_errors: load(&self.upstream_errors),
        }
    }
}
