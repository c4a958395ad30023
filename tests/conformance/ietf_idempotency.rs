//! The IETF draft "The Idempotency-Key HTTP Header Field"
//! (ietf-wg-httpapi/idempotency at dab060c,
//! `draft-ietf-httpapi-idempotency-key-header.md`): its stated behaviours
//! (§2.1 syntax and examples, §2.6 enforcement, §2.7 error scenarios)
//! against our server layer, [`IdempotencyLayer`] over the
//! [`MemoryStore`], and the header our client sends.
//!
//! The draft has no test suite: each test quotes the sentence it checks.
//!
//! How we differ, deliberately:
//!
//! - **A bare key is accepted** as the same key as its quoted form
//!   (`k-1` and `"k-1"`): clients wrote it bare before the draft, and a
//!   strict RFC 8941 parser would refuse a bare UUID starting with a digit.
//!   Our client sends the draft's quoted form.
//! - **The key inside the string has a published format**, 1 to 255
//!   visible ASCII characters (§5: "establish a fixed format"): a valid
//!   Structured Field String holding a space (`"order 42"`) or nothing
//!   (`""`) is refused with 400 `invalid_idempotency_key`.
//! - **The error bodies** are `{"error": code, "message": text}` JSON, not
//!   RFC 9457 problem details, and carry no link to documentation.
//! - **409 carries `Retry-After: 1`**, which the draft does not ask for:
//!   our client waits that long and retries with the same key.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use http_body_util::BodyExt;
use resilience::IdempotencyKey;
use resilience::http::RequestBuilderExt;
use resilience::idempotency::server::{IdempotencyLayer, MemoryStore, Scope};
use tokio::sync::{Semaphore, mpsc};
use tower::ServiceExt;

use crate::common::{FaultServer, PAYMENTS};

/// The draft's two examples (§2.1): a UUID and a random string.
const UUID_EXAMPLE: &str = r#""8e03978e-40d5-43e8-bc93-6894a57f9324""#;
const RANDOM_EXAMPLE: &str = r#""clkyoesmbgybucifusbbtdsbohtyuuwz""#;

#[derive(Clone)]
struct Orders {
    created: Arc<AtomicUsize>,
    started: mpsc::UnboundedSender<()>,
    gate: Arc<Semaphore>,
}

/// `POST /orders` creates an order (201), `POST /declined` answers a
/// business error (402), `POST /slow` waits for the test's permit, behind
/// the layer with its defaults.
struct Server {
    app: Router,
    created: Arc<AtomicUsize>,
    started: mpsc::UnboundedReceiver<()>,
    gate: Arc<Semaphore>,
}

impl Server {
    fn new() -> Self {
        let (tx, started) = mpsc::unbounded_channel();
        let orders = Orders {
            created: Arc::default(),
            started: tx,
            gate: Arc::new(Semaphore::new(0)),
        };
        let app = Router::new()
            .route("/orders", post(create))
            .route("/declined", post(declined))
            .route("/slow", post(slow))
            .with_state(orders.clone())
            .layer(IdempotencyLayer::new(
                MemoryStore::default(),
                Scope::unscoped(),
            ));
        Self {
            app,
            created: orders.created,
            started,
            gate: orders.gate,
        }
    }

    fn created(&self) -> usize {
        self.created.load(Ordering::SeqCst)
    }

    async fn post(&self, path: &str, key: Option<&str>, body: &'static str) -> Reply {
        let response = self.app.clone().oneshot(request(path, key, body)).await;
        Reply::read(response.unwrap()).await
    }
}

fn request(path: &str, key: Option<&str>, body: &'static str) -> Request<Body> {
    let mut request = Request::post(path);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.body(Body::from(body)).unwrap()
}

