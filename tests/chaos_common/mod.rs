//! What the chaos suite's scenarios share (`RELIABILITY.md`): a
//! payment server behind the idempotency layer that counts every effect it
//! applies, a downstream that counts its requests, the annotated reqwest
//! client, a private `redis-server` the tests may kill or freeze, the
//! exactly-once run, and the tables the tests print.
//!
//! Included with `mod chaos_common;` by `tests/chaos.rs` and
//! `tests/chaos_redis.rs`.
#![allow(dead_code, unreachable_pub)] // each test file uses a part

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use resilience::IdempotencyKey;
use resilience::http::{HttpError, RequestBuilderExt, ResponseExt};
use resilience::idempotency::server::{IdempotencyLayer, IdempotencyStore};
use resilience::retry;
use resilience_chaos::{Faults, Proxy, Toxic, Toxics};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

/// The path of the payment endpoint.
pub const PAYMENTS: &str = "/payments";

/// `true` when `CHAOS_SOAK` is set (to anything but `0`): the longer runs.
pub fn soak() -> bool {
    std::env::var("CHAOS_SOAK").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `CHAOS_SEED` when set, else `default`: the proxy's seed, printed with
/// every table so a run can be replayed.
pub fn seed(default: u64) -> u64 {
    std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ---------------------------------------------------------------------------
// The payment server
// ---------------------------------------------------------------------------

type Ledger = Arc<Mutex<HashMap<u64, u32>>>;

/// `POST /payments` with body `id=<n>` behind the idempotency layer: the
/// handler applies the effect (one more application of payment `n`) and
/// answers `201 payment <n> applied`. Dropped, it stops.
#[derive(Debug)]
pub struct PaymentServer {
    addr: SocketAddr,
    ledger: Ledger,
    task: JoinHandle<()>,
}

impl PaymentServer {
    /// Serves on an ephemeral port of `127.0.0.1`.
    pub async fn start<St>(layer: IdempotencyLayer<St>) -> Self
    where
        St: IdempotencyStore + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let ledger = Ledger::default();
        let app = Router::new()
            .route(PAYMENTS, post(apply).layer(layer))
            .with_state(ledger.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, ledger, task }
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many times each payment was applied.
    pub fn effects(&self) -> HashMap<u64, u32> {
        lock(&self.ledger).clone()
    }

    /// How many times payment `id` was applied.
    pub fn applied(&self, id: u64) -> u32 {
        lock(&self.ledger).get(&id).copied().unwrap_or(0)
    }
}

impl Drop for PaymentServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn apply(State(ledger): State<Ledger>, body: String) -> (StatusCode, String) {
    let Some(id) = body.strip_prefix("id=").and_then(|n| n.parse::<u64>().ok()) else {
        return (StatusCode::BAD_REQUEST, format!("bad body {body:?}"));
    };
    *lock(&ledger).entry(id).or_default() += 1;
    (StatusCode::CREATED, format!("payment {id} applied"))
}

// ---------------------------------------------------------------------------
// A downstream that counts its requests
// ---------------------------------------------------------------------------

/// `GET /ok/<name>` answers `200 ok`, `GET /down/<name>` answers `503`
/// (no `Retry-After`); every request is counted per path. Dropped, it stops.
#[derive(Debug)]
pub struct Downstream {
    addr: SocketAddr,
    hits: Arc<Mutex<HashMap<String, u64>>>,
    task: JoinHandle<()>,
}

impl Downstream {
    /// Serves on an ephemeral port of `127.0.0.1`.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let hits: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
        let app = Router::new()
            .route("/ok/{name}", get(ok))
            .route("/down/{name}", get(down))
            .with_state(hits.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, hits, task }
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests that reached `path` so far.
    pub fn hits(&self, path: &str) -> u64 {
        lock(&self.hits).get(path).copied().unwrap_or(0)
    }

    /// Requests that reached the server so far, all paths.
    pub fn total(&self) -> u64 {
        lock(&self.hits).values().sum()
    }
}

impl Drop for Downstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Hits = Arc<Mutex<HashMap<String, u64>>>;

async fn ok(State(hits): State<Hits>, Path(name): Path<String>) -> &'static str {
    *lock(&hits).entry(format!("/ok/{name}")).or_default() += 1;
    "ok"
}

async fn down(State(hits): State<Hits>, Path(name): Path<String>) -> (StatusCode, &'static str) {
    *lock(&hits).entry(format!("/down/{name}")).or_default() += 1;
    (StatusCode::SERVICE_UNAVAILABLE, "down")
}

// ---------------------------------------------------------------------------
// The annotated client
// ---------------------------------------------------------------------------

/// A reqwest client that opens a connection per request, so that the
/// proxy draws its toxics once per request.
pub fn fresh_connections() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("reqwest client")
}

