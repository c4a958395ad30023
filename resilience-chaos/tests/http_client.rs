//! What a real HTTP/1.1 client (reqwest, a fresh connection per request)
//! makes of each toxic: every failure is told apart from the others.

use std::error::Error as _;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use resilience_chaos::{Proxy, Toxic};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const BODY: &[u8] = &[b'x'; 1000];

/// An HTTP/1.1 server answering `BODY` to every request, keeping
/// connections alive; returns its address and its count of requests.
async fn server() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&requests);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0; 4096];
                while let Ok(n @ 1..) = stream.read(&mut chunk).await {
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        count.fetch_add(1, Ordering::SeqCst);
                        let head =
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", BODY.len());
                        if stream.write_all(head.as_bytes()).await.is_err()
                            || stream.write_all(BODY).await.is_err()
                        {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, requests)
}

/// How the client saw one request end.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// The whole body.
    Ok,
    /// No connection.
    Connect,
    /// The client's own timeout.
    Timeout,
    /// A reset before any response.
    ResetBeforeHeaders,
    /// The headers, then a reset in the body.
    ResetInBody,
    /// The headers, then the body cut by a clean close.
    TruncatedBody,
}

async fn call(addr: SocketAddr) -> Seen {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let response = match client.get(format!("http://{addr}/")).send().await {
        Ok(response) => response,
        Err(e) if e.is_connect() => return Seen::Connect,
        Err(e) if e.is_timeout() => return Seen::Timeout,
        Err(e) if io_kind(&e) == Some(ErrorKind::ConnectionReset) => {
            return Seen::ResetBeforeHeaders;
        }
        Err(e) => panic!("unexpected error before the headers: {e:?}"),
    };
    assert_eq!(response.status(), 200);
    match response.bytes().await {
        Ok(body) => {
            assert_eq!(&body[..], BODY);
            Seen::Ok
        }
        Err(e) if io_kind(&e) == Some(ErrorKind::ConnectionReset) => Seen::ResetInBody,
        Err(e) if e.is_body() || e.is_decode() => Seen::TruncatedBody,
        Err(e) => panic!("unexpected error in the body: {e:?}"),
    }
}

/// The kind of the I/O error at the root of `error`, if any.
fn io_kind(error: &reqwest::Error) -> Option<ErrorKind> {
    let mut source = error.source();
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        source = e.source();
    }
    None
}

#[tokio::test]
async fn each_toxic_is_a_distinct_failure_for_an_http_client() {
    let (upstream, requests) = server().await;
    let proxy = Proxy::start(upstream).await.unwrap();
    assert_eq!(call(proxy.addr()).await, Seen::Ok);

    // (toxic, what the client sees, whether the request reached the server)
    let cases = [
        (Toxic::blackhole(), Seen::Timeout, false),
        (
            Toxic::reset_before_forward(),
            Seen::ResetBeforeHeaders,
            false,
        ),
        (
            Toxic::reset_before_response(),
            Seen::ResetBeforeHeaders,
            true,
        ),
        (
            Toxic::reset_after_response(),
            Seen::ResetBeforeHeaders,
            true,
        ),
        (Toxic::reset_mid_response(100), Seen::ResetInBody, true),
        (Toxic::close_mid_body(100), Seen::TruncatedBody, true),
    ];
    for (toxic, expected, reached) in cases {
        proxy
            .set(resilience_chaos::Toxics::new().toxic(toxic, 1.0))
            .unwrap();
        let before = requests.load(Ordering::SeqCst);
        assert_eq!(call(proxy.addr()).await, expected, "{toxic:?}");
        let after = requests.load(Ordering::SeqCst);
        assert_eq!(
            after - before,
            usize::from(reached),
            "{toxic:?}: requests the server got"
        );
        assert_eq!(proxy.faults().of(toxic), 1, "{toxic:?}");
    }

    proxy.heal();
    proxy.refuse().await;
    assert_eq!(call(proxy.addr()).await, Seen::Connect);
    proxy.accept().await.unwrap();
    assert_eq!(call(proxy.addr()).await, Seen::Ok);
}
