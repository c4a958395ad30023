//! An HTTP/1.1-aware fault: a front that answers some requests itself
//! (a `503 SlowDown`, a `500`) and forwards the others to the real server,
//! counting both.

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::Error;

/// The longest request head (request line and headers) the front reads.
const MAX_HEAD: usize = 64 * 1024;

/// A response the [`HttpProxy`] sends in the server's place.
///
/// ```
/// use resilience_chaos::HttpReply;
///
/// let reply = HttpReply::s3_error(503, "SlowDown", "Please reduce your request rate.");
/// assert_eq!(reply.status(), 503);
/// assert!(String::from_utf8_lossy(reply.body()).contains("<Code>SlowDown</Code>"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpReply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl HttpReply {
    /// A response with `status` and `body`, and no header but the
    /// `Content-Length` the front adds.
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// The same response with one more header.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// An S3 error as S3 sends it: `status`, an XML body with `code` and
    /// `message`, `Content-Type: application/xml`.
    pub fn s3_error(status: u16, code: &str, message: &str) -> Self {
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message><RequestId>resilience-chaos</RequestId></Error>"
        );
        Self::new(status, body).header("Content-Type", "application/xml")
    }

    /// S3's throttling answer: `503 SlowDown`, "Please reduce your request
    /// rate."
    pub fn s3_slow_down() -> Self {
        Self::s3_error(503, "SlowDown", "Please reduce your request rate.")
    }

    /// The status code.
    pub const fn status(&self) -> u16 {
        self.status
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status)).into_bytes();
        for (name, value) in &self.headers {
            out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", self.body.len()).as_bytes());
        out.extend_from_slice(&self.body);
        out
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        408 => "Request Timeout",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Fault",
    }
}

/// Which requests the front answers itself.
#[derive(Debug)]
struct Rules {
    /// Answer the next `n` requests with this reply.
    first: Option<(u64, HttpReply)>,
    /// Then answer each request with this probability.
    ratio: Option<(f64, HttpReply)>,
    rng: StdRng,
}

impl Rules {
    fn reply_for_next(&mut self) -> Option<HttpReply> {
        if let Some((left, reply)) = &mut self.first
            && *left > 0
        {
            *left -= 1;
            return Some(reply.clone());
        }
        match &self.ratio {
            Some((p, reply)) if self.rng.random_bool(*p) => Some(reply.clone()),
            _ => None,
        }
    }
}

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    rules: Mutex<Rules>,
    received: AtomicU64,
    forwarded: AtomicU64,
    answered: AtomicU64,
    tasks: Mutex<JoinSet<()>>,
}

/// An HTTP/1.1 front on `127.0.0.1` that answers chosen requests itself and
/// forwards the others to a real server: a server that throttles
/// (`503 SlowDown`) or fails (`500`) on cue, while every request that
/// counts reaches the real one.
///
/// It reads each request whole (head, and a body framed by
/// `Content-Length` or chunked), so that it can count requests on a
/// keep-alive connection and answer one without the server seeing it; the
/// responses it forwards are passed on byte for byte. For resets, latency
/// and blackholes, put a [`Proxy`](crate::Proxy) in front of it or behind
/// it.
///
/// ```no_run
/// use resilience_chaos::{HttpProxy, HttpReply};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let s3 = "127.0.0.1:9000".parse()?;
/// let front = HttpProxy::builder(s3)                       // the real server
///     .answer_first(2, HttpReply::s3_slow_down())          // two 503 SlowDown
///     .start()
///     .await?;
/// let endpoint = format!("http://{}", front.addr());      // give this to the client
/// // … the call …
/// assert_eq!(front.answered(), 2);
/// assert_eq!(front.forwarded(), 1);                       // what S3 saw
/// # Ok(()) }
/// ```
pub struct HttpProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accepting: JoinHandle<()>,
}

/// Configures an [`HttpProxy`] before it starts ([`HttpProxy::builder`]).
#[derive(Debug)]
#[must_use = "a builder does nothing until `start` is awaited"]
pub struct HttpBuilder {
    upstream: SocketAddr,
    first: Option<(u64, HttpReply)>,
    ratio: Option<(f64, HttpReply)>,
    seed: u64,
}