/// What the payment server answered.
#[derive(Debug, Clone)]
pub struct Receipt {
    /// The status, `201`.
    pub status: u16,
    /// `X-Idempotency-Replay: true`: the stored response of an earlier
    /// attempt, the handler not run.
    pub replayed: bool,
    /// `payment <id> applied`.
    pub body: String,
}

/// One logical payment: up to 3 attempts with the same key and body,
/// 20 ms then 40 ms (±25 %) apart, 5 s in all, 2 s per attempt. The body is
/// read inside the attempt, so a response cut short is retried too.
#[retry(
    method = "POST",
    max = 3,
    initial = "20ms",
    max_elapsed = "5s",
    attempt_timeout = "2s"
)]
pub async fn create_payment(
    client: &reqwest::Client,
    url: &str,
    key: IdempotencyKey,
    id: u64,
) -> Result<Receipt, HttpError> {
    let response = client
        .post(url)
        .idempotency_key(&key)
        .body(format!("id={id}"))
        .send()
        .await?
        .check()
        .await?;
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("x-idempotency-replay")
        .is_some_and(|v| v == "true");
    let body = response.text().await?;
    Ok(Receipt {
        status,
        replayed,
        body,
    })
}

/// A short name for a client-visible error, for the tables.
pub fn error_kind(err: &HttpError) -> String {
    if let Some(status) = err.status() {
        return format!("HTTP {}", status.as_u16());
    }
    let mut cause: &dyn std::error::Error = err;
    while let Some(source) = cause.source() {
        cause = source;
    }
    let text = cause.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    text.chars().take(48).collect()
}

// ---------------------------------------------------------------------------
// Scenario 1: exactly once under network faults
// ---------------------------------------------------------------------------

/// The toxics of scenario 1, per connection (one request each).
pub fn network_toxics() -> Toxics {
    Toxics::new()
        // Shaping: 20–30 ms more per round trip.
        .toxic(
            Toxic::latency(Duration::from_millis(20), Duration::from_millis(10)),
            0.10,
        )
        // The server processed the request; its response is lost.
        .toxic(Toxic::reset_after_response(), 0.10)
        // Mid-request: the request reached the server, the client gets a
        // reset before any byte of the answer.
        .toxic(Toxic::reset_before_response(), 0.05)
        // Refused-like: the server never sees the connection.
        .toxic(Toxic::reset_before_forward(), 0.05)
        // The answer cut in its headers (the request was processed).
        .toxic(Toxic::reset_mid_response(20), 0.05)
}

/// The figures of one exactly-once run.
#[derive(Debug, Clone)]
pub struct ExactlyOnce {
    /// `memory, 1 in flight`…
    pub label: String,
    /// The proxy's seed.
    pub seed: u64,
    /// Logical POSTs, each with its own key.
    pub posts: usize,
    /// The proxy's counters at the end of the faulty phase.
    pub faults: Faults,
    /// Payments applied once or more.
    pub effects: usize,
    /// Payments applied more than once.
    pub duplicates: usize,
    /// Payments never applied after reconciliation, or whose reconciliation
    /// failed.
    pub lost: usize,
    /// Calls the client saw fail, by kind.
    pub client_errors: BTreeMap<String, usize>,
    /// Failed calls whose re-send was a replay (the effect had been applied).
    pub reconciled_replayed: usize,
    /// Failed calls whose re-send applied the effect (it never had been).
    pub reconciled_applied: usize,
    /// Successful calls answered by a replay (an earlier attempt's response).
    pub replayed_ok: usize,
    /// Answers whose body named another payment.
    pub mismatched: usize,
    /// Latency of a logical call (all attempts), successes and failures.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Slowest call.
    pub max: Duration,
    /// Wall time of the faulty phase.
    pub elapsed: Duration,
}

impl ExactlyOnce {
    /// Client-visible errors, all kinds.
    pub fn errors(&self) -> usize {
        self.client_errors.values().sum()
    }
}

