//! The idempotency layer in front of a real axum router.
//!
//! `cargo test -p resilience-runtime --features idempotency-server`

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use http_body_util::BodyExt;
use resilience_runtime::IdempotencyKey;
use resilience_runtime::idempotency::server::{
    Claim, Completion, EffectNotApplied, Entry, Fingerprint, IdempotencyConfig, IdempotencyLayer,
    IdempotencyStore, KeyLease, MemoryStore, Scope, StoreError,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::{Instant, timeout};
use tower::ServiceExt;

#[derive(Clone)]
struct Handlers {
    calls: Arc<AtomicUsize>,
    /// Statuses `/flaky` answers, in order; 201 once exhausted.
    script: Arc<Mutex<VecDeque<u16>>>,
    /// `/slow` reports its start here, then waits for a permit.
    started: mpsc::UnboundedSender<()>,
    gate: Arc<Semaphore>,
}

struct Harness {
    app: Router,
    store: Arc<MemoryStore>,
    calls: Arc<AtomicUsize>,
    started: mpsc::UnboundedReceiver<()>,
    gate: Arc<Semaphore>,
}

impl Harness {
    fn new() -> Self {
        Self::with(IdempotencyConfig::default(), MemoryStore::default(), [])
    }

    fn with(
        config: IdempotencyConfig,
        store: MemoryStore,
        script: impl IntoIterator<Item = u16>,
    ) -> Self {
        let store = Arc::new(store);
        Self::around(config, Arc::clone(&store), store, script)
    }

    /// A harness whose layer uses a [`Faulty`] memory store.
    fn faulty(config: IdempotencyConfig, faults: &Arc<Faults>) -> Self {
        let memory = Arc::new(MemoryStore::default());
        let store = Faulty {
            inner: Arc::clone(&memory),
            faults: Arc::clone(faults),
        };
        Self::around(config, store, memory, [])
    }

    /// The layer uses `layer_store`, which keeps its keys in `store`.
    fn around(
        config: IdempotencyConfig,
        layer_store: impl IdempotencyStore,
        store: Arc<MemoryStore>,
        script: impl IntoIterator<Item = u16>,
    ) -> Self {
        let (tx, started) = mpsc::unbounded_channel();
        let handlers = Handlers {
            calls: Arc::default(),
            script: Arc::new(Mutex::new(script.into_iter().collect())),
            started: tx,
            gate: Arc::new(Semaphore::new(0)),
        };
        let app = Router::new()
            .route(
                "/payments",
                post(create_payment)
                    .patch(create_payment)
                    .get(list)
                    .put(list)
                    .delete(list),
            )
            .route("/flaky", post(flaky))
            .route("/marked", post(marked))
            .route("/panics", post(panics))
            .route("/commit", post(commit))
            .route("/slow", post(slow))
            .route("/big", post(big))
            .route("/broken", post(broken))
            .with_state(handlers.clone())
            .layer(IdempotencyLayer::with_config(
                layer_store,
                Scope::unscoped(),
                config,
            ));
        Self {
            app,
            store,
            calls: handlers.calls,
            started,
            gate: handlers.gate,
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    async fn send(&self, request: Request<Body>) -> Reply {
        Reply::read(self.app.clone().oneshot(request).await.unwrap()).await
    }
}

async fn create_payment(State(h): State<Handlers>, body: Bytes) -> Response {
    let n = h.calls.fetch_add(1, Ordering::SeqCst) + 1;
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
    headers.insert(header::LOCATION, format!("/payments/{n}").parse().unwrap());
    headers.insert(header::SET_COOKIE, "session=secret".parse().unwrap());
    headers.insert("x-request-number", n.to_string().parse().unwrap());
    let body = format!(
        r#"{{"payment":{n},"request":{}}}"#,
        String::from_utf8_lossy(&body)
    );
    (StatusCode::CREATED, headers, body).into_response()
}

async fn list(State(h): State<Handlers>) -> &'static str {
    h.calls.fetch_add(1, Ordering::SeqCst);
    "[]"
}

async fn flaky(State(h): State<Handlers>) -> Response {
    let n = h.calls.fetch_add(1, Ordering::SeqCst) + 1;
    let status = h.script.lock().unwrap().pop_front().unwrap_or(201);
    (StatusCode::from_u16(status).unwrap(), format!("answer {n}")).into_response()
}

/// Like `/flaky`, but a status other than 201 carries `EffectNotApplied`.
async fn marked(State(h): State<Handlers>) -> Response {
    let mut response = flaky(State(h)).await;
    if response.status() != StatusCode::CREATED {
        response.extensions_mut().insert(EffectNotApplied);
    }
    response
}

async fn panics(State(h): State<Handlers>) -> Response {
    h.calls.fetch_add(1, Ordering::SeqCst);
    panic!("the handler panics after its effect");
}

/// Reports its start, waits for a permit, then applies its effect.
async fn commit(State(h): State<Handlers>) -> (StatusCode, String) {
    h.started.send(()).unwrap();
    h.gate.acquire().await.unwrap().forget();
    let n = h.calls.fetch_add(1, Ordering::SeqCst) + 1;
    (StatusCode::CREATED, format!("paid {n}"))
}

async fn slow(State(h): State<Handlers>) -> String {
    let n = h.calls.fetch_add(1, Ordering::SeqCst) + 1;
    h.started.send(()).unwrap();
    h.gate.acquire().await.unwrap().forget();
    format!("slow {n}")
}

async fn big(State(h): State<Handlers>) -> Vec<u8> {
    h.calls.fetch_add(1, Ordering::SeqCst);
    vec![b'x'; 100]
}

/// A `201` whose body sends one chunk, then fails.
async fn broken(State(h): State<Handlers>) -> Response {
    h.calls.fetch_add(1, Ordering::SeqCst);
    (StatusCode::CREATED, Body::new(FailsMidway(false))).into_response()
}

struct FailsMidway(bool);

impl http_body::Body for FailsMidway {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        let sent = std::mem::replace(&mut self.0, true);
        std::task::Poll::Ready(Some(if sent {
            Err(std::io::Error::other("database went away"))
        } else {
            Ok(http_body::Frame::data(Bytes::from_static(b"{\"id\":")))
        }))
    }
}

/// Faults a [`Faulty`] store injects, switched on and off by the test.
#[derive(Default)]
struct Faults {
    /// `begin` takes the key, then never answers: its answer is lost.
    hang_begin: AtomicBool,
    /// `complete` never answers (and does nothing).
    hang_complete: AtomicBool,
    /// `renew` fails (and does nothing).
    fail_renew: AtomicBool,
}

/// A memory store that hangs where told to.
struct Faulty {
    inner: Arc<MemoryStore>,
    faults: Arc<Faults>,
}

impl IdempotencyStore for Faulty {
    fn name(&self) -> &str {
        "faulty-memory"
    }

    async fn begin(
        &self,
        key: &IdempotencyKey,
        lease: &KeyLease,
        lock_ttl: Duration,
    ) -> Result<Claim, StoreError> {
        let begun = self.inner.begin(key, lease, lock_ttl).await;
        if self.faults.hang_begin.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        begun
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        lease: &KeyLease,
        outcome: &Completion,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        if self.faults.hang_complete.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.inner.complete(key, lease, outcome, ttl).await
    }

    async fn renew(
        &self,
        key: &IdempotencyKey,
        lease: &KeyLease,
        lock_ttl: Duration,
    ) -> Result<bool, StoreError> {
        if self.faults.fail_renew.load(Ordering::SeqCst) {
            return Err(StoreError::Backend("renew refused by the test".into()));
        }
        self.inner.renew(key, lease, lock_ttl).await
    }

    async fn release(&self, key: &IdempotencyKey, lease: &KeyLease) -> Result<bool, StoreError> {
        self.inner.release(key, lease).await
    }
}

fn request(method: Method, path: &str, key: Option<&str>, body: &'static str) -> Request<Body> {
    let mut builder = Request::builder().method(method).uri(path);
    if let Some(key) = key {
        builder = builder.header("Idempotency-Key", key);
    }
    builder.body(Body::from(body)).unwrap()
}

fn post_req(path: &str, key: &str, body: &'static str) -> Request<Body> {
    request(Method::POST, path, Some(key), body)
}

#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Reply {
    async fn read(response: Response) -> Self {
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        Self {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8(body.to_vec()).unwrap(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    fn replayed(&self) -> bool {
        self.header("x-idempotency-replay") == Some("true")
    }

    #[track_caller]
    fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status.as_u16(), status, "{self:?}");
        assert_eq!(self.header("content-type"), Some("application/json"));
        assert!(
            self.body
                .starts_with(&format!(r#"{{"error":"{code}","message":""#)),
            "{self:?}"
        );
    }
}

#[tokio::test]
async fn a_post_without_a_key_is_refused_before_the_handler() {
    let h = Harness::new();
    for method in [Method::POST, Method::PATCH] {
        let reply = h.send(request(method, "/payments", None, "{}")).await;
        reply.assert_error(400, "missing_idempotency_key");
        assert!(reply.body.contains("Idempotency-Key header is required"));
    }
    assert_eq!(h.calls(), 0);
}

#[tokio::test]
async fn a_malformed_key_is_refused_naming_the_problem() {
    let h = Harness::new();
    let long = "k".repeat(256);
    for (key, names) in [
        ("two words", "\\\"two words\\\""),
        ("", "1 to 255 visible ASCII characters"),
        (long.as_str(), "256 bytes long"),
    ] {
        let reply = h.send(post_req("/payments", key, "{}")).await;
        reply.assert_error(400, "invalid_idempotency_key");
        assert!(reply.body.contains(names), "{key:?}: {}", reply.body);
    }

    let not_ascii = Request::post("/payments")
        .header("Idempotency-Key", &b"caf\xc3\xa9"[..])
        .body(Body::empty())
        .unwrap();
    let reply = h.send(not_ascii).await;
    reply.assert_error(400, "invalid_idempotency_key");
    assert!(reply.body.contains("not visible ASCII"), "{}", reply.body);

    let twice = Request::post("/payments")
        .header("Idempotency-Key", "a")
        .header("Idempotency-Key", "b")
        .body(Body::empty())
        .unwrap();
    let reply = h.send(twice).await;
    reply.assert_error(400, "invalid_idempotency_key");
    assert!(reply.body.contains("more than once"), "{}", reply.body);
    assert_eq!(h.calls(), 0);
}

#[tokio::test]
async fn a_huge_key_is_not_echoed_back_in_full() {
    // Found by fuzzing: the 400 body repeated a 10 KB key in full.
    let h = Harness::new();
    let huge = "k".repeat(10_000);
    let reply = h.send(post_req("/payments", &huge, "{}")).await;
    reply.assert_error(400, "invalid_idempotency_key");
    assert!(reply.body.contains("10000 bytes"), "{}", reply.body);
    assert!(reply.body.len() < 1_000, "{} bytes", reply.body.len());

    let huge_not_ascii = Request::post("/payments")
        .header("Idempotency-Key", "é".repeat(5_000).as_bytes())
        .body(Body::empty())
        .unwrap();
    let reply = h.send(huge_not_ascii).await;
    reply.assert_error(400, "invalid_idempotency_key");
    assert!(reply.body.contains("not visible ASCII"), "{}", reply.body);
    assert!(reply.body.len() < 1_000, "{} bytes", reply.body.len());
    assert_eq!(h.calls(), 0);
}

#[tokio::test]
async fn safe_and_idempotent_methods_pass_through_untouched() {
    let h = Harness::new();
    for method in [Method::GET, Method::PUT, Method::DELETE, Method::GET] {
        let reply = h.send(request(method, "/payments", None, "")).await;
        assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "[]"));
        assert!(!reply.replayed());
    }
    // Even with a key: those methods are never stored.
    h.send(request(Method::PUT, "/payments", Some("k"), ""))
        .await;
    h.send(request(Method::PUT, "/payments", Some("k"), ""))
        .await;
    assert_eq!(h.calls(), 6);
    assert!(h.store.is_empty());
}

#[tokio::test]
async fn the_guarded_methods_are_configurable() {
    let config = IdempotencyConfig::builder()
        .with_methods([Method::POST])
        .build()
        .unwrap();
    let h = Harness::with(config, MemoryStore::default(), []);
    let patch = h
        .send(request(Method::PATCH, "/payments", None, "{}"))
        .await;
    assert_eq!(patch.status, StatusCode::CREATED);
    let post = h.send(request(Method::POST, "/payments", None, "{}")).await;
    post.assert_error(400, "missing_idempotency_key");
    assert_eq!(h.calls(), 1);
}

#[tokio::test]
async fn a_replay_returns_the_stored_response_without_running_the_handler() {
    let h = Harness::new();
    let first = h
        .send(post_req("/payments", "pay-1", r#"{"amount":100}"#))
        .await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(first.body, r#"{"payment":1,"request":{"amount":100}}"#);
    assert!(!first.replayed());
    // The first client gets every header the handler set.
    assert_eq!(first.header("set-cookie"), Some("session=secret"));
    assert_eq!(first.header("x-request-number"), Some("1"));

    for _ in 0..3 {
        let replay = h
            .send(post_req("/payments", "pay-1", r#"{"amount":100}"#))
            .await;
        assert!(replay.replayed(), "{replay:?}");
        assert_eq!(replay.status, StatusCode::CREATED);
        assert_eq!(replay.body, first.body);
        assert_eq!(replay.header("content-type"), Some("application/json"));
        assert_eq!(replay.header("location"), Some("/payments/1"));
        // Only the selected headers are stored.
        assert_eq!(replay.header("set-cookie"), None);
        assert_eq!(replay.header("x-request-number"), None);
    }
    assert_eq!(h.calls(), 1);

    // Another key is another payment.
    let other = h
        .send(post_req("/payments", "pay-2", r#"{"amount":100}"#))
        .await;
    assert_eq!(other.body, r#"{"payment":2,"request":{"amount":100}}"#);
}

#[tokio::test]
async fn a_key_reused_for_another_request_gets_422() {
    let h = Harness::new();
    h.send(post_req("/payments", "k", r#"{"amount":100}"#))
        .await;
    for other in [
        post_req("/payments", "k", r#"{"amount":999}"#),
        post_req("/payments?currency=eur", "k", r#"{"amount":100}"#),
        request(Method::PATCH, "/payments", Some("k"), r#"{"amount":100}"#),
    ] {
        h.send(other)
            .await
            .assert_error(422, "idempotency_key_reused");
    }
    assert_eq!(h.calls(), 1);
}

#[tokio::test]
async fn fingerprint_headers_keep_two_callers_with_one_key_apart() {
    let config = IdempotencyConfig::builder()
        .with_fingerprint_headers([header::HeaderName::from_static("x-api-key")])
        .build()
        .unwrap();
    let h = Harness::with(config, MemoryStore::default(), []);
    let as_caller = |caller: &str| {
        let mut request = post_req("/payments", "1", "{}");
        request
            .headers_mut()
            .insert("x-api-key", caller.parse().unwrap());
        request
    };
    let alice = h.send(as_caller("alice")).await;
    assert_eq!(alice.status, StatusCode::CREATED);
    assert!(h.send(as_caller("alice")).await.replayed());
    h.send(as_caller("bob"))
        .await
        .assert_error(422, "idempotency_key_reused");
    h.send(post_req("/payments", "1", "{}"))
        .await
        .assert_error(422, "idempotency_key_reused");
    assert_eq!(h.calls(), 1);
}

#[tokio::test]
async fn concurrent_requests_with_one_key_run_the_handler_once_and_the_second_gets_409() {
    let mut h = Harness::new();
    let first = tokio::spawn(h.app.clone().oneshot(post_req("/slow", "k", "{}")));
    h.started.recv().await.unwrap();

    let second = h.send(post_req("/slow", "k", "{}")).await;
    second.assert_error(409, "idempotency_key_in_use");
    assert_eq!(second.header("retry-after"), Some("1"));
    // A concurrent request with another body is a reused key, not a wait.
    h.send(post_req("/slow", "k", "{\"other\":1}"))
        .await
        .assert_error(422, "idempotency_key_reused");
    assert!(matches!(
        h.store.get(&IdempotencyKey::from_string("k").unwrap()),
        Some(Entry::InFlight { .. })
    ));

    h.gate.add_permits(1);
    let first = Reply::read(first.await.unwrap().unwrap()).await;
    assert_eq!(first.body, "slow 1");
    let third = h.send(post_req("/slow", "k", "{}")).await;
    assert!(third.replayed());
    assert_eq!(third.body, "slow 1");
    assert_eq!(h.calls(), 1);
}

#[tokio::test]
async fn a_handler_that_commits_then_answers_500_is_replayed_not_run_again() {
    // The handler applies its effect (the counter), then fails: without
    // the marker its 5xx is final for the key.
    let h = Harness::with(IdempotencyConfig::default(), MemoryStore::default(), [500]);
    let first = h.send(post_req("/flaky", "k", "{}")).await;
    assert_eq!(
        (first.status.as_u16(), first.body.as_str()),
        (500, "answer 1")
    );
    assert!(!first.replayed());
    for _ in 0..2 {
        let retry = h.send(post_req("/flaky", "k", "{}")).await;
        assert!(retry.replayed(), "{retry:?}");
        assert_eq!(
            (retry.status.as_u16(), retry.body.as_str()),
            (500, "answer 1")
        );
    }
    assert_eq!(h.calls(), 1, "applied once");
}

#[tokio::test]
async fn a_5xx_marked_effect_not_applied_frees_the_key_so_the_retry_runs_the_handler() {
    let h = Harness::with(
        IdempotencyConfig::default(),
        MemoryStore::default(),
        [503, 502],
    );
    for (n, status) in [(1, 503), (2, 502), (3, 201)] {
        let reply = h.send(post_req("/marked", "k", "{}")).await;
        assert_eq!(reply.status.as_u16(), status);
        assert_eq!(reply.body, format!("answer {n}"));
        assert!(!reply.replayed());
    }
    let replay = h.send(post_req("/marked", "k", "{}")).await;
    assert!(replay.replayed());
    assert_eq!(
        (replay.status.as_u16(), replay.body.as_str()),
        (201, "answer 3")
    );
    assert_eq!(h.calls(), 3);
}

#[tokio::test]
async fn statuses_that_say_unprocessed_408_and_429_free_the_key() {
    let h = Harness::with(
        IdempotencyConfig::default(),
        MemoryStore::default(),
        [429, 408],
    );
    for (n, status) in [(1, 429), (2, 408), (3, 201)] {
        let reply = h.send(post_req("/flaky", "k", "{}")).await;
        assert_eq!((reply.status.as_u16(), reply.replayed()), (status, false));
        assert_eq!(reply.body, format!("answer {n}"));
    }
    assert!(h.send(post_req("/flaky", "k", "{}")).await.replayed());
    assert_eq!(h.calls(), 3);
}

#[tokio::test]
async fn a_handler_that_panics_is_final_for_its_key() {
    let h = Harness::new();
    let first = h.send(post_req("/panics", "k", "{}")).await;
    first.assert_error(500, "idempotency_handler_failed");
    assert!(first.body.contains("may have applied"), "{}", first.body);
    let retry = h.send(post_req("/panics", "k", "{}")).await;
    retry.assert_error(500, "idempotency_handler_failed");
    assert!(retry.replayed());
    assert_eq!(h.calls(), 1);
}

#[tokio::test]
async fn business_errors_are_stored_like_successes() {
    let h = Harness::with(IdempotencyConfig::default(), MemoryStore::default(), [409]);
    let first = h.send(post_req("/flaky", "k", "{}")).await;
    let replay = h.send(post_req("/flaky", "k", "{}")).await;
    assert_eq!((first.status.as_u16(), replay.status.as_u16()), (409, 409));
    assert!(replay.replayed());
    assert_eq!(replay.body, "answer 1");
    assert_eq!(h.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn responses_are_replayed_for_24_hours_then_forgotten() {
    let h = Harness::new();
    h.send(post_req("/payments", "k", "{}")).await;
    tokio::time::advance(Duration::from_secs(24 * 3600 - 1)).await;
    assert!(h.send(post_req("/payments", "k", "{}")).await.replayed());
    tokio::time::advance(Duration::from_secs(1)).await;
    let fresh = h.send(post_req("/payments", "k", "{}")).await;
    assert!(!fresh.replayed());
    assert_eq!(fresh.body, r#"{"payment":2,"request":{}}"#);
}

#[tokio::test(start_paused = true)]
async fn a_handler_outliving_the_lock_ttl_keeps_its_key_and_runs_once() {
    // Before the lock was renewed, the retry below ran the payment a
    // second time once the lock ttl had passed.
    let config = IdempotencyConfig::builder()
        .with_lock_ttl(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut h = Harness::with(config, MemoryStore::default(), []);
    let slow = tokio::spawn(h.app.clone().oneshot(post_req("/slow", "k", "{}")));
    h.started.recv().await.unwrap();
    // `sleep`, not `advance`: the paused clock then fires every renewal in
    // its turn, as time would pass for a real server.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        h.send(post_req("/slow", "k", "{}"))
            .await
            .assert_error(409, "idempotency_key_in_use");
    }
    h.gate.add_permits(1);
    let slow = Reply::read(slow.await.unwrap().unwrap()).await;
    assert_eq!(slow.body, "slow 1");
    let replay = h.send(post_req("/slow", "k", "{}")).await;
    assert!(replay.replayed());
    assert_eq!(replay.body, "slow 1");
    assert_eq!(h.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_crashed_holder_blocks_its_key_for_one_lock_ttl_of_ten_seconds() {
    let h = Harness::new();
    // A process that took the key and died: its lock is never renewed.
    let key = IdempotencyKey::from_string("k").unwrap();
    let body_fingerprint = Fingerprint::of(&Method::POST, &"/payments".parse().unwrap(), b"{}");
    let dead = KeyLease::new(body_fingerprint);
    let lock_ttl = IdempotencyConfig::default().lock_ttl();
    assert_eq!(lock_ttl, Duration::from_secs(10));
    assert_eq!(
        h.store.begin(&key, &dead, lock_ttl).await.unwrap(),
        Claim::Started
    );
    tokio::time::advance(lock_ttl - Duration::from_millis(1)).await;
    h.send(post_req("/payments", "k", "{}"))
        .await
        .assert_error(409, "idempotency_key_in_use");
    tokio::time::advance(Duration::from_millis(1)).await;
    let fresh = h.send(post_req("/payments", "k", "{}")).await;
    assert_eq!(fresh.status, StatusCode::CREATED, "{fresh:?}");
    assert_eq!(h.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_lock_survives_one_failed_renewal_and_is_lost_after_a_whole_lock_ttl_of_them() {
    let faults = Arc::new(Faults::default());
    // Renewed every 2 s, each renewal worth 6 s.
    let config = IdempotencyConfig::builder()
        .with_lock_ttl(Duration::from_secs(6))
        .build()
        .unwrap();
    let mut h = Harness::faulty(config, &faults);
    let slow = tokio::spawn(h.app.clone().oneshot(post_req("/slow", "k", "{}")));
    h.started.recv().await.unwrap();
    let until = |secs: f64| tokio::time::sleep(Duration::from_secs_f64(secs));
    until(2.5).await; // renewed at 2 s: the lock ends at 8 s
    faults.fail_renew.store(true, Ordering::SeqCst);
    until(2.0).await; // 4 s: the renewal fails
    faults.fail_renew.store(false, Ordering::SeqCst);
    until(2.0).await; // 6 s: renewed, the lock ends at 12 s
    faults.fail_renew.store(true, Ordering::SeqCst);
    until(5.0).await; // 11.5 s: the renewals at 8 s and 10 s failed
    h.send(post_req("/slow", "k", "{}"))
        .await
        .assert_error(409, "idempotency_key_in_use");

    // Renewals failing for a whole lock ttl: at 12 s the key is free.
    until(1.0).await;
    let again = tokio::spawn(h.app.clone().oneshot(post_req("/slow", "k", "{}")));
    h.started.recv().await.unwrap();
    h.gate.add_permits(2);
    slow.await.unwrap().unwrap();
    again.await.unwrap().unwrap();
    assert_eq!(h.calls(), 2);
}

#[tokio::test]
async fn a_cancelled_request_still_runs_its_handler_to_the_end_and_records_it() {
    let mut h = Harness::new();
    let first = tokio::spawn(h.app.clone().oneshot(post_req("/slow", "k", "{}")));
    h.started.recv().await.unwrap();
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    // The handler runs on, detached: the key is still in flight.
    h.send(post_req("/slow", "k", "{}"))
        .await
        .assert_error(409, "idempotency_key_in_use");
    h.gate.add_permits(1);
    let replay = wait_for_replay(&h, || post_req("/slow", "k", "{}")).await;
    assert_eq!(replay.body, "slow 1");
    assert_eq!(h.calls(), 1);
}

/// Retries like a client told `409` + `Retry-After`, until the replay.
async fn wait_for_replay(h: &Harness, request: impl Fn() -> Request<Body>) -> Reply {
    for _ in 0..200 {
        let reply = h.send(request()).await;
        if reply.status != StatusCode::CONFLICT {
            assert!(reply.replayed(), "{reply:?}");
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("still in flight");
}

#[tokio::test]
async fn a_response_over_the_storage_limit_is_delivered_once_then_refused() {
    let config = IdempotencyConfig::builder()
        .with_max_stored_body(99)
        .build()
        .unwrap();
    let h = Harness::with(config, MemoryStore::default(), []);
    let first = h.send(post_req("/big", "k", "{}")).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body, "x".repeat(100));
    let again = h.send(post_req("/big", "k", "{}")).await;
    again.assert_error(409, "idempotency_response_not_stored");
    assert!(
        again.body.contains("status 200") && again.body.contains("99 bytes"),
        "{}",
        again.body
    );
    assert_eq!(h.calls(), 1);

    // At the limit it is stored.
    let config = IdempotencyConfig::builder()
        .with_max_stored_body(100)
        .build()
        .unwrap();
    let h = Harness::with(config, MemoryStore::default(), []);
    h.send(post_req("/big", "k", "{}")).await;
    let replay = h.send(post_req("/big", "k", "{}")).await;
    assert!(replay.replayed());
    assert_eq!(replay.body.len(), 100);
}

#[tokio::test]
async fn a_response_body_failing_midway_keeps_the_key_so_the_work_is_not_redone() {
    let h = Harness::new();
    let first = h
        .app
        .clone()
        .oneshot(post_req("/broken", "k", "{}"))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let err = first.into_body().collect().await.unwrap_err();
    assert!(err.to_string().contains("database went away"), "{err}");

    let retry = h.send(post_req("/broken", "k", "{}")).await;
    retry.assert_error(409, "idempotency_response_not_stored");
    assert!(
        retry.body.contains("status 201") && retry.body.contains("body failed"),
        "{}",
        retry.body
    );
    assert_eq!(h.calls(), 1);
}

#[tokio::test]
async fn a_request_body_over_the_limit_gets_413() {
    let config = IdempotencyConfig::builder()
        .with_max_request_body(4)
        .build()
        .unwrap();
    let h = Harness::with(config, MemoryStore::default(), []);
    h.send(post_req("/payments", "k", "12345"))
        .await
        .assert_error(413, "request_body_too_large");
    assert_eq!(h.send(post_req("/payments", "k", "1234")).await.status, 201);
    assert_eq!(h.calls(), 1);
}

#[tokio::test]
async fn a_full_store_answers_503_and_never_runs_the_handler_unprotected() {
    let h = Harness::with(
        IdempotencyConfig::default(),
        MemoryStore::new(1).unwrap(),
        [],
    );
    h.send(post_req("/payments", "a", "{}")).await;
    let reply = h.send(post_req("/payments", "b", "{}")).await;
    reply.assert_error(503, "idempotency_store_unavailable");
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert_eq!(h.calls(), 1);
}

#[tokio::test]
async fn through_a_real_http_server_on_loopback() {
    let h = Harness::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(axum::serve(listener, h.app.clone()).into_future());

    let mut answers = Vec::new();
    for _ in 0..2 {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(
                b"POST /payments HTTP/1.1\r\nHost: test\r\nIdempotency-Key: order-42\r\n\
                  Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
            )
            .await
            .unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await.unwrap();
        answers.push(raw.to_ascii_lowercase());
    }
    server.abort();

    let body = r#"{"payment":1,"request":{}}"#;
    for answer in &answers {
        assert!(answer.starts_with("http/1.1 201 created\r\n"), "{answer}");
        assert!(answer.contains(&format!("content-length: {}\r\n", body.len())));
        assert!(answer.ends_with(body), "{answer}");
    }
    assert!(!answers[0].contains("x-idempotency-replay"));
    assert!(answers[1].contains("x-idempotency-replay: true\r\n"));
    assert_eq!(h.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_hung_store_answers_503_within_the_store_timeout_and_leaves_no_key_locked() {
    let faults = Arc::new(Faults::default());
    faults.hang_begin.store(true, Ordering::SeqCst);
    let h = Harness::faulty(IdempotencyConfig::default(), &faults);

    let asked = Instant::now();
    let reply = timeout(
        Duration::from_secs(60),
        h.send(post_req("/payments", "k", "{}")),
    )
    .await
    .expect("a hung store must not hang the request");
    let waited = asked.elapsed();
    assert!(
        (Duration::from_secs(1)..Duration::from_millis(1010)).contains(&waited),
        "answered after {waited:?}, the store timeout is 1s"
    );
    reply.assert_error(503, "idempotency_store_unavailable");
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert!(
        reply
            .body
            .contains("store `faulty-memory` failed on `begin` (no answer within 1s)"),
        "{}",
        reply.body
    );
    assert_eq!(h.calls(), 0, "the handler never ran");

    // That begin took the key before its answer was lost: the layer frees
    // it, so the client's retry is not locked out for the lock ttl.
    faults.hang_begin.store(false, Ordering::SeqCst);
    for _ in 0..100 {
        if h.store.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        h.store.is_empty(),
        "{:?}",
        h.store.get(&IdempotencyKey::from_string("k").unwrap())
    );
    let retry = h.send(post_req("/payments", "k", "{}")).await;
    assert_eq!(
        (retry.status, retry.replayed()),
        (StatusCode::CREATED, false)
    );
    assert_eq!(h.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_store_timeout_is_configurable() {
    let faults = Arc::new(Faults::default());
    faults.hang_begin.store(true, Ordering::SeqCst);
    let config = IdempotencyConfig::builder()
        .with_store_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let h = Harness::faulty(config, &faults);
    let asked = Instant::now();
    let reply = h.send(post_req("/payments", "k", "{}")).await;
    reply.assert_error(503, "idempotency_store_unavailable");
    assert!(
        asked.elapsed() < Duration::from_millis(60),
        "{:?}",
        asked.elapsed()
    );
    assert!(
        reply.body.contains("no answer within 50ms"),
        "{}",
        reply.body
    );
}

#[tokio::test(start_paused = true)]
async fn a_hung_complete_does_not_hold_the_response_back_and_the_key_is_completed_later() {
    let faults = Arc::new(Faults::default());
    faults.hang_complete.store(true, Ordering::SeqCst);
    let h = Harness::faulty(IdempotencyConfig::default(), &faults);

    let asked = Instant::now();
    let first = timeout(
        Duration::from_secs(60),
        h.send(post_req("/payments", "k", "{}")),
    )
    .await
    .expect("a hung complete must not hold the response");
    let waited = asked.elapsed();
    assert!(
        (Duration::from_secs(1)..Duration::from_millis(1010)).contains(&waited),
        "answered after {waited:?}, the store timeout is 1s"
    );
    assert_eq!(
        (first.status, first.replayed()),
        (StatusCode::CREATED, false)
    );
    // Not completed yet, but never run twice: the key is still in flight.
    h.send(post_req("/payments", "k", "{}"))
        .await
        .assert_error(409, "idempotency_key_in_use");

    // The store recovers: the layer's background retries complete the key.
    faults.hang_complete.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let replay = h.send(post_req("/payments", "k", "{}")).await;
    assert!(replay.replayed(), "{replay:?}");
    assert_eq!(replay.body, first.body);
    assert_eq!(h.calls(), 1);
}

/// Serves `app` on a loopback port of its own.
async fn serve(app: Router) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, server)
}

/// One request on a new connection; the raw answer, lowercased.
async fn exchange(addr: std::net::SocketAddr, raw: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer.to_ascii_lowercase()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resetting_its_connection_mid_handler_gets_the_replay_not_a_second_effect() {
    let mut h = Harness::new();
    let (addr, server) = serve(h.app.clone()).await;
    let raw = "POST /commit HTTP/1.1\r\nHost: test\r\nIdempotency-Key: pay-7\r\n\
               Content-Length: 2\r\nConnection: close\r\n\r\n{}";

    let mut first = TcpStream::connect(addr).await.unwrap();
    first.write_all(raw.as_bytes()).await.unwrap();
    h.started.recv().await.unwrap();
    // The client goes away while the handler is blocked: RST, not FIN.
    first.set_zero_linger().unwrap();
    drop(first);
    // Time for hyper to see the reset and drop the request's future.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let retry = timeout(Duration::from_secs(5), exchange(addr, raw))
        .await
        .expect("the retry must not run the handler again");
    assert!(retry.starts_with("http/1.1 409 conflict\r\n"), "{retry}");
    assert!(retry.contains("retry-after: 1\r\n"), "{retry}");

    h.gate.add_permits(1);
    let mut replay = String::new();
    for _ in 0..200 {
        replay = timeout(Duration::from_secs(5), exchange(addr, raw))
            .await
            .unwrap();
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
    assert_eq!(h.calls(), 1, "applied once");
    assert!(h.started.try_recv().is_err(), "the handler started once");
}

/// (status, replayed, body) of a `POST /payments` with `key` and `{}`, as
/// the caller `authorization` names (none if `None`).
async fn send_as(
    app: Router,
    authorization: Option<&str>,
    key: &str,
) -> (StatusCode, bool, String) {
    let mut request = Request::post("/payments").header("Idempotency-Key", key);
    if let Some(authorization) = authorization {
        request = request.header(header::AUTHORIZATION, authorization);
    }
    let response = app
        .oneshot(request.body(Body::from("{}")).unwrap())
        .await
        .unwrap();
    let replayed = response.headers().contains_key("x-idempotency-replay");
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, replayed, String::from_utf8(body.to_vec()).unwrap())
}

/// `POST /payments` answers a receipt numbered by its call count, for the
/// caller its `Authorization` header names, behind a layer scoped by `scope`.
fn payments(scope: Scope) -> (Router, Arc<MemoryStore>, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(MemoryStore::default());
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
        .layer(IdempotencyLayer::new(Arc::clone(&store), scope));
    (app, store, calls)
}

#[tokio::test]
async fn another_callers_key_runs_the_handler_for_its_sender_never_replays_their_response() {
    let (app, store, calls) = payments(Scope::header(header::AUTHORIZATION));
    let send = |who: &'static str| send_as(app.clone(), Some(who), "order-42");
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
    // The store never saw the key as sent, nor a credential.
    assert!(
        store
            .get(&IdempotencyKey::from_string("order-42").unwrap())
            .is_none()
    );

    // No caller, no idempotency: 400, and the handler does not run.
    let (status, replayed, body) = send_as(app.clone(), None, "order-42").await;
    assert_eq!((status, replayed), (StatusCode::BAD_REQUEST, false));
    assert!(body.contains("\"missing_idempotency_scope\""), "{body}");
    assert!(body.contains("`authorization` header"), "{body}");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn unscoped_replays_one_callers_response_to_another_as_its_docs_warn() {
    let (app, _store, calls) = payments(Scope::unscoped());
    let alice = send_as(app.clone(), Some("Bearer alice"), "order-42").await;
    let bob = send_as(app.clone(), Some("Bearer bob"), "order-42").await;
    assert_eq!(
        alice,
        (
            StatusCode::CREATED,
            false,
            "receipt 1 for Bearer alice".into()
        )
    );
    assert_eq!(
        bob,
        (
            StatusCode::CREATED,
            true,
            "receipt 1 for Bearer alice".into()
        )
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_principal_scope_reads_what_the_authentication_layer_put_in_the_extensions() {
    #[derive(Clone)]
    struct Principal(String);
    // A stand-in for authentication: the bearer token names the principal;
    // a request without one reaches the layer unauthenticated.
    async fn authenticate(
        mut request: axum::extract::Request,
        next: axum::middleware::Next,
    ) -> Response {
        let principal = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|name| Principal(name.to_owned()));
        if let Some(principal) = principal {
            request.extensions_mut().insert(principal);
        }
        next.run(request).await
    }
    let calls = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route(
            "/payments",
            post(
                |State(calls): State<Arc<AtomicUsize>>,
                 axum::Extension(p): axum::Extension<Principal>| async move {
                    let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                    (StatusCode::CREATED, format!("receipt {n} for {}", p.0))
                },
            ),
        )
        .with_state(Arc::clone(&calls))
        .layer(IdempotencyLayer::new(
            MemoryStore::default(),
            Scope::from_fn(|request| request.extensions.get::<Principal>().map(|p| p.0.clone())),
        ))
        .layer(axum::middleware::from_fn(authenticate));
    let send = |who: Option<&'static str>| send_as(app.clone(), who, "order-42");

    assert_eq!(
        send(Some("Bearer alice")).await,
        (StatusCode::CREATED, false, "receipt 1 for alice".into())
    );
    assert_eq!(
        send(Some("Bearer bob")).await,
        (StatusCode::CREATED, false, "receipt 2 for bob".into())
    );
    assert_eq!(
        send(Some("Bearer alice")).await,
        (StatusCode::CREATED, true, "receipt 1 for alice".into())
    );
    let (status, _, body) = send(None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("\"missing_idempotency_scope\""), "{body}");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