impl HttpBuilder {
    /// Answer the first `n` requests with `reply`, without forwarding them.
    pub fn answer_first(mut self, n: u64, reply: HttpReply) -> Self {
        self.first = Some((n, reply));
        self
    }

    /// Answer each request (after the first `n`, if set) with `reply` with
    /// probability `p`, drawn from a generator seeded by
    /// [`seed`](Self::seed).
    pub fn answer_ratio(mut self, p: f64, reply: HttpReply) -> Self {
        self.ratio = Some((p, reply));
        self
    }

    /// The seed of the generator behind [`answer_ratio`](Self::answer_ratio)
    /// (0 unless set).
    pub const fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Starts listening on a port the system chooses.
    ///
    /// # Errors
    ///
    /// [`Error::Probability`] for a ratio outside `0..=1`,
    /// [`Error::Listen`] when no port can be opened, [`Error::NoRuntime`]
    /// outside a Tokio runtime.
    pub async fn start(self) -> Result<HttpProxy, Error> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime);
        }
        if let Some((p, _)) = &self.ratio
            && !(0.0..=1.0).contains(p)
        {
            return Err(Error::Probability {
                toxic: "http_reply",
                value: *p,
            });
        }
        let local = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let listener = TcpListener::bind(local)
            .await
            .map_err(|source| Error::Listen {
                addr: local,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Listen {
            addr: local,
            source,
        })?;
        let shared = Arc::new(Shared {
            upstream: self.upstream,
            rules: Mutex::new(Rules {
                first: self.first,
                ratio: self.ratio,
                rng: StdRng::seed_from_u64(self.seed),
            }),
            received: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            tasks: Mutex::new(JoinSet::new()),
        });
        let accepting = tokio::spawn(accept(listener, Arc::clone(&shared)));
        Ok(HttpProxy {
            addr,
            shared,
            accepting,
        })
    }
}

impl HttpProxy {
    /// A builder for a front to `upstream`, answering nothing itself until
    /// told.
    pub fn builder(upstream: SocketAddr) -> HttpBuilder {
        HttpBuilder {
            upstream,
            first: None,
            ratio: None,
            seed: 0,
        }
    }

    /// The address the front listens on, to give the client.
    pub const fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Answer the next `n` requests with `reply` (in place of what was left
    /// of [`HttpBuilder::answer_first`]).
    pub fn answer_next(&self, n: u64, reply: HttpReply) {
        self.rules().first = Some((n, reply));
    }

    /// Forward every request from now on.
    pub fn heal(&self) {
        let mut rules = self.rules();
        rules.first = None;
        rules.ratio = None;
    }

    /// The requests the front read whole: every request the client sent.
    pub fn received(&self) -> u64 {
        self.shared.received.load(Ordering::SeqCst)
    }

    /// The requests forwarded to the server whole: what it saw.
    pub fn forwarded(&self) -> u64 {
        self.shared.forwarded.load(Ordering::SeqCst)
    }

    /// The requests the front answered itself.
    pub fn answered(&self) -> u64 {
        self.shared.answered.load(Ordering::SeqCst)
    }

    fn rules(&self) -> std::sync::MutexGuard<'_, Rules> {
        self.shared
            .rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for HttpProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("received", &self.received())
            .field("forwarded", &self.forwarded())
            .field("answered", &self.answered())
            .finish()
    }
}

