//! The proxy: its listener, its configuration and its connection tasks.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::faults::Counters;
use crate::{Error, Faults, Toxic, Toxics, conn};

/// A fault-injecting TCP proxy on `127.0.0.1`, forwarding to one upstream.
///
/// Each accepted connection is given its toxics when it is accepted, drawn
/// from the current [`Toxics`] with a seeded generator; changing them
/// ([`set`](Proxy::set), [`heal`](Proxy::heal)) applies to the connections
/// accepted afterwards. Dropping the proxy closes its listener and aborts
/// every connection it serves, so it never outlives its test.
///
/// # Examples
///
/// ```
/// use resilience_chaos::Proxy;
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// # let upstream = echo.local_addr()?;
/// # tokio::spawn(async move { while let Ok((mut s, _)) = echo.accept().await {
/// #     tokio::spawn(async move { let (mut r, mut w) = s.split(); tokio::io::copy(&mut r, &mut w).await }); } });
/// // `upstream` is an echo server
/// let proxy = Proxy::start(upstream).await?;
/// let mut client = tokio::net::TcpStream::connect(proxy.addr()).await?;
/// client.write_all(b"ping").await?;
/// let mut buf = [0; 4];
/// client.read_exact(&mut buf).await?;
/// assert_eq!(&buf, b"ping");
/// # Ok(()) }
/// ```
pub struct Proxy {
    addr: SocketAddr,
    seed: u64,
    shared: Arc<Shared>,
    /// The accept loop, `None` while refusing.
    listener: tokio::sync::Mutex<Option<JoinHandle<()>>>,
}

/// What the accept loop shares with the handle.
#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    config: Mutex<Config>,
    counters: Arc<Counters>,
    tasks: Mutex<Tasks>,
}

#[derive(Debug)]
struct Config {
    toxics: Toxics,
    rng: StdRng,
}

#[derive(Debug, Default)]
struct Tasks {
    set: JoinSet<()>,
    /// Set when the proxy is dropped: no task is spawned afterwards.
    closed: bool,
}

/// Configures a [`Proxy`] before it starts ([`Proxy::builder`]).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use resilience_chaos::{Proxy, Toxic};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
/// let proxy = Proxy::builder(upstream)
///     .seed(7)
///     .toxic(Toxic::latency(Duration::from_millis(10), Duration::from_millis(5)), 0.5)
///     .toxic(Toxic::reset_after_response(), 0.1)
///     .start()
///     .await?;
/// assert_eq!(proxy.seed(), 7);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `start` is awaited"]
pub struct Builder {
    upstream: SocketAddr,
    port: u16,
    seed: Option<u64>,
    toxics: Toxics,
}

impl Builder {
    /// The generator's seed, so that a run's sequence of toxic choices can
    /// be replayed. Without one, a random seed is used, readable with
    /// [`Proxy::seed`].
    ///
    /// ```
    /// # use resilience_chaos::Proxy;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// let proxy = Proxy::builder(upstream).seed(42).start().await?;
    /// assert_eq!(proxy.seed(), 42);
    /// # Ok(()) }
    /// ```
    pub const fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The port to listen on, on `127.0.0.1`; 0 (the default) lets the
    /// system choose one.
    ///
    /// ```
    /// # use resilience_chaos::Proxy;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// let proxy = Proxy::builder(upstream).port(0).start().await?;
    /// assert!(proxy.addr().ip().is_loopback());
    /// # Ok(()) }
    /// ```
    pub const fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Adds `toxic`, applied to each connection with `probability`.
    ///
    /// ```
    /// # use resilience_chaos::{Proxy, Toxic};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// let proxy = Proxy::builder(upstream).toxic(Toxic::blackhole(), 0.5).start().await?;
    /// assert_eq!(proxy.toxics().iter().count(), 1);
    /// # Ok(()) }
    /// ```
    pub fn toxic(mut self, toxic: Toxic, probability: f64) -> Self {
        self.toxics = self.toxics.toxic(toxic, probability);
        self
    }

    /// Replaces the toxics added so far with `toxics`.
    ///
    /// ```
    /// # use resilience_chaos::{Proxy, Toxic, Toxics};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// let toxics = Toxics::new().toxic(Toxic::reset_before_forward(), 0.2);
    /// let proxy = Proxy::builder(upstream).toxics(toxics.clone()).start().await?;
    /// assert_eq!(proxy.toxics(), toxics);
    /// # Ok(()) }
    /// ```
    pub fn toxics(mut self, toxics: Toxics) -> Self {
        self.toxics = toxics;
        self
    }

