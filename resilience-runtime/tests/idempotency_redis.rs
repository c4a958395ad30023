//! The Redis store against a real Redis (never a mock).
//!
//! Not part of the default `cargo test`; run with
//!
//! ```text
//! cargo test -p resilience-runtime --features idempotency-redis --test idempotency_redis -- --ignored
//! ```
//!
//! `REDIS_URL` selects the server (default `redis://127.0.0.1:6379/`). Each
//! test writes under its own prefix, `idem:test-<pid>-<nanos>-<test>:`, and
//! deletes it when it ends, panics included.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use axum::{Extension, Router};
use bytes::Bytes;
use http::{HeaderMap, Method, Uri, header};
use http_body_util::BodyExt;
use redis::Commands;
use resilience_runtime::IdempotencyKey;
use resilience_runtime::idempotency::server::{
    Claim, Completion, EffectNotApplied, Entry, Fingerprint, IdempotencyConfig, IdempotencyLayer,
    IdempotencyStore, KeyLease, RedisStore, Scope, StoreError, StoredResponse,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::{Instant, timeout};
use tower::ServiceExt;

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into())
}

/// A store under a prefix of its own, whose keys are deleted on drop.
struct Scoped {
    store: RedisStore,
    prefix: String,
}

impl Scoped {
    async fn new(test: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let prefix = format!("idem:test-{}-{nanos}-{test}:", std::process::id());
        let store = RedisStore::connect(&redis_url())
            .await
            .expect("Redis must be reachable at REDIS_URL (default redis://127.0.0.1:6379/)")
            .with_prefix(prefix.as_str());
        Self { store, prefix }
    }

