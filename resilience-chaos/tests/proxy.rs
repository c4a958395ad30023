//! Every toxic, observed by a client over real loopback TCP against a tiny
//! HTTP/1.1 server that counts what it received.

use std::io::{self, ErrorKind};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use resilience_chaos::{Error, Proxy, Toxic, Toxics};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, timeout};

/// The body the server answers with.
const BODY_LEN: usize = 1000;

/// A tiny HTTP/1.1 server: answers every request with `BODY_LEN` bytes,
/// closes after it when the request says `Connection: close`, keeps the
/// connection otherwise.
#[derive(Clone)]
struct Server {
    addr: SocketAddr,
    /// Connections accepted.
    connections: Arc<AtomicUsize>,
    /// Requests read in full.
    requests: Arc<AtomicUsize>,
    /// Responses written in full.
    responses: Arc<AtomicUsize>,
    /// Connections the server saw closed by its peer.
    closed: Arc<AtomicUsize>,
}

impl Server {
    async fn start() -> Self {
        Self::start_with(true).await
    }

    /// `answer: false` makes a server that reads requests and never answers.
    async fn start_with(answer: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = Self {
            addr: listener.local_addr().unwrap(),
            connections: Arc::default(),
            requests: Arc::default(),
            responses: Arc::default(),
            closed: Arc::default(),
        };
        let shared = server.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                shared.connections.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(shared.clone().serve(stream, answer));
            }
        });
        server
    }

    async fn serve(self, mut stream: TcpStream, answer: bool) {
        let mut buf = Vec::new();
        loop {
            let mut chunk = [0; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => {
                    self.closed.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            while let Some(end) = find(&buf, b"\r\n\r\n") {
                let request: Vec<u8> = buf.drain(..end + 4).collect();
                self.requests.fetch_add(1, Ordering::SeqCst);
                if !answer {
                    continue;
                }
                let close = String::from_utf8_lossy(&request)
                    .to_ascii_lowercase()
                    .contains("connection: close");
                if stream.write_all(&response()).await.is_err() {
                    return;
                }
                self.responses.fetch_add(1, Ordering::SeqCst);
                if close {
                    return;
                }
            }
        }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    fn responses(&self) -> usize {
        self.responses.load(Ordering::SeqCst)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// What the server sends for each request.
fn response() -> Vec<u8> {
    let body: Vec<u8> = (0..BODY_LEN).map(|i| b'a' + (i % 26) as u8).collect();
    let mut response =
        format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY_LEN}\r\n\r\n").into_bytes();
    response.extend_from_slice(&body);
    response
}

const GET_CLOSE: &[u8] = b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n";
const GET_KEEP_ALIVE: &[u8] = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n";

/// What a client got: the bytes, and how the connection ended (`Ok` for an
/// EOF).
#[derive(Debug)]
struct Got {
    bytes: Vec<u8>,
    end: io::Result<()>,
}

impl Got {
    fn kind(&self) -> Option<ErrorKind> {
        self.end.as_ref().err().map(io::Error::kind)
    }
}

/// One request on a fresh connection, read until EOF or error.
async fn get(addr: SocketAddr, request: &[u8]) -> Got {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    read_all(&mut stream).await
}

async fn read_all(stream: &mut TcpStream) -> Got {
    let mut bytes = Vec::new();
    let mut chunk = [0; 4096];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) => return Got { bytes, end: Ok(()) },
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) => return Got { bytes, end: Err(e) },
        }
    }
}

/// Reads exactly one response (the fixed-size one) from a keep-alive
/// connection.
async fn read_response(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut bytes = vec![0; response().len()];
    stream.read_exact(&mut bytes).await?;
    Ok(bytes)
}