/// `posts` payments, `in_flight` at a time, through a proxy in front of
/// `server` playing [`network_toxics`] with `seed`; then the proxy is healed
/// and every call the client saw fail is re-sent with its key.
///
/// Ids `first_id..first_id + posts`.
/// The two exactly-once runs of one store, printed: `posts` one at a
/// time, then `posts` others with 50 in flight.
pub async fn exactly_once_runs(
    store: &str,
    server: &PaymentServer,
    posts: usize,
) -> [ExactlyOnce; 2] {
    let sequential = exactly_once(
        &format!("{store}, 1 in flight"),
        server,
        seed(13),
        0,
        posts,
        1,
    )
    .await;
    let concurrent = exactly_once(
        &format!("{store}, 50 in flight"),
        server,
        seed(13) + 1,
        1_000_000,
        posts,
        50,
    )
    .await;
    let runs = [sequential, concurrent];
    print_exactly_once(&runs);
    runs
}

pub async fn exactly_once(
    label: &str,
    server: &PaymentServer,
    seed: u64,
    first_id: u64,
    posts: usize,
    in_flight: usize,
) -> ExactlyOnce {
    let proxy = Proxy::builder(server.addr())
        .seed(seed)
        .toxics(network_toxics())
        .start()
        .await
        .expect("start the proxy");
    let url: Arc<str> = format!("http://{}{PAYMENTS}", proxy.addr()).into();
    let client = fresh_connections();
    let slots = Arc::new(Semaphore::new(in_flight));
    let mut calls = JoinSet::new();
    let start = Instant::now();
    for id in first_id..first_id + posts as u64 {
        let permit = slots.clone().acquire_owned().await.expect("semaphore");
        let (client, url) = (client.clone(), url.clone());
        calls.spawn(async move {
            let key = IdempotencyKey::new();
            let began = Instant::now();
            let result = create_payment(&client, &url, key.clone(), id).await;
            drop(permit);
            (id, key, began.elapsed(), result)
        });
    }
    let mut done = Vec::with_capacity(posts);
    while let Some(call) = calls.join_next().await {
        done.push(call.expect("a call panicked"));
    }
    let elapsed = start.elapsed();
    let faults = proxy.faults();
    proxy.heal();

    let mut latencies: Vec<Duration> = done.iter().map(|(_, _, d, _)| *d).collect();
    latencies.sort_unstable();
    let mut figures = ExactlyOnce {
        label: label.to_owned(),
        seed,
        posts,
        faults,
        effects: 0,
        duplicates: 0,
        lost: 0,
        client_errors: BTreeMap::new(),
        reconciled_replayed: 0,
        reconciled_applied: 0,
        replayed_ok: 0,
        mismatched: 0,
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
        max: latencies.last().copied().unwrap_or_default(),
        elapsed,
    };

    // Reconciliation: every failed call re-sent with its key, the proxy
    // healed. An applied effect must be replayed, a missing one applied.
    for (id, key, _, result) in &done {
        match result {
            Ok(receipt) => {
                figures.replayed_ok += usize::from(receipt.replayed);
                if receipt.body != format!("payment {id} applied") || receipt.status != 201 {
                    figures.mismatched += 1;
                }
            }
            Err(err) => {
                *figures.client_errors.entry(error_kind(err)).or_default() += 1;
                let before = server.applied(*id);
                match create_payment(&client, &url, key.clone(), *id).await {
                    Ok(receipt) => {
                        if receipt.body != format!("payment {id} applied") {
                            figures.mismatched += 1;
                        }
                        match (before, receipt.replayed) {
                            (0, false) => figures.reconciled_applied += 1,
                            (1.., true) => figures.reconciled_replayed += 1,
                            // Applied but not replayed: counted as a
                            // duplicate below. Replayed but never applied:
                            // impossible, counted as lost.
                            (1.., false) => {}
                            (0, true) => figures.lost += 1,
                        }
                    }
                    Err(err) => {
                        eprintln!("reconciling payment {id} (key {key}) failed: {err}");
                        figures.lost += 1;
                    }
                }
            }
        }
    }

    let effects = server.effects();
    for id in first_id..first_id + posts as u64 {
        match effects.get(&id).copied().unwrap_or(0) {
            0 => figures.lost += 1,
            1 => figures.effects += 1,
            _ => {
                figures.effects += 1;
                figures.duplicates += 1;
            }
        }
    }
    proxy.shutdown().await;
    figures
}