impl Drop for HttpProxy {
    fn drop(&mut self) {
        self.accepting.abort();
        self.shared
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .abort_all();
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    while let Ok((client, _)) = listener.accept().await {
        let _ = client.set_nodelay(true);
        let conn = serve(client, Arc::clone(&shared));
        let mut tasks = shared.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        while tasks.try_join_next().is_some() {}
        tasks.spawn(conn);
    }
}

/// One client connection: each request answered here or forwarded, on one
/// upstream connection opened at the first forwarded request.
async fn serve(client: TcpStream, shared: Arc<Shared>) {
    let (read, write) = client.into_split();
    let mut reader = BufReader::new(read);
    let write = Arc::new(tokio::sync::Mutex::new(write));
    let mut upstream: Option<(OwnedWriteHalf, JoinHandle<()>)> = None;
    loop {
        let request = match read_request(&mut reader).await {
            Ok(Some(request)) => request,
            Ok(None) | Err(_) => break,
        };
        shared.received.fetch_add(1, Ordering::SeqCst);
        let reply = shared
            .rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .reply_for_next();
        if let Some(reply) = reply {
            shared.answered.fetch_add(1, Ordering::SeqCst);
            if write
                .lock()
                .await
                .write_all(&reply.to_bytes())
                .await
                .is_err()
            {
                break;
            }
            continue;
        }
        if upstream
            .as_ref()
            .is_some_and(|(_, relay)| relay.is_finished())
        {
            upstream = None;
        }
        if upstream.is_none() {
            let Ok(server) = TcpStream::connect(shared.upstream).await else {
                break;
            };
            let _ = server.set_nodelay(true);
            let (from_server, to_server) = server.into_split();
            let relay = tokio::spawn(relay(from_server, Arc::clone(&write)));
            upstream = Some((to_server, relay));
        }
        let Some((to_server, _)) = upstream.as_mut() else {
            break;
        };
        if to_server.write_all(&request).await.is_err() {
            break;
        }
        shared.forwarded.fetch_add(1, Ordering::SeqCst);
    }
    if let Some((_, relay)) = upstream {
        relay.abort();
    }
    let _ = write.lock().await.shutdown().await;
}

/// The server's bytes to the client until the server closes.
async fn relay(mut from_server: OwnedReadHalf, to_client: Arc<tokio::sync::Mutex<OwnedWriteHalf>>) {
    let mut buf = vec![0; 16 * 1024];
    loop {
        match from_server.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to_client.lock().await.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = to_client.lock().await.shutdown().await;
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// One whole request's bytes, or `None` at a clean end of the connection.
async fn read_request(reader: &mut BufReader<OwnedReadHalf>) -> io::Result<Option<Vec<u8>>> {
    let mut raw = Vec::new();
    let mut content_length = 0usize;
    let mut chunked = false;
    loop {
        let start = raw.len();
        if reader.read_until(b'\n', &mut raw).await? == 0 {
            return if raw.is_empty() {
                Ok(None)
            } else {
                Err(invalid("connection closed mid-head"))
            };
        }
        if raw.len() > MAX_HEAD {
            return Err(invalid("request head too long"));
        }
        let line = String::from_utf8_lossy(&raw[start..]).trim_end().to_owned();
        if line.is_empty() {
            if start == 0 {
                // A stray empty line between requests.
                raw.clear();
                continue;
            }
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                content_length = value.parse().map_err(|_| invalid("bad Content-Length"))?;
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().contains("chunked");
            }
        }
    }
    if chunked {
        loop {
            let start = raw.len();
            if reader.read_until(b'\n', &mut raw).await? == 0 {
                return Err(invalid("connection closed mid-body"));
            }
            let size_line = String::from_utf8_lossy(&raw[start..]).trim().to_owned();
            let size_hex = size_line.split(';').next().unwrap_or_default();
            let size =
                usize::from_str_radix(size_hex, 16).map_err(|_| invalid("bad chunk size"))?;
            if size == 0 {
                // Trailers, then the empty line.
                loop {
                    let start = raw.len();
                    if reader.read_until(b'\n', &mut raw).await? == 0 {
                        return Err(invalid("connection closed in trailers"));
                    }
                    if raw[start..].iter().all(|b| b.is_ascii_whitespace()) {
                        return Ok(Some(raw));
                    }
                }
            }
            let start = raw.len();
            raw.resize(start + size + 2, 0);
            reader.read_exact(&mut raw[start..]).await?;
        }
    }
    let start = raw.len();
    raw.resize(start + content_length, 0);
    reader.read_exact(&mut raw[start..]).await?;
    Ok(Some(raw))
}