async fn proxy(server: &Server, toxic: Toxic) -> Proxy {
    Proxy::builder(server.addr)
        .seed(1)
        .toxic(toxic, 1.0)
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn without_toxics_the_proxy_forwards_requests_and_responses() {
    let server = Server::start().await;
    let proxy = Proxy::start(server.addr).await.unwrap();
    let got = get(proxy.addr(), GET_CLOSE).await;
    assert!(got.end.is_ok(), "{got:?}");
    assert_eq!(got.bytes, response());

    // Keep-alive: two requests on one connection.
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    for _ in 0..2 {
        stream.write_all(GET_KEEP_ALIVE).await.unwrap();
        assert_eq!(read_response(&mut stream).await.unwrap(), response());
    }
    assert_eq!(server.requests(), 3);
    let faults = proxy.faults();
    assert_eq!(
        (faults.connections, faults.clean, faults.total()),
        (2, 2, 0)
    );
}

#[tokio::test]
async fn latency_adds_at_least_its_delay() {
    let server = Server::start().await;
    let delay = Duration::from_millis(200);
    let proxy = proxy(&server, Toxic::latency(delay, Duration::from_millis(20))).await;
    let start = Instant::now();
    let got = get(proxy.addr(), GET_CLOSE).await;
    let elapsed = start.elapsed();
    assert_eq!(got.bytes, response());
    assert!(elapsed >= delay, "a round trip took {elapsed:?}");
    assert_eq!(proxy.faults().latency, 1);
}

#[tokio::test]
async fn bandwidth_limits_the_rate() {
    let server = Server::start().await;
    let proxy = proxy(&server, Toxic::bandwidth(2_000)).await;
    let start = Instant::now();
    let got = get(proxy.addr(), GET_CLOSE).await;
    let elapsed = start.elapsed();
    assert_eq!(got.bytes, response());
    // ~1040 bytes at 2000 B/s in 100-byte slices: the last leaves at ≥ 500 ms.
    assert!(elapsed >= Duration::from_millis(450), "took {elapsed:?}");
    assert_eq!(proxy.faults().bandwidth, 1);
}

#[tokio::test]
async fn blackhole_never_answers_and_never_forwards() {
    let server = Server::start().await;
    let proxy = proxy(&server, Toxic::blackhole()).await;
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    stream.write_all(GET_CLOSE).await.unwrap();
    let read = timeout(Duration::from_millis(300), stream.read(&mut [0; 16])).await;
    assert!(read.is_err(), "the client got {read:?}");
    assert_eq!((server.connections(), server.requests()), (0, 0));
    assert_eq!(proxy.faults().blackhole, 1);
}

#[tokio::test]
async fn refuse_closes_the_port_and_accept_reopens_the_same_one() {
    let server = Server::start().await;
    let proxy = Proxy::start(server.addr).await.unwrap();
    let addr = proxy.addr();
    let mut before = TcpStream::connect(addr).await.unwrap();
    // Accepted by the proxy once a response came back through it (one still
    // in the listener's backlog is reset by `refuse`).
    before.write_all(GET_KEEP_ALIVE).await.unwrap();
    assert_eq!(read_response(&mut before).await.unwrap(), response());

    proxy.refuse().await;
    let err = TcpStream::connect(addr).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
    // A connection accepted before goes on.
    before.write_all(GET_KEEP_ALIVE).await.unwrap();
    assert_eq!(read_response(&mut before).await.unwrap(), response());

    proxy.accept().await.unwrap();
    proxy.accept().await.unwrap(); // already listening: nothing happens
    assert_eq!(proxy.addr(), addr);
    assert_eq!(get(addr, GET_CLOSE).await.bytes, response());
    assert_eq!(server.requests(), 3);
}

#[tokio::test]
async fn reset_before_forward_resets_the_client_and_the_upstream_sees_nothing() {
    let server = Server::start().await;
    let proxy = proxy(&server, Toxic::reset_before_forward()).await;
    let got = get(proxy.addr(), GET_CLOSE).await;
    assert_eq!(got.kind(), Some(ErrorKind::ConnectionReset), "{got:?}");
    assert!(got.bytes.is_empty());
    assert_eq!((server.connections(), server.requests()), (0, 0));
    assert_eq!(proxy.faults().reset_before_forward, 1);
}

#[tokio::test]
async fn reset_before_response_resets_once_the_upstream_got_the_request() {
    let server = Server::start().await;
    let proxy = proxy(&server, Toxic::reset_before_response()).await;
    let got = get(proxy.addr(), GET_CLOSE).await;
    assert_eq!(got.kind(), Some(ErrorKind::ConnectionReset), "{got:?}");
    assert!(got.bytes.is_empty(), "no response byte reaches the client");
    assert_eq!(server.requests(), 1);
    assert_eq!(proxy.faults().reset_before_response, 1);
}

#[tokio::test]
async fn reset_before_response_waits_for_a_silent_upstream() {
    let server = Server::start_with(false).await;
    let wait = Duration::from_millis(100);
    let proxy = proxy(&server, Toxic::ResetBeforeResponse { wait }).await;
    let start = Instant::now();
    let got = get(proxy.addr(), GET_CLOSE).await;
    assert_eq!(got.kind(), Some(ErrorKind::ConnectionReset), "{got:?}");
    assert!(start.elapsed() >= wait);
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn reset_after_response_drops_a_response_the_upstream_sent_in_full() {
    let server = Server::start().await;
    let proxy = proxy(&server, Toxic::reset_after_response()).await;
    let got = get(proxy.addr(), GET_CLOSE).await;
    assert_eq!(got.kind(), Some(ErrorKind::ConnectionReset), "{got:?}");
    assert!(
        got.bytes.is_empty(),
        "the response must not reach the client"
    );
    assert_eq!((server.requests(), server.responses()), (1, 1));
    assert_eq!(proxy.faults().reset_after_response, 1);
}

#[tokio::test]
async fn reset_after_response_on_keep_alive_waits_for_the_upstream_to_go_quiet() {
    let server = Server::start().await;
    let quiet = Duration::from_millis(50);
    let proxy = proxy(&server, Toxic::ResetAfterResponse { quiet }).await;
    let start = Instant::now();
    let got = get(proxy.addr(), GET_KEEP_ALIVE).await;
    assert_eq!(got.kind(), Some(ErrorKind::ConnectionReset), "{got:?}");
    assert!(got.bytes.is_empty());
    assert!(start.elapsed() >= quiet);
    assert_eq!((server.requests(), server.responses()), (1, 1));
}

#[tokio::test]
async fn reset_mid_response_forwards_part_of_the_response_then_resets() {
    let server = Server::start().await;
    let proxy = proxy(&server, Toxic::reset_mid_response(100)).await;
    let got = get(proxy.addr(), GET_CLOSE).await;
    assert_eq!(got.kind(), Some(ErrorKind::ConnectionReset), "{got:?}");
    assert_eq!(got.bytes, response()[..100]);
    assert_eq!(server.requests(), 1);
    assert_eq!(proxy.faults().reset_mid_response, 1);
}

#[tokio::test]
async fn close_mid_body_forwards_part_of_the_body_then_a_clean_eof() {
    let server = Server::start().await;
    let proxy = proxy(&server, Toxic::close_mid_body(100)).await;
    let got = get(proxy.addr(), GET_CLOSE).await;
    assert!(got.end.is_ok(), "a FIN, not a reset: {got:?}");
    assert_eq!(got.bytes, response()[..100]);
    let headers = find(&got.bytes, b"\r\n\r\n").expect("the headers came whole") + 4;
    assert!(got.bytes.len() - headers < BODY_LEN, "the body is cut");
    assert_eq!(server.requests(), 1);
    assert_eq!(proxy.faults().close_mid_body, 1);
}

/// How a client saw one connection end, for the replay test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Whole,
    ResetEmpty,
    ResetPartial,
    EofPartial,
}

async fn outcomes(server: &Server, seed: u64, n: usize) -> (Vec<Outcome>, Proxy) {
    let proxy = Proxy::builder(server.addr)
        .seed(seed)
        .toxic(Toxic::reset_before_forward(), 0.2)
        .toxic(Toxic::reset_mid_response(100), 0.2)
        .toxic(Toxic::close_mid_body(100), 0.2)
        .start()
        .await
        .unwrap();
    let mut seen = Vec::with_capacity(n);
    for _ in 0..n {
        let got = get(proxy.addr(), GET_CLOSE).await;
        seen.push(match (&got.end, got.bytes.len()) {
            (Ok(()), len) if len == response().len() => Outcome::Whole,
            (Ok(()), 100) => Outcome::EofPartial,
            (Err(e), 0) if e.kind() == ErrorKind::ConnectionReset => Outcome::ResetEmpty,
            (Err(e), 100) if e.kind() == ErrorKind::ConnectionReset => Outcome::ResetPartial,
            _ => panic!("unexpected {got:?}"),
        });
    }
    (seen, proxy)
}

#[tokio::test]
async fn the_same_seed_replays_the_same_choices_and_the_counters_add_up() {
    let server = Server::start().await;
    let (first, proxy) = outcomes(&server, 7, 200).await;
    let (again, _) = outcomes(&server, 7, 200).await;
    let (other, _) = outcomes(&server, 8, 200).await;
    assert_eq!(first, again);
    assert_ne!(first, other, "another seed, other choices");

    let count = |o| first.iter().filter(|&&x| x == o).count() as u64;
    let faults = proxy.faults();
    assert_eq!(faults.connections, 200);
    assert_eq!(faults.clean + faults.total(), 200);
    assert_eq!(faults.clean, count(Outcome::Whole));
    assert_eq!(faults.reset_before_forward, count(Outcome::ResetEmpty));
    assert_eq!(faults.reset_mid_response, count(Outcome::ResetPartial));
    assert_eq!(faults.close_mid_body, count(Outcome::EofPartial));
    // Each kind at 20 %: 40 of 200 expected, all of them seen.
    for kind in [
        Outcome::Whole,
        Outcome::ResetEmpty,
        Outcome::ResetPartial,
        Outcome::EofPartial,
    ] {
        assert!(count(kind) >= 10, "{kind:?}: {}", count(kind));
    }
}

#[tokio::test]
async fn heal_stops_every_fault_and_set_brings_them_back() {
    let server = Server::start().await;
    let proxy = proxy(&server, Toxic::reset_before_forward()).await;
    assert_eq!(
        get(proxy.addr(), GET_CLOSE).await.kind(),
        Some(ErrorKind::ConnectionReset)
    );

    proxy.heal();
    for _ in 0..20 {
        let got = get(proxy.addr(), GET_CLOSE).await;
        assert_eq!(got.bytes, response(), "{got:?}");
    }
    assert_eq!(proxy.faults().total(), 1);

    proxy
        .set(Toxics::new().toxic(Toxic::reset_before_forward(), 1.0))
        .unwrap();
    assert_eq!(
        get(proxy.addr(), GET_CLOSE).await.kind(),
        Some(ErrorKind::ConnectionReset)
    );
    assert_eq!(proxy.faults().reset_before_forward, 2);
}

#[tokio::test]
async fn dropping_the_proxy_frees_the_port_and_ends_its_connections() {
    let server = Server::start().await;
    let proxy = Proxy::start(server.addr).await.unwrap();
    let addr = proxy.addr();
    // One connection through the proxy, idle on keep-alive.
    let mut client = TcpStream::connect(addr).await.unwrap();
    client.write_all(GET_KEEP_ALIVE).await.unwrap();
    read_response(&mut client).await.unwrap();
    assert_eq!(server.closed.load(Ordering::SeqCst), 0);

    drop(proxy);
    // The connection task ends: the client sees its connection closed…
    let got = timeout(Duration::from_secs(5), read_all(&mut client))
        .await
        .expect("the connection outlived the proxy");
    assert!(got.bytes.is_empty());
    // …and so does the upstream.
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.closed.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the upstream connection outlived the proxy"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The port is free.
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Err(e) = TcpListener::bind(addr).await {
        assert!(Instant::now() < deadline, "the port is still taken: {e}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn shutdown_frees_the_port_when_it_returns() {
    let server = Server::start().await;
    let proxy = Proxy::start(server.addr).await.unwrap();
    let addr = proxy.addr();
    let _idle = TcpStream::connect(addr).await.unwrap();
    proxy.shutdown().await;
    TcpListener::bind(addr).await.unwrap();
}

#[tokio::test]
async fn an_unreachable_upstream_resets_the_client() {
    let unused = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = unused.local_addr().unwrap();
    drop(unused);
    let proxy = Proxy::start(upstream).await.unwrap();
    let got = get(proxy.addr(), GET_CLOSE).await;
    assert_eq!(got.kind(), Some(ErrorKind::ConnectionReset), "{got:?}");
    assert_eq!(proxy.faults().upstream_errors, 1);
}

#[tokio::test]
async fn invalid_toxics_are_refused_with_the_value_at_fault() {
    let upstream: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let start = |toxics: Toxics| Proxy::builder(upstream).toxics(toxics).start();

    let err = start(Toxics::new().toxic(Toxic::blackhole(), 1.5))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "probability of `blackhole` must be within 0..=1, got 1.5"
    );
    let err = start(Toxics::new().toxic(Toxic::blackhole(), f64::NAN))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Probability {
                toxic: "blackhole",
                ..
            }
        ),
        "{err}"
    );

    let err = start(
        Toxics::new()
            .toxic(
                Toxic::latency(Duration::from_millis(1), Duration::ZERO),
                1.0,
            )
            .toxic(Toxic::reset_after_response(), 0.7)
            .toxic(Toxic::close_mid_body(10), 0.4),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the probabilities of the faulting toxics add up to 1.1 (reset_after_response = 0.7, \
         close_mid_body = 0.4), more than 1: at most one of them applies to a connection"
    );

    let err = start(
        Toxics::new()
            .toxic(Toxic::close_mid_body(10), 0.1)
            .toxic(Toxic::close_mid_body(20), 0.1),
    )
    .await
    .unwrap_err();
    assert_eq!(err.to_string(), "`close_mid_body` specified more than once");

    let err = start(Toxics::new().toxic(
        Toxic::ResetAfterResponse {
            quiet: Duration::ZERO,
        },
        0.1,
    ))
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "`reset_after_response.quiet` must be more than zero, got 0ns"
    );

    // Probabilities that add up to exactly 1, and shaping toxics that do
    // not count in the sum, are fine.
    let proxy = start(
        Toxics::new()
            .toxic(Toxic::bandwidth(1), 1.0)
            .toxic(Toxic::reset_before_forward(), 0.3)
            .toxic(Toxic::blackhole(), 0.7),
    )
    .await
    .unwrap();
    // A refused `set` keeps the current toxics.
    let before = proxy.toxics();
    assert!(
        proxy
            .set(Toxics::new().toxic(Toxic::blackhole(), -1.0))
            .is_err()
    );
    assert_eq!(proxy.toxics(), before);
}