/// Prints the exactly-once table.
pub fn print_exactly_once(runs: &[ExactlyOnce]) {
    let mut rows = Vec::new();
    for run in runs {
        let f = &run.faults;
        rows.push(vec![
            run.label.clone(),
            run.seed.to_string(),
            run.posts.to_string(),
            f.connections.to_string(),
            f.reset_after_response.to_string(),
            f.reset_before_response.to_string(),
            f.reset_before_forward.to_string(),
            f.reset_mid_response.to_string(),
            f.latency.to_string(),
            run.effects.to_string(),
            run.duplicates.to_string(),
            run.lost.to_string(),
            run.errors().to_string(),
            format!("{}/{}", run.reconciled_replayed, run.reconciled_applied),
            run.replayed_ok.to_string(),
            ms(run.p50),
            ms(run.p99),
            ms(run.max),
            format!("{:.1} s", run.elapsed.as_secs_f64()),
        ]);
    }
    print_table(
        "exactly once under network faults",
        &[
            "run",
            "seed",
            "POSTs",
            "conns",
            "reset_after_resp",
            "reset_before_resp",
            "reset_before_fwd",
            "reset_mid_resp",
            "latency",
            "effects",
            "dupes",
            "lost",
            "client errors",
            "reconciled replay/applied",
            "ok by replay",
            "p50",
            "p99",
            "max",
            "wall",
        ],
        &rows,
    );
    for run in runs {
        if !run.client_errors.is_empty() {
            let kinds: Vec<String> = run
                .client_errors
                .iter()
                .map(|(kind, n)| format!("{n} × {kind}"))
                .collect();
            println!("  {} client errors: {}", run.label, kinds.join(", "));
        }
    }
}

/// Asserts the exactly-once promise on one run.
pub fn assert_exactly_once(run: &ExactlyOnce) {
    let name = &run.label;
    assert_eq!(run.duplicates, 0, "{name}: payments applied twice");
    assert_eq!(run.lost, 0, "{name}: payments lost");
    assert_eq!(run.effects, run.posts, "{name}: effects");
    assert_eq!(run.mismatched, 0, "{name}: answers naming another payment");
    assert!(
        run.faults.reset_after_response > 0 && run.faults.reset_before_forward > 0,
        "{name}: the proxy injected no faults: {:?}",
        run.faults
    );
}

// ---------------------------------------------------------------------------
// A private redis-server
// ---------------------------------------------------------------------------

/// A free port on `127.0.0.1` (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A `redis-server` child on its own port, without persistence: the test
/// may kill it, restart it, freeze it (`SIGSTOP`) and thaw it. Dropped, it
/// is thawed and killed.
#[derive(Debug)]
pub struct RedisChild {
    port: u16,
    child: Option<Child>,
}

impl RedisChild {
    /// Starts `redis-server` on `port` and waits until it answers `PING`.
    pub fn start(port: u16) -> Self {
        let mut redis = Self { port, child: None };
        redis.restart();
        redis
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts the server again (after [`kill`](Self::kill)), empty.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "redis-server already running");
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.ping() {
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer PING within 10 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the server answers `PING` within 200 ms.
    pub fn ping(&self) -> bool {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
        let mut reply = [0; 7];
        stream.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }

    /// `SIGKILL`, and waits for the process to end.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            self.signal(&child, "CONT");
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `SIGSTOP`: the server hangs, connections stay open.
    pub fn freeze(&self) {
        if let Some(child) = &self.child {
            self.signal(child, "STOP");
        }
    }

    /// `SIGCONT`.
    pub fn thaw(&self) {
        if let Some(child) = &self.child {
            self.signal(child, "CONT");
        }
    }

    fn signal(&self, child: &Child, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {}", child.id());
    }
}

impl Drop for RedisChild {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------
// Figures and tables
// ---------------------------------------------------------------------------

/// The `q` quantile of sorted `values` (nearest rank).
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// `12.3 ms`.
pub fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 1.0 {
        format!("{:.0} µs", ms * 1e3)
    } else {
        format!("{ms:.1} ms")
    }
}

/// Prints a Markdown table under `title`.
pub fn print_table(title: &str, headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut out = String::from("|");
        for (cell, w) in cells.iter().zip(&widths) {
            let pad = w - cell.chars().count();
            let _ = write!(out, " {cell}{} |", " ".repeat(pad));
        }
        out
    };
    let mut out = format!("\n{title}\n");
    out.push_str(&line(headers.iter().map(|h| (*h).to_owned()).collect()));
    out.push('\n');
    out.push_str(&line(widths.iter().map(|w| "-".repeat(*w)).collect()));
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.clone()));
        out.push('\n');
    }
    println!("{out}");
}