    fn connection(&self) -> redis::Connection {
        redis::Client::open(redis_url())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn keys(&self) -> Vec<String> {
        self.connection()
            .scan_match::<_, String>(format!("{}*", self.prefix))
            .unwrap()
            .filter_map(Result::ok)
            .collect()
    }
}

impl Drop for Scoped {
    fn drop(&mut self) {
        let keys = self.keys();
        if !keys.is_empty() {
            let _: () = self.connection().del(keys).unwrap();
        }
    }
}

fn key(text: &str) -> IdempotencyKey {
    IdempotencyKey::from_string(text).unwrap()
}

fn lease(body: &[u8]) -> KeyLease {
    KeyLease::new(Fingerprint::of(
        &Method::POST,
        &Uri::from_static("/payments"),
        body,
    ))
}

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test]
#[ignore = "needs Redis at REDIS_URL (default redis://127.0.0.1:6379/)"]
async fn redis_store_follows_the_contract() {
    let s = Scoped::new("contract").await;
    let (k, mine, theirs) = (key("pay-1"), lease(b"{}"), lease(b"{}"));

    assert_eq!(
        s.store.begin(&k, &mine, MINUTE).await.unwrap(),
        Claim::Started
    );
    assert_eq!(s.keys(), [format!("{}pay-1", s.prefix)]);
    let pttl: i64 = s.connection().pttl(s.store.redis_key(&k)).unwrap();
    assert!((59_000..=60_000).contains(&pttl), "lock pttl {pttl}");
    assert_eq!(
        s.store.begin(&k, &theirs, MINUTE).await.unwrap(),
        Claim::Existing(Entry::InFlight {
            fingerprint: mine.fingerprint()
        })
    );

    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
    let outcome = Completion::Response(StoredResponse::new(
        StatusCode::CREATED,
        headers,
        Bytes::from_static(b"{\"id\":1}"),
    ));
    assert!(!s.store.complete(&k, &theirs, &outcome, HOUR).await.unwrap());
    assert!(!s.store.release(&k, &theirs).await.unwrap());
    assert!(s.store.complete(&k, &mine, &outcome, HOUR).await.unwrap());
    let pttl: i64 = s.connection().pttl(s.store.redis_key(&k)).unwrap();
    assert!((3_599_000..=3_600_000).contains(&pttl), "ttl pttl {pttl}");
    assert!(
        !s.store.release(&k, &mine).await.unwrap(),
        "completed keys stay"
    );
    assert_eq!(
        s.store.begin(&k, &theirs, MINUTE).await.unwrap(),
        Claim::Existing(Entry::Completed {
            fingerprint: mine.fingerprint(),
            outcome
        })
    );

    let k2 = key("pay-2");
    s.store.begin(&k2, &mine, MINUTE).await.unwrap();
    assert!(s.store.release(&k2, &mine).await.unwrap());
    assert_eq!(
        s.store.begin(&k2, &theirs, MINUTE).await.unwrap(),
        Claim::Started
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Redis at REDIS_URL (default redis://127.0.0.1:6379/)"]
async fn redis_store_lets_exactly_one_of_concurrent_begins_win() {
    let s = Scoped::new("race").await;
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let store = s.store.clone();
            tokio::spawn(async move { store.begin(&key("race"), &lease(b"x"), MINUTE).await })
        })
        .collect();
    let mut started = 0;
    for task in tasks {
        if task.await.unwrap().unwrap() == Claim::Started {
            started += 1;
        }
    }
    assert_eq!(started, 1);
}

#[tokio::test]
#[ignore = "needs Redis at REDIS_URL (default redis://127.0.0.1:6379/)"]
async fn redis_store_reports_a_corrupt_record_naming_its_key() {
    let s = Scoped::new("corrupt").await;
    let k = key("bad");
    let _: () = s
        .connection()
        .set_ex(s.store.redis_key(&k), "not a record", 60)
        .unwrap();
    let err = s.store.begin(&k, &lease(b""), MINUTE).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(
        err.to_string().contains(&format!("{}bad", s.prefix)),
        "{err}"
    );
}

#[tokio::test]
#[ignore = "needs Redis at REDIS_URL (default redis://127.0.0.1:6379/)"]
async fn redis_backed_layer_runs_a_payment_once_and_replays_it() {
    let s = Scoped::new("layer").await;
    let calls = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route(
            "/payments",
            post(|State(calls): State<Arc<AtomicUsize>>| async move {
                let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                (StatusCode::CREATED, format!("payment {n}"))
            }),
        )
        .route(
            "/down",
            post(|| async {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    Extension(EffectNotApplied),
                    "down",
                )
            }),
        )
        .route(
            "/crash",
            post(|State(calls): State<Arc<AtomicUsize>>| async move {
                let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                (StatusCode::INTERNAL_SERVER_ERROR, format!("crash {n}"))
            }),
        )
        .with_state(Arc::clone(&calls))
        .layer(IdempotencyLayer::new(s.store.clone(), Scope::unscoped()));
    let send = |path: &'static str, key: &'static str, body: &'static str| {
        send_to(app.clone(), path, key, body)
    };

    let first = send("/payments", "order-42", "{}").await;
    let second = send("/payments", "order-42", "{}").await;
    assert_eq!(first, (StatusCode::CREATED, false, "payment 1".into()));
    assert_eq!(second, (StatusCode::CREATED, true, "payment 1".into()));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let pttl: i64 = s
        .connection()
        .pttl(s.store.redis_key(&key("order-42")))
        .unwrap();
    assert!(pttl > 86_399_000, "24 h ttl, got {pttl} ms");

    let reused = send("/payments", "order-42", "{\"other\":1}").await;
    assert_eq!(reused.0, StatusCode::UNPROCESSABLE_ENTITY);

    // A failure declared not applied is not stored: the key is gone, the
    // retry runs again.
    let down = send("/down", "order-43", "{}").await;
    assert_eq!(down.0, StatusCode::SERVICE_UNAVAILABLE);
    let exists: bool = s
        .connection()
        .exists(s.store.redis_key(&key("order-43")))
        .unwrap();
    assert!(!exists);

    // A 500 after the effect is final for its key: replayed, applied once.
    let crash = send("/crash", "order-44", "{}").await;
    assert_eq!(
        crash,
        (StatusCode::INTERNAL_SERVER_ERROR, false, "crash 2".into())
    );
    let retry = send("/crash", "order-44", "{}").await;
    assert_eq!(
        retry,
        (StatusCode::INTERNAL_SERVER_ERROR, true, "crash 2".into())
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// A redis-server of the test's own on a free port, so that the test can
/// stop it (SIGSTOP) without touching the shared one; killed by PID on
/// drop, panics included.
struct OwnRedis {
    child: std::process::Child,
    port: u16,
}

impl OwnRedis {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self {
            child: Self::spawn(port),
            port,
        }
    }

    /// A redis-server on `port`, once it answers.
    fn spawn(port: u16) -> std::process::Child {
        let mut child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server must be on the PATH");
        let url = format!("redis://127.0.0.1:{port}/");
        for _ in 0..100 {
            if redis::Client::open(url.as_str())
                .and_then(|client| client.get_connection())
                .is_ok()
            {
                return child;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("redis-server on port {port} did not start");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal} {}", self.child.id());
    }

    /// Freezes the server: connections stay open, nothing is answered.
    fn pause(&self) {
        self.signal("-STOP");
    }

    fn resume(&self) {
        self.signal("-CONT");
    }

    /// Kills the server (SIGKILL): its connections are closed, new ones
    /// refused.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// A new, empty server on the same port, once it answers.
    fn restart(&mut self) {
        self.child = Self::spawn(self.port);
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        // Resumed first in case a test stopped it; a killed one is gone.
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A payments service behind the layer: `/pay` applies its effect at once,
/// `/commit` reports its start, waits for a permit, then applies it.
struct Payments {
    app: Router,
    applied: Arc<AtomicUsize>,
    started: mpsc::UnboundedReceiver<()>,
    gate: Arc<Semaphore>,
}

impl Payments {
    fn new(store: RedisStore) -> Self {
        Self::with_config(store, IdempotencyConfig::default())
    }

    fn with_config(store: RedisStore, config: IdempotencyConfig) -> Self {
        let applied = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Semaphore::new(0));
        let (tx, started) = mpsc::unbounded_channel();
        let pay = {
            let applied = Arc::clone(&applied);
            move || async move {
                let n = applied.fetch_add(1, Ordering::SeqCst) + 1;
                (StatusCode::CREATED, format!("paid {n}"))
            }
        };
        let commit = {
            let (applied, gate) = (Arc::clone(&applied), Arc::clone(&gate));
            move || async move {
                tx.send(()).unwrap();
                gate.acquire().await.unwrap().forget();
                let n = applied.fetch_add(1, Ordering::SeqCst) + 1;
                (StatusCode::CREATED, format!("paid {n}"))
            }
        };
        let app = Router::new()
            .route("/pay", post(pay))
            .route("/commit", post(commit))
            .layer(IdempotencyLayer::with_config(
                store,
                Scope::unscoped(),
                config,
            ));
        Self {
            app,
            applied,
            started,
            gate,
        }
    }

    fn applied(&self) -> usize {
        self.applied.load(Ordering::SeqCst)
    }

    /// (status, replayed, body).
    async fn send(&self, path: &str, key: &str) -> (StatusCode, bool, String) {
        send_to(self.app.clone(), path, key, "{}").await
    }

    /// Sends until the answer is not `409` (in flight), as a client told
    /// `Retry-After` would.
    async fn send_until_settled(&self, path: &str, key: &str) -> (StatusCode, bool, String) {
        for _ in 0..500 {
            let reply = self.send(path, key).await;
            if reply.0 != StatusCode::CONFLICT {
                return reply;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("key {key} still in flight after 10 s");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Redis at REDIS_URL (default redis://127.0.0.1:6379/)"]
async fn redis_backed_layer_a_client_resetting_mid_handler_gets_the_replay_not_a_second_effect() {
    let s = Scoped::new("reset").await;
    let mut p = Payments::new(s.store.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(axum::serve(listener, p.app.clone()).into_future());
    let raw = "POST /commit HTTP/1.1\r\nHost: test\r\nIdempotency-Key: pay-9\r\n\
               Content-Length: 2\r\nConnection: close\r\n\r\n{}";
    let exchange = || async move {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(raw.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer.to_ascii_lowercase()
    };

    let mut first = TcpStream::connect(addr).await.unwrap();
    first.write_all(raw.as_bytes()).await.unwrap();
    p.started.recv().await.unwrap();
    first.set_zero_linger().unwrap();
    drop(first);
    tokio::time::sleep(Duration::from_millis(200)).await;

    let retry = timeout(Duration::from_secs(5), exchange())
        .await
        .expect("the retry must not run the handler again");
    assert!(retry.starts_with("http/1.1 409 conflict\r\n"), "{retry}");

    p.gate.add_permits(1);
    let mut replay = String::new();
    for _ in 0..200 {
        replay = timeout(Duration::from_secs(5), exchange()).await.unwrap();
        if !replay.starts_with("http/1.1 409") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.abort();
    assert!(replay.starts_with("http/1.1 201 created\r\n"), "{replay}");
    assert!(
        replay.contains("x-idempotency-replay: true\r\n"),
        "{replay}"
    );
    assert!(replay.ends_with("paid 1"), "{replay}");
    assert_eq!(p.applied(), 1, "applied once");
    assert!(p.started.try_recv().is_err(), "the handler started once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts its own redis-server (must be on the PATH)"]
async fn redis_backed_layer_answers_503_fast_when_redis_hangs_and_leaves_no_key_locked() {
    let redis = OwnRedis::start();
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    let p = Payments::new(store);
    // Warm up: the connection is up and the scripts are loaded.
    assert_eq!(p.send("/pay", "warm-up").await.0, StatusCode::CREATED);

    redis.pause();
    let asked = Instant::now();
    let reply = timeout(Duration::from_secs(10), p.send("/pay", "pay-1"))
        .await
        .expect("a hung Redis must not hang the request");
    let waited = asked.elapsed();
    eprintln!("503 after {waited:?} with Redis stopped");
    assert!(
        waited < Duration::from_millis(1500),
        "answered after {waited:?}"
    );
    assert_eq!(reply.0, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
    assert!(
        reply
            .2
            .contains("idempotency store `redis` failed on `begin`"),
        "{}",
        reply.2
    );
    assert_eq!(p.applied(), 1, "the handler never ran for pay-1");

    // The SET NX is queued in Redis' socket: once Redis resumes it takes
    // the key, and the layer's release frees it again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.resume();
    let resumed = Instant::now();
    let retry = p.send_until_settled("/pay", "pay-1").await;
    eprintln!("key free {:?} after Redis resumed", resumed.elapsed());
    assert_eq!(retry, (StatusCode::CREATED, false, "paid 2".into()));
    assert_eq!(p.applied(), 2);
    let replay = p.send("/pay", "pay-1").await;
    assert_eq!(replay, (StatusCode::CREATED, true, "paid 2".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts its own redis-server (must be on the PATH)"]
async fn redis_backed_layer_delivers_the_response_when_redis_hangs_before_complete() {
    let redis = OwnRedis::start();
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    let mut p = Payments::new(store);
    assert_eq!(p.send("/pay", "warm-up").await.0, StatusCode::CREATED);

    let app = p.app.clone();
    let first = tokio::spawn(async move {
        let request = Request::post("/commit")
            .header("Idempotency-Key", "pay-2")
            .body(Body::from("{}"))
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (Instant::now(), status, body)
    });
    p.started.recv().await.unwrap();
    redis.pause();
    let released = Instant::now();
    p.gate.add_permits(1);
    let (answered, status, body) = timeout(Duration::from_secs(10), first)
        .await
        .expect("a hung complete must not hold the response")
        .unwrap();
    let waited = answered - released;
    eprintln!("response delivered {waited:?} after the handler ended, Redis stopped");
    assert!(waited < Duration::from_millis(1500), "{waited:?}");
    assert_eq!((status, &body[..]), (StatusCode::CREATED, &b"paid 2"[..]));

    // Redis resumes: the background retries complete the key.
    redis.resume();
    let replay = p.send_until_settled("/commit", "pay-2").await;
    assert_eq!(replay, (StatusCode::CREATED, true, "paid 2".into()));
    assert_eq!(p.applied(), 2);
}

/// Sends `/pay` with `key` and measures the answer.
async fn timed(p: &Payments, key: &str) -> ((StatusCode, bool, String), Duration) {
    let asked = Instant::now();
    let reply = timeout(Duration::from_secs(10), p.send("/pay", key))
        .await
        .expect("a dead Redis must not hang the request");
    (reply, asked.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts its own redis-server (must be on the PATH)"]
async fn redis_backed_layer_answers_503_at_once_when_redis_is_dead() {
    let mut redis = OwnRedis::start();
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    let p = Payments::new(store);
    assert_eq!(p.send("/pay", "warm-up").await.0, StatusCode::CREATED);

    redis.kill();
    // The first request finds the connection closed, the next ones find
    // connections refused; none waits out `store_timeout` (1 s).
    for n in 0..10 {
        let (reply, waited) = timed(&p, &format!("pay-{n}")).await;
        eprintln!("request {n}: {} after {waited:?}, Redis dead", reply.0);
        assert_eq!(reply.0, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
        assert!(
            reply
                .2
                .contains("idempotency store `redis` failed on `begin`"),
            "{}",
            reply.2
        );
        assert!(
            waited < Duration::from_millis(300),
            "request {n} answered after {waited:?}"
        );
    }
    // Concurrent requests share the reconnection attempt, and fail with it.
    let p = Arc::new(p);
    let tasks: Vec<_> = (0..16)
        .map(|n| {
            let p = Arc::clone(&p);
            tokio::spawn(async move { timed(&p, &format!("burst-{n}")).await })
        })
        .collect();
    for task in tasks {
        let (reply, waited) = task.await.unwrap();
        assert_eq!(reply.0, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
        assert!(
            waited < Duration::from_millis(300),
            "answered after {waited:?}"
        );
    }
    assert_eq!(p.applied(), 1, "no handler ran without the store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts its own redis-server (must be on the PATH)"]
async fn redis_backed_layer_recovers_within_a_second_of_a_redis_restart() {
    let mut redis = OwnRedis::start();
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    let p = Payments::new(store);
    assert_eq!(p.send("/pay", "warm-up").await.0, StatusCode::CREATED);

    // Outages of several lengths, with requests failing (and reconnections
    // failing with them) throughout, as under load: a reconnection backoff
    // would be at a different, longer step at each restart.
    for (outage, dead_for) in [1_000, 2_500, 4_000].into_iter().enumerate() {
        let key = format!("pay-{outage}");
        redis.kill();
        let dead = Instant::now();
        while dead.elapsed() < Duration::from_millis(dead_for) {
            let (reply, _) = timed(&p, &key).await;
            assert_eq!(reply.0, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        redis.restart();
        let restarted = Instant::now();
        let mut requests = 0;
        let reply = loop {
            requests += 1;
            let (reply, _) = timed(&p, &key).await;
            if reply.0 != StatusCode::SERVICE_UNAVAILABLE {
                break reply;
            }
            assert!(
                restarted.elapsed() < Duration::from_secs(10),
                "still 503 after {:?}",
                restarted.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let recovered = restarted.elapsed();
        eprintln!(
            "outage of {dead_for} ms: first 201 {recovered:?} after Redis restarted ({requests} requests)"
        );
        let paid = format!("paid {}", outage + 2);
        assert_eq!(reply, (StatusCode::CREATED, false, paid.clone()));
        assert!(
            recovered < Duration::from_secs(1),
            "outage of {dead_for} ms: recovered after {recovered:?}"
        );
        assert_eq!(
            p.send("/pay", &key).await,
            (StatusCode::CREATED, true, paid)
        );
    }
}

/// (status, replayed, body) of a `POST path` with `key` and `body` to `app`.
async fn send_to(
    app: Router,
    path: &str,
    key: &str,
    body: &'static str,
) -> (StatusCode, bool, String) {
    let request = Request::post(path)
        .header("Idempotency-Key", key)
        .body(Body::from(body))
        .unwrap();
    let response = app.oneshot(request).await.unwrap();
    let replayed = response.headers().contains_key("x-idempotency-replay");
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, replayed, String::from_utf8(body.to_vec()).unwrap())
}

/// The layer's config with a lock ttl short enough to outlive in a test.
fn short_lock(lock_ttl: Duration) -> IdempotencyConfig {
    IdempotencyConfig::builder()
        .with_lock_ttl(lock_ttl)
        .with_store_timeout(lock_ttl / 4)
        .build()
        .unwrap()
}

/// The lock is a lease: a handler running four times its lock ttl keeps
/// its key, renewed in Redis, so that every retry meanwhile gets 409 and
/// the payment is made once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Redis at REDIS_URL (default redis://127.0.0.1:6379/)"]
async fn redis_backed_layer_renews_the_lock_of_a_handler_running_past_its_lock_ttl() {
    let s = Scoped::new("lease").await;
    let lock_ttl = Duration::from_millis(600);
    let mut p = Payments::with_config(s.store.clone(), short_lock(lock_ttl));
    let first = {
        let app = p.app.clone();
        tokio::spawn(async move { send_to(app, "/commit", "lease-1", "{}").await })
    };
    p.started.recv().await.unwrap();
    let began = Instant::now();

    let mut retries = 0;
    while began.elapsed() < lock_ttl * 4 {
        // A lost lock would let the retry into the handler, where it waits.
        let retry = timeout(Duration::from_secs(2), p.send("/commit", "lease-1"))
            .await
            .expect("the retry got into the handler: the lock was lost");
        assert_eq!(
            retry.0,
            StatusCode::CONFLICT,
            "retry {retries}, {:?} into the handler: {retry:?}",
            began.elapsed()
        );
        retries += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Renewed, not made permanent: the key still expires within a lock
    // ttl if the holder stops renewing.
    let pttl: i64 = s
        .connection()
        .pttl(s.store.redis_key(&key("lease-1")))
        .unwrap();
    assert!(pttl > 0 && pttl <= 600, "pttl {pttl} ms");

    p.gate.add_permits(1);
    let first = first.await.unwrap();
    assert_eq!(first, (StatusCode::CREATED, false, "paid 1".into()));
    let replay = p.send("/commit", "lease-1").await;
    assert_eq!(replay, (StatusCode::CREATED, true, "paid 1".into()));
    assert!(retries >= 20, "{retries} retries in 2.4 s");
    assert_eq!(p.applied(), 1);
    assert!(p.started.try_recv().is_err(), "the handler started once");
}

/// A holder that took the lock and died (no renewals, no response) blocks
/// its key for one lock ttl, and no longer: then the retry runs the
/// handler, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Redis at REDIS_URL (default redis://127.0.0.1:6379/)"]
async fn redis_backed_layer_runs_the_retry_of_a_crashed_holder_once_its_lock_ttl_passed() {
    let s = Scoped::new("crashed").await;
    let lock_ttl = Duration::from_millis(500);
    let mut p = Payments::with_config(s.store.clone(), short_lock(lock_ttl));
    p.gate.add_permits(10);
    let dead = KeyLease::new(Fingerprint::of(
        &Method::POST,
        &Uri::from_static("/commit"),
        b"{}",
    ));
    let taken = s.store.begin(&key("crash-1"), &dead, lock_ttl).await;
    assert!(matches!(taken, Ok(Claim::Started)), "{taken:?}");
    let began = Instant::now();

    let mut conflicts = 0;
    let reply = loop {
        let reply = p.send("/commit", "crash-1").await;
        if reply.0 != StatusCode::CONFLICT {
            break reply;
        }
        conflicts += 1;
        assert!(began.elapsed() < Duration::from_secs(5), "still locked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let waited = began.elapsed();
    assert_eq!(reply, (StatusCode::CREATED, false, "paid 1".into()));
    // Redis expired the lock: not before its ttl (less the round trip of
    // the `begin`, made before the clock started), and not long after.
    assert!(waited >= lock_ttl - Duration::from_millis(50), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    assert!(conflicts >= 5, "{conflicts} answers 409 while locked");
    assert_eq!(p.applied(), 1);
    assert_eq!(p.started.try_recv(), Ok(()));
    assert!(p.started.try_recv().is_err(), "the handler started once");
}

/// `(status, replayed, body)` of a `POST /payments` with `key` and `{}` as
/// the caller `authorization` names.
async fn send_as(app: Router, authorization: &str, key: &str) -> (StatusCode, bool, String) {
    let request = Request::post("/payments")
        .header("Idempotency-Key", key)
        .header(header::AUTHORIZATION, authorization)
        .body(Body::from("{}"))
        .unwrap();
    let response = app.oneshot(request).await.unwrap();
    let replayed = response.headers().contains_key("x-idempotency-replay");
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, replayed, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
#[ignore = "needs Redis at REDIS_URL (default redis://127.0.0.1:6379/)"]
async fn redis_backed_layer_runs_another_callers_key_for_its_sender_never_replays_their_response() {
    let s = Scoped::new("scope").await;
    let calls = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route(
            "/payments",
            post(
                |State(calls): State<Arc<AtomicUsize>>, headers: HeaderMap| async move {
                    let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                    let caller = headers[header::AUTHORIZATION].to_str().unwrap().to_owned();
                    (StatusCode::CREATED, format!("receipt {n} for {caller}"))
                },
            ),
        )
        .with_state(Arc::clone(&calls))
        .layer(IdempotencyLayer::new(
            s.store.clone(),
            Scope::header(header::AUTHORIZATION),
        ));
    let send = |who: &'static str| send_as(app.clone(), who, "order-42");
    let created = |n: u32, who: &str, replayed: bool| {
        (
            StatusCode::CREATED,
            replayed,
            format!("receipt {n} for {who}"),
        )
    };

    assert_eq!(
        send("Bearer alice").await,
        created(1, "Bearer alice", false)
    );
    // Bob sends Alice's key, path and body: his own payment, not her receipt.
    assert_eq!(send("Bearer bob").await, created(2, "Bearer bob", false));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // Each caller's retry is replayed its own response.
    assert_eq!(send("Bearer alice").await, created(1, "Bearer alice", true));
    assert_eq!(send("Bearer bob").await, created(2, "Bearer bob", true));
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // Two Redis keys, one per caller, neither holding the credential.
    let mut keys = s.keys();
    keys.sort();
    assert_eq!(keys.len(), 2, "{keys:?}");
    for k in &keys {
        let own = k.strip_prefix(&s.prefix).unwrap();
        assert!(own.ends_with(":order-42") && own.len() == 33 + 8, "{k}");
        assert!(
            !k.contains("alice") && !k.contains("bob") && !k.contains("Bearer"),
            "{k}"
        );
    }
}