    /// Validates the toxics, listens, and starts accepting connections.
    ///
    /// # Errors
    ///
    /// The toxics' [`Toxics::validate`] errors; [`Error::Listen`] when the
    /// port cannot be bound; [`Error::NoRuntime`] outside a Tokio runtime.
    ///
    /// ```
    /// # use resilience_chaos::{Error, Proxy, Toxic};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// let err = Proxy::builder(upstream).toxic(Toxic::blackhole(), -0.1).start().await.unwrap_err();
    /// assert!(matches!(err, Error::Probability { toxic: "blackhole", .. }));
    /// # Ok(()) }
    /// ```
    pub async fn start(self) -> Result<Proxy, Error> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime);
        }
        self.toxics.validate()?;
        let seed = self.seed.unwrap_or_else(rand::random);
        let listener = listen(SocketAddr::from((Ipv4Addr::LOCALHOST, self.port)))?;
        let addr = listener.local_addr().map_err(|source| Error::Listen {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, self.port)),
            source,
        })?;
        let shared = Arc::new(Shared {
            upstream: self.upstream,
            config: Mutex::new(Config {
                toxics: self.toxics,
                rng: StdRng::seed_from_u64(seed),
            }),
            counters: Arc::default(),
            tasks: Mutex::default(),
        });
        let accepting = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        Ok(Proxy {
            addr,
            seed,
            shared,
            listener: tokio::sync::Mutex::new(Some(accepting)),
        })
    }
}

impl Proxy {
    /// Starts a proxy to `upstream` with no toxics, on a port the system
    /// chooses.
    ///
    /// # Errors
    ///
    /// As [`Builder::start`].
    ///
    /// ```
    /// # use resilience_chaos::Proxy;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// let proxy = Proxy::start(upstream).await?;
    /// assert!(proxy.toxics().is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn start(upstream: SocketAddr) -> Result<Self, Error> {
        Self::builder(upstream).start().await
    }

    /// A builder for a proxy to `upstream`: seed, port and toxics.
    ///
    /// ```
    /// # use resilience_chaos::{Proxy, Toxic};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// let proxy = Proxy::builder(upstream).seed(1).toxic(Toxic::blackhole(), 0.1).start().await?;
    /// assert_eq!(proxy.upstream(), upstream);
    /// # Ok(()) }
    /// ```
    pub fn builder(upstream: SocketAddr) -> Builder {
        Builder {
            upstream,
            port: 0,
            seed: None,
            toxics: Toxics::new(),
        }
    }

    /// The address the proxy listens on (`127.0.0.1`), to give the client.
    ///
    /// ```
    /// # use resilience_chaos::Proxy;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// let proxy = Proxy::start(upstream).await?;
    /// let url = format!("http://{}/", proxy.addr());
    /// assert!(url.starts_with("http://127.0.0.1:"));
    /// # Ok(()) }
    /// ```
    pub const fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address the proxy forwards to.
    ///
    /// ```
    /// # use resilience_chaos::Proxy;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// assert_eq!(Proxy::start(upstream).await?.upstream(), upstream);
    /// # Ok(()) }
    /// ```
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// The generator's seed: give it to [`Builder::seed`] to replay this
    /// run's choices.
    ///
    /// ```
    /// # use resilience_chaos::Proxy;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// let proxy = Proxy::start(upstream).await?;
    /// println!("chaos seed: {}", proxy.seed());
    /// # Ok(()) }
    /// ```
    pub const fn seed(&self) -> u64 {
        self.seed
    }

    /// Replaces the toxics, for the connections accepted from now on.
    ///
    /// # Errors
    ///
    /// [`Toxics::validate`]'s; the current toxics are then kept.
    ///
    /// ```
    /// # use resilience_chaos::{Proxy, Toxic, Toxics};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// let proxy = Proxy::start(upstream).await?;
    /// proxy.set(Toxics::new().toxic(Toxic::blackhole(), 1.0))?; // break
    /// assert!(proxy.set(Toxics::new().toxic(Toxic::blackhole(), 2.0)).is_err());
    /// assert_eq!(proxy.toxics().iter().next(), Some((Toxic::Blackhole, 1.0)));
    /// # Ok(()) }
    /// ```
    pub fn set(&self, toxics: Toxics) -> Result<(), Error> {
        toxics.validate()?;
        lock(&self.shared.config).toxics = toxics;
        Ok(())
    }

    /// Removes every toxic: connections accepted from now on are forwarded
    /// as they are (the ones already accepted keep theirs). Does not undo
    /// [`refuse`](Proxy::refuse).
    ///
    /// ```
    /// # use resilience_chaos::{Proxy, Toxic};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// let proxy = Proxy::builder(upstream).toxic(Toxic::blackhole(), 1.0).start().await?;
    /// proxy.heal();
    /// assert!(proxy.toxics().is_empty());
    /// # Ok(()) }
    /// ```
    pub fn heal(&self) {
        lock(&self.shared.config).toxics = Toxics::new();
    }

    /// The current toxics.
    ///
    /// ```
    /// # use resilience_chaos::{Proxy, Toxics};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// assert_eq!(Proxy::start(upstream).await?.toxics(), Toxics::new());
    /// # Ok(()) }
    /// ```
    pub fn toxics(&self) -> Toxics {
        lock(&self.shared.config).toxics.clone()
    }

    /// Closes the listener: new connections are refused by the system
    /// (`ConnectionRefused`) until [`accept`](Proxy::accept). Connections
    /// already accepted go on; ones still in the listener's backlog (not yet
    /// accepted by the proxy) are reset by the system. Returns once the port
    /// is closed.
    ///
    /// ```
    /// # use resilience_chaos::Proxy;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// let proxy = Proxy::start(upstream).await?;
    /// proxy.refuse().await;
    /// let err = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    /// # Ok(()) }
    /// ```
    pub async fn refuse(&self) {
        let mut listener = self.listener.lock().await;
        if let Some(accepting) = listener.take() {
            accepting.abort();
            // Returns once the task, and its listener, are dropped.
            let _ = accepting.await;
        }
    }

    /// Listens again, on the same port, after [`refuse`](Proxy::refuse); does
    /// nothing when already listening.
    ///
    /// # Errors
    ///
    /// [`Error::Listen`] when the port was taken meanwhile.
    ///
    /// ```
    /// # use resilience_chaos::Proxy;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// let proxy = Proxy::start(upstream).await?;
    /// proxy.refuse().await;
    /// proxy.accept().await?;
    /// tokio::net::TcpStream::connect(proxy.addr()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn accept(&self) -> Result<(), Error> {
        let mut accepting = self.listener.lock().await;
        if accepting.is_none() {
            let listener = listen(self.addr)?;
            *accepting = Some(tokio::spawn(accept_loop(
                listener,
                Arc::clone(&self.shared),
            )));
        }
        Ok(())
    }

    /// A snapshot of the counters: connections, and faults injected per
    /// toxic.
    ///
    /// ```
    /// # use resilience_chaos::Proxy;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// let proxy = Proxy::start(upstream).await?;
    /// assert_eq!(proxy.faults().total(), 0);
    /// # Ok(()) }
    /// ```
    pub fn faults(&self) -> Faults {
        self.shared.counters.snapshot()
    }

    /// How many connections the proxy accepted.
    ///
    /// ```
    /// # use resilience_chaos::Proxy;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// let proxy = Proxy::start(upstream).await?;
    /// assert_eq!(proxy.connections(), 0);
    /// # Ok(()) }
    /// ```
    pub fn connections(&self) -> u64 {
        self.faults().connections
    }

    /// Stops the proxy and waits until its listener and every connection
    /// are closed. Dropping the proxy does the same without waiting.
    ///
    /// ```
    /// # use resilience_chaos::Proxy;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    /// let proxy = Proxy::start(upstream).await?;
    /// let addr = proxy.addr();
    /// proxy.shutdown().await;
    /// tokio::net::TcpListener::bind(addr).await?; // the port is free
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(mut self) {
        if let Some(accepting) = self.listener.get_mut().take() {
            accepting.abort();
            let _ = accepting.await;
        }
        let mut set = {
            let mut tasks = lock(&self.shared.tasks);
            tasks.closed = true;
            std::mem::take(&mut tasks.set)
        };
        set.abort_all();
        while set.join_next().await.is_some() {}
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(accepting) = self.listener.get_mut().take() {
            accepting.abort();
        }
        let mut tasks = lock(&self.shared.tasks);
        tasks.closed = true;
        tasks.set.abort_all();
    }
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("seed", &self.seed)
            .field("toxics", &self.toxics())
            .field("faults", &self.faults())
            .finish_non_exhaustive()
    }
}