async fn create(State(orders): State<Orders>, body: Bytes) -> (StatusCode, String) {
    let n = orders.created.fetch_add(1, Ordering::SeqCst) + 1;
    let body = String::from_utf8_lossy(&body);
    (
        StatusCode::CREATED,
        format!(r#"{{"order":{n},"request":{body}}}"#),
    )
}

async fn declined(State(orders): State<Orders>) -> (StatusCode, String) {
    let n = orders.created.fetch_add(1, Ordering::SeqCst) + 1;
    (StatusCode::PAYMENT_REQUIRED, format!("declined {n}"))
}

async fn slow(State(orders): State<Orders>) -> String {
    let n = orders.created.fetch_add(1, Ordering::SeqCst) + 1;
    orders.started.send(()).unwrap();
    orders.gate.acquire().await.unwrap().forget();
    format!("slow {n}")
}

#[derive(Debug)]
struct Reply {
    status: u16,
    replayed: bool,
    retry_after: Option<String>,
    body: String,
}

impl Reply {
    async fn read(response: axum::response::Response) -> Self {
        let (parts, body) = response.into_parts();
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        Self {
            status: parts.status.as_u16(),
            replayed: header("x-idempotency-replay").as_deref() == Some("true"),
            retry_after: header("retry-after"),
            body: String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap(),
        }
    }

    #[track_caller]
    fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{self:?}");
        assert!(
            self.body.starts_with(&format!(r#"{{"error":"{code}""#)),
            "{self:?}"
        );
    }
}

/// §2.7: "If the Idempotency-Key request header is missing for a
/// documented idempotent operation requiring this header, the resource
/// SHOULD reply with an HTTP 400 status code".
#[tokio::test]
async fn a_missing_key_is_400() {
    let server = Server::new();
    let reply = server.post("/orders", None, r#"{"item":"book"}"#).await;
    reply.assert_error(400, "missing_idempotency_key");
    assert_eq!(server.created(), 0);
}

/// §2.7: "If there is an attempt to reuse an idempotency key with a
/// different request payload, the resource SHOULD reply with a HTTP 422
/// status code"; §2.2: the key "MUST NOT be reused with another request
/// with a different request payload".
#[tokio::test]
async fn a_key_reused_with_another_payload_is_422() {
    let server = Server::new();
    let first = server
        .post("/orders", Some(UUID_EXAMPLE), r#"{"item":"book"}"#)
        .await;
    assert_eq!(first.status, 201);
    let reused = server
        .post("/orders", Some(UUID_EXAMPLE), r#"{"item":"lamp"}"#)
        .await;
    reused.assert_error(422, "idempotency_key_reused");
    assert_eq!(server.created(), 1);
}

/// §2.6: "If the request is retried, while the original request is still
/// being processed, the resource server SHOULD respond with a resource
/// conflict error"; §2.7: "the resource server SHOULD reply with a HTTP
/// 409 status code"; clients need not correct the request before retrying
/// a 409: the same request after the original completed gets its result.
#[tokio::test]
async fn a_retry_while_the_original_is_outstanding_is_409() {
    let mut server = Server::new();
    let original = tokio::spawn(server.app.clone().oneshot(request(
        "/slow",
        Some(RANDOM_EXAMPLE),
        "{}",
    )));
    server.started.recv().await.unwrap();

    let retry = server.post("/slow", Some(RANDOM_EXAMPLE), "{}").await;
    retry.assert_error(409, "idempotency_key_in_use");
    assert_eq!(retry.retry_after.as_deref(), Some("1"));

    server.gate.add_permits(1);
    let original = Reply::read(original.await.unwrap().unwrap()).await;
    assert_eq!((original.status, original.body.as_str()), (200, "slow 1"));
    let uncorrected = server.post("/slow", Some(RANDOM_EXAMPLE), "{}").await;
    assert!(uncorrected.replayed, "{uncorrected:?}");
    assert_eq!(uncorrected.body, "slow 1");
    assert_eq!(server.created(), 1);
}

/// §2.6: "If the request is retried, after the original request completed
/// […] the resource server SHOULD respond with the result of the
/// previously completed operation, success or an error."
#[tokio::test]
async fn a_duplicate_after_completion_gets_the_previous_result_success_or_error() {
    let server = Server::new();
    let first = server
        .post("/orders", Some(UUID_EXAMPLE), r#"{"item":"book"}"#)
        .await;
    assert_eq!((first.status, first.replayed), (201, false));
    for _ in 0..2 {
        let again = server
            .post("/orders", Some(UUID_EXAMPLE), r#"{"item":"book"}"#)
            .await;
        assert_eq!((again.status, again.replayed), (201, true));
        assert_eq!(again.body, first.body);
    }

    let error = server.post("/declined", Some(RANDOM_EXAMPLE), "{}").await;
    assert_eq!((error.status, error.body.as_str()), (402, "declined 2"));
    let again = server.post("/declined", Some(RANDOM_EXAMPLE), "{}").await;
    assert_eq!((again.status, again.replayed), (402, true));
    assert_eq!(again.body, "declined 2");
    assert_eq!(server.created(), 2);
}

/// §2.1: "Idempotency-Key is an Item Structured Header […]. Its value MUST
/// be a String"; the examples `"8e03978e-40d5-43e8-bc93-6894a57f9324"`
/// and `"clkyoesmbgybucifusbbtdsbohtyuuwz"` are two keys, each replayed,
/// and the string's content is the key (the bare form is the same key,
/// module docs).
#[tokio::test]
async fn the_drafts_examples_are_keys() {
    let server = Server::new();
    for (n, example) in [UUID_EXAMPLE, RANDOM_EXAMPLE].into_iter().enumerate() {
        let first = server.post("/orders", Some(example), "{}").await;
        assert_eq!((first.status, first.replayed), (201, false), "{example}");
        assert_eq!(
            first.body,
            format!(r#"{{"order":{},"request":{{}}}}"#, n + 1)
        );
        let quoted = server.post("/orders", Some(example), "{}").await;
        let bare = server
            .post("/orders", Some(example.trim_matches('"')), "{}")
            .await;
        for again in [quoted, bare] {
            assert_eq!((again.status, again.replayed), (201, true), "{example}");
            assert_eq!(again.body, first.body);
        }
        let key = IdempotencyKey::from_header(example).unwrap();
        assert_eq!(key.as_str(), example.trim_matches('"'));
    }
    assert_eq!(server.created(), 2);
}

/// §2.1 and RFC 8941 §3.3.3: `sf-string = DQUOTE *chr DQUOTE`, with `\"`
/// and `\\` the only escapes. Escaped keys are read unescaped; a value
/// that is no sf-string, once it opens with a quote, is a 400. A valid
/// string outside our published key format (a space, or empty) is a 400
/// too (module docs).
#[tokio::test]
async fn the_header_is_a_structured_field_string() {
    let server = Server::new();
    let escaped = server
        .post("/orders", Some(r#""order\"42\\a""#), "{}")
        .await;
    assert_eq!(escaped.status, 201);
    let same = IdempotencyKey::from_string(r#"order"42\a"#).unwrap();
    assert_eq!(same.header_value(), r#""order\"42\\a""#);
    let replay = server
        .post("/orders", Some(&same.header_value()), "{}")
        .await;
    assert!(replay.replayed, "{replay:?}");

    for malformed in [r#"""#, r#""unterminated"#, r#""a"b""#, r#""a\x""#] {
        server
            .post("/orders", Some(malformed), "{}")
            .await
            .assert_error(400, "invalid_idempotency_key");
    }
    for outside_our_format in [r#""order 42""#, r#""""#] {
        server
            .post("/orders", Some(outside_our_format), "{}")
            .await
            .assert_error(400, "invalid_idempotency_key");
    }
    assert_eq!(server.created(), 1);
}

/// §2.1 and §2.2 from the client's side: the header carries the key as a
/// String (`"…"`), a UUID by default ("It is RECOMMENDED that UUID
/// [RFC4122] or a similar random identifier be used"), the same on a
/// retry; the server reads it as the key it stores.
#[tokio::test(start_paused = true)]
async fn the_client_sends_the_drafts_form() {
    let example = IdempotencyKey::from_header(UUID_EXAMPLE).unwrap();
    assert_eq!(example.header_value(), UUID_EXAMPLE);
    assert_eq!(example.header(), ("Idempotency-Key", UUID_EXAMPLE.into()));
    let random = IdempotencyKey::new();
    let value = random.header_value();
    assert_eq!(value.len(), 2 + 36);
    assert_eq!(value, format!("\"{}\"", random.as_str()));
    assert_eq!(random.as_str().as_bytes()[14], b'4', "UUID version 4");

    let server = FaultServer::start().await.unwrap();
    let client = reqwest::Client::new();
    for _ in 0..2 {
        let response = client
            .post(server.url(PAYMENTS))
            .idempotency_key(&example)
            .body("{}")
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{response:?}");
    }
    let log = server.requests_to(PAYMENTS);
    assert_eq!(log.len(), 2);
    for logged in &log {
        assert_eq!(logged.idempotency_header.as_deref(), Some(UUID_EXAMPLE));
        assert_eq!(logged.idempotency_key.as_deref(), Some(example.as_str()));
    }
    assert!(!log[0].replayed && log[1].replayed, "{log:?}");
    assert_eq!(server.payments_created(), 1);
}
