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

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use bytes::Bytes;
use http::{HeaderMap, Method, Uri, header};
use http_body_util::BodyExt;
use redis::Commands;
use resilience_runtime::IdempotencyKey;
use resilience_runtime::idempotency::server::{
    Begin, Entry, Fingerprint, IdempotencyLayer, IdempotencyStore, Lease, Outcome, RedisStore,
    StoreError, StoredResponse,
};
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

fn lease(body: &[u8]) -> Lease {
    Lease::new(Fingerprint::of(
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
        Begin::Started
    );
    assert_eq!(s.keys(), [format!("{}pay-1", s.prefix)]);
    let pttl: i64 = s.connection().pttl(s.store.redis_key(&k)).unwrap();
    assert!((59_000..=60_000).contains(&pttl), "lock pttl {pttl}");
    assert_eq!(
        s.store.begin(&k, &theirs, MINUTE).await.unwrap(),
        Begin::Existing(Entry::InFlight {
            fingerprint: mine.fingerprint()
        })
    );

    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
    let outcome = Outcome::Response(StoredResponse::new(
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
        Begin::Existing(Entry::Completed {
            fingerprint: mine.fingerprint(),
            outcome
        })
    );

    let k2 = key("pay-2");
    s.store.begin(&k2, &mine, MINUTE).await.unwrap();
    assert!(s.store.release(&k2, &mine).await.unwrap());
    assert_eq!(
        s.store.begin(&k2, &theirs, MINUTE).await.unwrap(),
        Begin::Started
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
        if task.await.unwrap().unwrap() == Begin::Started {
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
            post(|| async { (StatusCode::SERVICE_UNAVAILABLE, "down") }),
        )
        .with_state(Arc::clone(&calls))
        .layer(IdempotencyLayer::new(s.store.clone()));
    let send = |path: &'static str, key: &'static str, body: &'static str| {
        let app = app.clone();
        async move {
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

    // A failure is not stored: the key is gone, the retry runs again.
    let down = send("/down", "order-43", "{}").await;
    assert_eq!(down.0, StatusCode::SERVICE_UNAVAILABLE);
    let exists: bool = s
        .connection()
        .exists(s.store.redis_key(&key("order-43")))
        .unwrap();
    assert!(!exists);
}