/// Accepts connections until aborted, each served by its own task.
async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((client, _)) => shared.serve(client),
            // Out of descriptors, say: back off, the proxy stays up.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

impl Shared {
    fn serve(&self, client: TcpStream) {
        let counters = Arc::clone(&self.counters);
        counters.connection();
        let plan = {
            let mut config = lock(&self.config);
            let Config { toxics, rng } = &mut *config;
            toxics.draw(rng)
        };
        if let Some((delay, jitter)) = plan.latency {
            counters.injected(Toxic::latency(delay, jitter));
        }
        if let Some(bytes_per_sec) = plan.bandwidth {
            counters.injected(Toxic::bandwidth(bytes_per_sec));
        }
        if plan.fault.is_none() {
            counters.clean();
        }
        let upstream = self.upstream;
        let mut tasks = lock(&self.tasks);
        if tasks.closed {
            return;
        }
        // Finished connections' results, so that the set stays small.
        while tasks.set.try_join_next().is_some() {}
        tasks
            .set
            .spawn(async move { conn::serve(client, upstream, plan, &counters).await });
    }
}

/// A listener on `addr` that can take the same port again after
/// [`Proxy::refuse`], while connections it accepted are still open.
fn listen(addr: SocketAddr) -> Result<TcpListener, Error> {
    let listen = || {
        let socket = TcpSocket::new_v4()?;
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(1024)
    };
    listen().map_err(|source| Error::Listen { addr, source })
}

/// Locks `mutex`; a panic elsewhere while it was held leaves plain data.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