#[tokio::test]
async fn reset_after_response_to_spares_the_connection_until_its_request_then_drops_the_answer() {
    let server = Server::start().await;
    let proxy = proxy(&server, Toxic::reset_after_response_to(b"/commit")).await;
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    // Two requests before the one the toxic waits for go through.
    for _ in 0..2 {
        stream.write_all(GET_KEEP_ALIVE).await.unwrap();
        assert_eq!(read_response(&mut stream).await.unwrap(), response());
    }
    // The trigger split across two writes still matches.
    stream.write_all(b"POST /com").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    stream
        .write_all(b"mit HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let got = read_all(&mut stream).await;
    assert_eq!(got.kind(), Some(ErrorKind::ConnectionReset), "{got:?}");
    assert!(got.bytes.is_empty(), "the answer must not reach the client");
    // The server read and answered all three: the last one was applied.
    assert_eq!((server.requests(), server.responses()), (3, 3));
    assert_eq!(server.connections(), 1);
    assert_eq!(proxy.faults().reset_after_response_to, 1);
    assert_eq!(proxy.faults().total(), 1);
}

#[tokio::test]
async fn reset_after_response_to_an_empty_request_is_refused() {
    let err = Proxy::builder("127.0.0.1:1".parse().unwrap())
        .toxic(Toxic::reset_after_response_to(b""), 1.0)
        .start()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Parameter {
                field: "request",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("reset_after_response_to"), "{err}");
}
