//! A real HTTP server on `127.0.0.1` that plays scripted faults, for the
//! examples and the HTTP tests.
//!
//! Include it from an example with `mod common;` and from a test with
//! `#[path = "../examples/common/mod.rs"] mod common;`.
//!
//! - Every route answers from its own script, one [`Reply`] per request, then
//!   from its steady reply ([`FaultServer::always`], `200` by default).
//! - `POST /payments` creates a payment behind the library's own
//!   server-side idempotency layer
//!   ([`IdempotencyLayer`](resilience::idempotency::server::IdempotencyLayer),
//!   see `resilience::guide`): a request without `Idempotency-Key` gets
//!   `400 missing_idempotency_key`, the first response per key is stored and
//!   replayed to later requests with `X-Idempotency-Replay: true`.
//! - Faults are played outside that layer, as the network would: a scripted
//!   status answers before the payment handler runs; [`Reply::DropMidBody`]
//!   lets the handler run and its response be stored, then cuts the
//!   connection in the middle of the body.
//! - Every request is logged ([`FaultServer::requests`]) on arrival with its
//!   method, path, `Idempotency-Key`, body and arrival time on tokio's
//!   clock, so a test under a paused clock can assert the pauses between
//!   attempts.
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
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::post;
use resilience::idempotency::server::{IdempotencyLayer, MemoryStore, Scope};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The path of the idempotent payment endpoint.
pub const PAYMENTS: &str = "/payments";

/// The largest request body the server reads.
const MAX_BODY: usize = 1024 * 1024;

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
    /// The key the `Idempotency-Key` header carries, if any: read as the
    /// idempotency layer reads it (the draft's quoted form and a bare key
    /// alike), or the header's text when it is no valid key.
    pub idempotency_key: Option<String>,
    /// The `Idempotency-Key` header as sent, quotes and all.
    pub idempotency_header: Option<String>,
    /// The request body.
    pub body: Bytes,
    /// When the request arrived, on tokio's clock.
    pub at: Instant,
    /// What the script said to do with it.
    pub reply: Reply,
    /// `true` when the answer was a stored response replayed for its key.
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
    /// Payments the handler created (a replay creates none).
    payments: usize,
}

type Shared = Arc<Mutex<Inner>>;

/// The server: dropped, it stops.
#[derive(Debug)]
pub struct FaultServer {
    addr: SocketAddr,
    inner: Shared,
    task: JoinHandle<()>,
}

impl FaultServer {
    /// Binds `127.0.0.1` on an ephemeral port and starts serving on the
    /// current tokio runtime.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let inner = Shared::default();
        let app = Router::new()
            .route(
                PAYMENTS,
                post(create_payment)
                    // Each caller's keys are its own: scoped by the principal
                    // `authenticate` found (layers added later run first).
                    .layer(IdempotencyLayer::new(
                        MemoryStore::default(),
                        Scope::from_fn(|request| {
                            request.extensions.get::<Caller>().map(|c| c.0.clone())
                        }),
                    ))
                    .layer(axum::middleware::from_fn(authenticate)),
            )
            .fallback(serve_route)
            .layer(axum::middleware::from_fn_with_state(inner.clone(), play))
            .with_state(inner.clone());
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
        self.lock().payments
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

/// The outermost layer: logs the request, then plays the route's script
/// around the rest of the app.
async fn play(State(inner): State<Shared>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY).await else {
        return status(413, "request body too large".to_owned());
    };
    let path = parts.uri.path().to_owned();
    // Logged on arrival: a request the client gives up on (an attempt
    // timeout) is dropped by hyper before it is answered.
    let (reply, index) = {
        let mut inner = lock(&inner);
        let route = inner.routes.entry(path.clone()).or_default();
        let reply = route
            .script
            .pop_front()
            .or_else(|| route.steady.clone())
            .unwrap_or(Reply::Ok);
        inner.log.push(Logged {
            method: parts.method.clone(),
            path,
            idempotency_key: parts
                .headers
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .map(|text| {
                    resilience::IdempotencyKey::from_header(text)
                        .map_or_else(|_| text.to_owned(), |key| key.as_str().to_owned())
                }),
            idempotency_header: parts
                .headers
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            body: body.clone(),
            at: Instant::now(),
            reply: reply.clone(),
            replayed: false,
        });
        (reply, inner.log.len() - 1)
    };

    let request = Request::from_parts(parts, Body::from(body));
    let response = match &reply {
        Reply::Status(code) => return status(*code, format!("scripted {code}")),
        Reply::RetryAfter(code, secs) => {
            let mut response = status(*code, format!("scripted {code}, retry after {secs}s"));
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(*secs));
            return response;
        }
        Reply::Slow(delay) => {
            tokio::time::sleep(*delay).await;
            next.run(request).await
        }
        Reply::Ok | Reply::DropMidBody => next.run(request).await,
    };
    if response.headers().contains_key("x-idempotency-replay")
        && let Some(logged) = lock(&inner).log.get_mut(index)
    {
        logged.replayed = true;
    }
    if reply == Reply::DropMidBody {
        drop_mid_body(response).await
    } else {
        response
    }
}

/// Every route but the payments: `200` with the route's body.
async fn serve_route(State(inner): State<Shared>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    let body = lock(&inner)
        .routes
        .get(&path)
        .and_then(|route| route.body.clone())
        .unwrap_or_else(|| format!("ok {path}"));
    status(200, body)
}

/// Runs once per new `Idempotency-Key`: the idempotency layer in front of
/// it answers the repeats.
/// The authenticated principal, as an authentication layer would put it in
/// a request's extensions.
#[derive(Debug, Clone)]
struct Caller(String);

/// The demo's stand-in for authentication: the caller is named by its
/// `Authorization` header; the demo's clients send none and are all one
/// caller, `demo`. A real service refuses an unauthenticated request here.
async fn authenticate(mut request: Request, next: Next) -> Response {
    let caller = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("demo")
        .to_owned();
    request.extensions_mut().insert(Caller(caller));
    next.run(request).await
}

async fn create_payment(State(inner): State<Shared>) -> Response {
    let id = {
        let mut inner = lock(&inner);
        inner.payments += 1;
        inner.payments
    };
    status(201, format!("payment {id} created"))
}

fn status(code: u16, text: String) -> Response {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
}

/// The same response with its full length announced, but only the headers
/// and half of the body sent before the stream fails: hyper aborts the
/// connection.
async fn drop_mid_body(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let full = axum::body::to_bytes(body, MAX_BODY)
        .await
        .unwrap_or_default();
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
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(full.len()));
    Response::from_parts(parts, Body::from_stream(chunks))
}
