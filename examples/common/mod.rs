//! A real HTTP server on `127.0.0.1` that plays scripted faults, for the
//! examples and the HTTP tests.
//!
//! Include it from an example with `mod common;` and from a test with
//! `#[path = "../examples/common/mod.rs"] mod common;`.
//!
//! - Every route answers from its own script, one [`Reply`] per request, then
//!   from its steady reply ([`FaultServer::always`], `200` by default).
//! - `POST /payments` is an idempotent endpoint (SPEC §3): it rejects a
//!   request without `Idempotency-Key` with `400 missing_idempotency_key`,
//!   stores the response of the first request per key and replays it to later
//!   ones with `X-Idempotency-Replay: true`.
//! - Every request is logged ([`FaultServer::requests`]) with its method,
//!   path, `Idempotency-Key` and arrival time on tokio's clock, so a test
//!   under a paused clock can assert the pauses between attempts.
//!
//! The server runs as a task of the caller's runtime: under
//! `#[tokio::test(start_paused = true)]` it shares the paused clock, which
//! tokio advances whenever both sides are idle.
#![allow(dead_code, unreachable_pub)] // each example or test uses a part

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The path of the idempotent payment endpoint.
pub const PAYMENTS: &str = "/payments";

/// What the server does with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The route's normal answer: `200` with its body (for `POST
    /// /payments`, the payment is created or replayed).
    Ok,
    /// Answers with this status and a short body, without doing the work.
    Status(u16),
    /// Answers with this status and `Retry-After: <secs>`.
    RetryAfter(u16, u64),
    /// Does the work, sends the headers and half the body, then drops the
    /// connection: the client sees the response start and the body break.
    DropMidBody,
    /// Waits this long on tokio's clock, then answers as [`Reply::Ok`].
    Slow(Duration),
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Ok => f.write_str("200"),
            Reply::Status(code) => write!(f, "{code}"),
            Reply::RetryAfter(code, secs) => write!(f, "{code} Retry-After: {secs}"),
            Reply::DropMidBody => f.write_str("dropped mid-body"),
            Reply::Slow(delay) => write!(f, "200 after {delay:?}"),
        }
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Logged {
    /// `GET`, `POST`…
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    /// The `Idempotency-Key` header, if any.
    pub idempotency_key: Option<String>,
    /// The request body.
    pub body: Bytes,
    /// When the request arrived, on tokio's clock.
    pub at: Instant,
    /// What the server answered.
    pub reply: Reply,
    /// `true` when the answer was a stored response replayed for a key.
    pub replayed: bool,
}

#[derive(Debug, Default)]
struct Route {
    script: VecDeque<Reply>,
    steady: Option<Reply>,
    body: Option<String>,
}

#[derive(Debug, Default)]
struct Inner {
    routes: HashMap<String, Route>,
    log: Vec<Logged>,
    /// Idempotency-Key → the stored body of the first response.
    payments: HashMap<String, String>,
}

/// The server: dropped, it stops.
#[derive(Debug)]
pub struct FaultServer {
    addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    task: JoinHandle<()>,
}

impl FaultServer {
    /// Binds `127.0.0.1` on an ephemeral port and starts serving on the
    /// current tokio runtime.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Mutex::new(Inner::default()));
        let app = Router::new().fallback(handle).with_state(inner.clone());
        let task = tokio::spawn(async move {
            // Ends only when the task is aborted, on drop.
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, inner, task })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Appends `replies` to the script of `path`: the next requests to it
    /// get them in order, then the steady reply.
    pub fn script(&self, path: &str, replies: impl IntoIterator<Item = Reply>) {
        self.lock()
            .routes
            .entry(path.to_owned())
            .or_default()
            .script
            .extend(replies);
    }

    /// Appends `statuses` to the script of `path`; `200` is [`Reply::Ok`].
    pub fn script_statuses(&self, path: &str, statuses: &[u16]) {
        self.script(
            path,
            statuses.iter().map(|&code| match code {
                200 => Reply::Ok,
                code => Reply::Status(code),
            }),
        );
    }

