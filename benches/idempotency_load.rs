//! The idempotency layer under load over loopback: requests per second and
//! latency of one axum handler without the layer, behind it with the
//! memory store and with the Redis store, for fresh keys and for replays,
//! in one run; then the Redis round trips of a fresh POST and of a replay,
//! counted with `MONITOR`.
//!
//! ```text
//! cargo bench --bench idempotency_load --features idempotency-redis
//! ```
//!
//! The Redis rows need `redis-server` (and `redis-cli`, for the count) on
//! the `PATH`: the bench starts its own on a free port and kills it by PID
//! when it ends; without it they are skipped. Environment:
//!
//! - `LOAD_SECONDS` (5): measured seconds per row, after 1 s of warm-up;
//! - `LOAD_ROUNDS` (3): rounds over all the rows, each row reporting its
//!   median round (the rounds are interleaved, so a noisy moment of a
//!   shared machine does not fall on one row only);
//! - `LOAD_CONNECTIONS` (32): keep-alive connections, each sending its
//!   next request when the previous answer is read (a closed loop);
//! - `LOAD_SERVER_THREADS` (1): the server runtime's worker threads. The
//!   client is one more thread (a current-thread runtime writing
//!   pre-formatted HTTP/1.1 requests, so that it costs little next to the
//!   server).
//!
//! Every request is `POST /payments` with a 31-byte JSON body and an
//! `Idempotency-Key`: a new one each time (`fresh`), or one key answered
//! once before the row and then replayed.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::routing::post;
use resilience::idempotency::server::{IdempotencyLayer, MemoryStore, RedisStore, Scope};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::time::Instant;

const BODY: &str = r#"{"amount":100,"currency":"eur"}"#;
const WARM_UP: Duration = Duration::from_secs(1);

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn handler() -> Router {
    // The body is read, as the layer reads it, so that the bare row does
    // the same work but the layer's.
    Router::new().route(
        "/payments",
        post(|body: Bytes| async move {
            std::hint::black_box(body);
            (
                StatusCode::CREATED,
                [(header::CONTENT_TYPE, "application/json")],
                r#"{"id":"pay_1"}"#,
            )
        }),
    )
}

/// Serves `app` on the server runtime; its address.
fn serve(server: &Runtime, app: Router) -> SocketAddr {
    let listener = server
        .block_on(TcpListener::bind("127.0.0.1:0"))
        .expect("bind a loopback port");
    let addr = listener.local_addr().unwrap();
    server.spawn(axum::serve(listener, app).into_future());
    addr
}

#[derive(Clone, Copy, PartialEq)]
enum Keys {
    /// A new key for every request.
    Fresh,
    /// One key, answered before the row: every request is a replay.
    Replay,
}

fn request(key: &str) -> Vec<u8> {
    format!(
        "POST /payments HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n\
         Idempotency-Key: {key}\r\nContent-Length: {}\r\n\r\n{BODY}",
        BODY.len()
    )
    .into_bytes()
}

/// One HTTP/1.1 keep-alive connection, reading answers by their
/// `content-length`.
struct Connection {
    stream: TcpStream,
    buffer: Vec<u8>,
}

/// What an answer was: its status, and whether it was a replay.
struct Answer {
    status: u16,
    replayed: bool,
}

impl Connection {
    async fn open(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Self {
            stream,
            buffer: Vec::with_capacity(4096),
        }
    }

    async fn exchange(&mut self, request: &[u8]) -> Answer {
        self.stream.write_all(request).await.unwrap();
        loop {
            if let Some((answer, len)) = parse(&self.buffer) {
                self.buffer.drain(..len);
                return answer;
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the server closed the connection");
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }
}

/// A whole answer at the start of `buffer`, and its length.
fn parse(buffer: &[u8]) -> Option<(Answer, usize)> {
    let end = buffer.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buffer[..end])
        .unwrap()
        .to_ascii_lowercase();
    let status = head[9..12].parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    (buffer.len() >= end + length).then(|| {
        let replayed = head.contains("\r\nx-idempotency-replay:");
        (Answer { status, replayed }, end + length)
    })
}

struct Row {
    requests: usize,
    seconds: f64,
    latencies: Vec<u32>,
    errors: usize,
    replays: usize,
}

impl Row {
    fn rate(&self) -> f64 {
        self.requests as f64 / self.seconds
    }