    /// The reply of `path` once its script is used up (e.g. `503` while the
    /// dependency is "down", then [`Reply::Ok`] when it recovers).
    pub fn always(&self, path: &str, reply: Reply) {
        self.lock()
            .routes
            .entry(path.to_owned())
            .or_default()
            .steady = Some(reply);
    }

    /// The body of a `200` from `path` (default: `ok <path>`).
    pub fn body(&self, path: &str, body: impl Into<String>) {
        self.lock().routes.entry(path.to_owned()).or_default().body = Some(body.into());
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Logged> {
        self.lock().log.clone()
    }

    /// The requests so far to `path`.
    pub fn requests_to(&self, path: &str) -> Vec<Logged> {
        self.lock()
            .log
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    /// How many payments `POST /payments` actually created.
    pub fn payments_created(&self) -> usize {
        self.lock().payments.len()
    }

    /// Forgets the log, the scripts and the payments; the port stays.
    pub fn reset(&self) {
        *self.lock() = Inner::default();
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }
}

impl Drop for FaultServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // A panicking test thread must not hide the log from the others.
    inner
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn handle(
    State(inner): State<Arc<Mutex<Inner>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let at = Instant::now();
    // Logged on arrival: a request the client gives up on (an attempt
    // timeout) is dropped by hyper before it is answered.
    let (reply, ok_body, index) = {
        let mut inner = lock(&inner);
        let route = inner.routes.entry(path.clone()).or_default();
        let reply = route
            .script
            .pop_front()
            .or_else(|| route.steady.clone())
            .unwrap_or(Reply::Ok);
        let ok_body = route.body.clone().unwrap_or_else(|| format!("ok {path}"));
        inner.log.push(Logged {
            method: method.clone(),
            path: path.clone(),
            idempotency_key: key.clone(),
            body,
            at,
            reply: reply.clone(),
            replayed: false,
        });
        (reply, ok_body, inner.log.len() - 1)
    };

    if let Reply::Slow(delay) = reply {
        tokio::time::sleep(delay).await;
    }
    let mut replayed = false;
    let response = match &reply {
        Reply::Status(code) => status(*code, format!("scripted {code}")),
        Reply::RetryAfter(code, secs) => {
            let mut response = status(*code, format!("scripted {code}, retry after {secs}s"));
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(*secs));
            response
        }
        Reply::Ok | Reply::Slow(_) | Reply::DropMidBody => {
            let (code, text) = if method == Method::POST && path == PAYMENTS {
                match &key {
                    None => (400, "missing_idempotency_key".to_owned()),
                    Some(key) => {
                        let mut inner = lock(&inner);
                        let next_id = inner.payments.len() + 1;
                        match inner.payments.get(key) {
                            Some(stored) => {
                                replayed = true;
                                (201, stored.clone())
                            }
                            None => {
                                let created = format!("payment {next_id} created");
                                inner.payments.insert(key.clone(), created.clone());
                                (201, created)
                            }
                        }
                    }
                }
            } else {
                (200, ok_body)
            };
            let mut response = if reply == Reply::DropMidBody {
                drop_mid_body(code, text)
            } else {
                status(code, text)
            };
            if replayed {
                response
                    .headers_mut()
                    .insert("x-idempotency-replay", HeaderValue::from_static("true"));
            }
            response
        }
    };
    if replayed {
        if let Some(logged) = lock(&inner).log.get_mut(index) {
            logged.replayed = true;
        }
    }
    response
}

fn status(code: u16, text: String) -> Response {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
}

/// A response that announces the full length, sends the headers and half of
/// the body, then fails the stream: hyper aborts the connection.
fn drop_mid_body(code: u16, text: String) -> Response {
    let full = Bytes::from(text);
    let half = full.slice(..full.len() / 2);
    let chunks = futures_util::stream::unfold(Some(half), |half| async move {
        match half {
            Some(half) => Some((Ok(half), None)),
            None => {
                // Pending once, so that hyper flushes the headers and the
                // first half before the connection goes.
                tokio::time::sleep(Duration::from_millis(5)).await;
                let err = std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "scripted: connection dropped mid-body",
                );
                Some((Err(err), None))
            }
        }
    });
    let mut response = Response::new(Body::from_stream(chunks));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(full.len()));
    response
}