    fn percentile(&self, p: f64) -> f64 {
        let i = ((self.latencies.len() as f64 * p).ceil() as usize).saturating_sub(1);
        f64::from(self.latencies[i.min(self.latencies.len() - 1)])
    }
}

/// `connections` closed loops against `addr` for the warm-up then
/// `measured`; the figures of the measured part.
async fn load(
    addr: SocketAddr,
    row: usize,
    keys: Keys,
    connections: u64,
    measured: Duration,
) -> Row {
    if keys == Keys::Replay {
        let answer = Connection::open(addr)
            .await
            .exchange(&request(&format!("row{row}-replayed")))
            .await;
        assert_eq!(answer.status, 201, "the key to replay");
    }
    let start = Instant::now();
    let (measure_from, until) = (start + WARM_UP, start + WARM_UP + measured);
    let tasks: Vec<_> = (0..connections)
        .map(|c| {
            tokio::spawn(async move {
                let mut connection = Connection::open(addr).await;
                let (mut latencies, mut errors, mut replays) = (Vec::new(), 0, 0);
                let replayed = request(&format!("row{row}-replayed"));
                for n in 0u64.. {
                    let fresh;
                    let request = match keys {
                        Keys::Fresh => {
                            fresh = request(&format!("row{row}-c{c}-n{n}"));
                            &fresh
                        }
                        Keys::Replay => &replayed,
                    };
                    let sent = Instant::now();
                    if sent >= until {
                        break;
                    }
                    let answer = connection.exchange(request).await;
                    if sent >= measure_from {
                        let micros = sent.elapsed().as_micros();
                        latencies.push(u32::try_from(micros).unwrap_or(u32::MAX));
                        errors += usize::from(answer.status != 201);
                        replays += usize::from(answer.replayed);
                    }
                }
                (latencies, errors, replays)
            })
        })
        .collect();
    let mut out = Row {
        requests: 0,
        seconds: measured.as_secs_f64(),
        latencies: Vec::new(),
        errors: 0,
        replays: 0,
    };
    for task in tasks {
        let (latencies, errors, replays) = task.await.unwrap();
        out.latencies.extend(latencies);
        out.errors += errors;
        out.replays += replays;
    }
    out.requests = out.latencies.len();
    out.latencies.sort_unstable();
    out
}

/// A redis-server of the bench's own on a free port, killed by PID on drop.
struct OwnRedis {
    child: Child,
    port: u16,
}

impl OwnRedis {
    fn start() -> Option<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .ok()?;
        let redis = Self { child, port };
        for _ in 0..100 {
            if redis.command(&["PING"]).is_ok_and(|reply| reply == "+PONG") {
                return Some(redis);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Sends one command on a connection of its own; the first line of the
    /// reply (the crate's `redis` client is not a dependency of the
    /// benches).
    fn command(&self, args: &[&str]) -> std::io::Result<String> {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        let mut packed = format!("*{}\r\n", args.len());
        for arg in args {
            packed.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        stream.write_all(packed.as_bytes())?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line)?;
        Ok(line.trim_end().to_owned())
    }

    /// The commands clients sent Redis (those scripts run excluded) while
    /// `during` ran, by name, as `MONITOR` shows them.
    fn commands_during(&self, during: impl FnOnce()) -> Vec<String> {
        let mut monitor = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "monitor"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("redis-cli must be on the PATH");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let reader = {
            let (lines, stdout) = (Arc::clone(&lines), monitor.stdout.take().unwrap());
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    lines.lock().unwrap().push(line.unwrap());
                }
            })
        };
        let wait_for = |text: &str| {
            for _ in 0..500 {
                if lines.lock().unwrap().iter().any(|l| l.contains(text)) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            panic!("MONITOR never showed {text}");
        };
        wait_for("OK");
        during();
        // Anything the layer finishes after its answer lands before the
        // sentinel.
        std::thread::sleep(Duration::from_millis(300));
        self.command(&["ECHO", "end-of-window"]).unwrap();
        wait_for("end-of-window");
        monitor.kill().unwrap();
        monitor.wait().unwrap();
        reader.join().unwrap();
        let lines = lines.lock().unwrap();
        lines
            .iter()
            .filter(|l| l.contains("] \"") && !l.contains(" lua] ") && !l.contains("end-of-window"))
            .map(|l| l.split('"').nth(1).unwrap_or("?").to_ascii_uppercase())
            .collect()
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `commands` per request, by name: `SET 1.00 + EVALSHA 1.00`.
fn per_request(commands: &[String], requests: usize) -> (f64, String) {
    let mut names: Vec<(String, usize)> = Vec::new();
    for name in commands {
        match names.iter_mut().find(|(n, _)| n == name) {
            Some((_, count)) => *count += 1,
            None => names.push((name.clone(), 1)),
        }
    }
    let each = names
        .iter()
        .map(|(name, count)| format!("{name} {:.2}", *count as f64 / requests as f64))
        .collect::<Vec<_>>()
        .join(" + ");
    (commands.len() as f64 / requests as f64, each)
}

fn main() {
    let measured = Duration::from_secs(env("LOAD_SECONDS", 5));
    let connections = env("LOAD_CONNECTIONS", 32);
    let threads = env("LOAD_SERVER_THREADS", 1);
    let rounds = env("LOAD_ROUNDS", 3).max(1);
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::try_from(threads).unwrap().max(1))
        .enable_all()
        .build()
        .unwrap();
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let redis = OwnRedis::start();
    if redis.is_none() {
        eprintln!("redis-server not on the PATH: the Redis rows are skipped");
    }
    let redis_store = redis.as_ref().map(|redis| {
        server
            .block_on(RedisStore::connect(&redis.url()))
            .expect("connect to the bench's redis-server")
    });
    // Room for every fresh key of a row: a full store would answer 503.
    let memory = || MemoryStore::new(10_000_000).unwrap();

    let mut rows: Vec<(&str, Keys, Router)> = vec![
        ("no layer", Keys::Fresh, handler()),
        (
            "memory store, fresh key",
            Keys::Fresh,
            handler().layer(IdempotencyLayer::new(memory(), Scope::unscoped())),
        ),
    ];
    if let Some(store) = &redis_store {
        rows.push((
            "Redis store, fresh key",
            Keys::Fresh,
            handler().layer(IdempotencyLayer::new(store.clone(), Scope::unscoped())),
        ));
    }
    rows.push((
        "memory store, replay",
        Keys::Replay,
        handler().layer(IdempotencyLayer::new(memory(), Scope::unscoped())),
    ));
    if let Some(store) = &redis_store {
        rows.push((
            "Redis store, replay",
            Keys::Replay,
            handler().layer(IdempotencyLayer::new(store.clone(), Scope::unscoped())),
        ));
    }

    println!(
        "{connections} connections, {} s per row after {} s of warm-up, {rounds} rounds, \
         {threads} server thread(s), 1 client thread\n",
        measured.as_secs(),
        WARM_UP.as_secs()
    );
    // Rounds over all rows, so that the machine's drift is spread over
    // every row; each row reports its median round.
    let servers: Vec<_> = rows
        .into_iter()
        .map(|(name, keys, app)| (name, keys, serve(&server, app)))
        .collect();
    let mut results: Vec<Vec<Row>> = servers.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for (i, (_, keys, addr)) in servers.iter().enumerate() {
            let tag = i + 100 * usize::try_from(round).unwrap();
            let row = client.block_on(load(*addr, tag, *keys, connections, measured));
            results[i].push(row);
        }
    }
    println!("| row | requests/s | p50 | p99 | non-201 | replays | requests/s of each round |");
    println!("|---|---:|---:|---:|---:|---:|---|");
    for ((name, ..), mut rounds) in servers.into_iter().zip(results) {
        let each = rounds
            .iter()
            .map(|row| format!("{:.0}", row.rate()))
            .collect::<Vec<_>>()
            .join(", ");
        rounds.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
        let row = &rounds[rounds.len() / 2];
        println!(
            "| {name} | {:.0} | {:.0} µs | {:.0} µs | {} | {} | {each} |",
            row.rate(),
            row.percentile(0.50),
            row.percentile(0.99),
            row.errors,
            row.replays,
        );
    }

    let (Some(redis), Some(store)) = (&redis, redis_store) else {
        return;
    };
    // One connection, one request at a time, so that the window holds
    // these requests' commands only.
    let addr = serve(
        &server,
        handler().layer(IdempotencyLayer::new(store, Scope::unscoped())),
    );
    const REQUESTS: usize = 1000;
    let send = |key: &dyn Fn(usize) -> String| {
        client.block_on(async {
            let mut connection = Connection::open(addr).await;
            for n in 0..REQUESTS {
                let answer = connection.exchange(&request(&key(n))).await;
                assert_eq!(answer.status, 201);
            }
        })
    };
    let fresh = redis.commands_during(|| send(&|n| format!("trips-{n}")));
    send(&|_| "trips-replayed".into());
    let replays = redis.commands_during(|| send(&|_| "trips-replayed".into()));
    println!(
        "\nRedis round trips ({REQUESTS} requests each, MONITOR, scripts' own commands excluded):\n"
    );
    println!("| request | round trips | commands |");
    println!("|---|---:|---|");
    for (what, commands) in [("fresh POST", fresh), ("replay", replays)] {
        let (trips, each) = per_request(&commands, REQUESTS);
        println!("| {what} | {trips:.2} | {each} |");
    }
}
