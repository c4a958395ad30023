//! The scripted-fault server of `examples/common` does what the HTTP tests
//! and the demo rely on, checked with a bare reqwest client (no retries).

#[path = "../examples/common/mod.rs"]
mod common;

use std::time::Duration;

use common::{FaultServer, PAYMENTS, Reply};

#[tokio::test(start_paused = true)]
async fn scripts_are_played_in_order_then_the_steady_reply() {
    let server = FaultServer::start().await.unwrap();
    server.script_statuses("/user", &[502, 400]);
    server.script("/user", [Reply::RetryAfter(429, 3)]);
    server.body("/user", "ada");
    let client = reqwest::Client::new();
    let mut seen = Vec::new();
    for _ in 0..4 {
        let response = client.get(server.url("/user")).send().await.unwrap();
        let retry_after = response.headers().get("retry-after").cloned();
        seen.push((
            response.status().as_u16(),
            retry_after,
            response.text().await.unwrap(),
        ));
    }
    assert_eq!(seen[0].0, 502);
    assert_eq!(seen[1].0, 400);
    assert_eq!(
        (seen[2].0, seen[2].1.as_ref().unwrap().to_str().unwrap()),
        (429, "3")
    );
    assert_eq!((seen[3].0, seen[3].2.as_str()), (200, "ada"));

    server.always("/user", Reply::Status(503));
    let response = client.get(server.url("/user")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(server.requests_to("/user").len(), 5);
    assert!(server.requests_to("/other").is_empty());
}

#[tokio::test(start_paused = true)]
async fn slow_replies_wait_on_the_paused_clock() {
    let server = FaultServer::start().await.unwrap();
    server.script("/slow", [Reply::Slow(Duration::from_secs(10))]);
    let start = tokio::time::Instant::now();
    let response = reqwest::get(server.url("/slow")).await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(start.elapsed() >= Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn payments_are_deduplicated_by_idempotency_key() {
    let server = FaultServer::start().await.unwrap();
    let client = reqwest::Client::new();
    let post = |key: Option<&str>| {
        let mut request = client.post(server.url(PAYMENTS)).body("amount=10");
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send()
    };

    let missing = post(None).await.unwrap();
    assert_eq!(missing.status().as_u16(), 400);
    assert!(
        missing
            .text()
            .await
            .unwrap()
            .contains("missing_idempotency_key")
    );

    let first = post(Some("k1")).await.unwrap();
    assert_eq!(first.status().as_u16(), 201);
    assert!(first.headers().get("x-idempotency-replay").is_none());
    assert_eq!(first.text().await.unwrap(), "payment 1 created");

    let replay = post(Some("k1")).await.unwrap();
    assert_eq!(replay.headers()["x-idempotency-replay"], "true");
    assert_eq!(replay.text().await.unwrap(), "payment 1 created");

    let other = post(Some("k2")).await.unwrap();
    assert_eq!(other.text().await.unwrap(), "payment 2 created");
    assert_eq!(server.payments_created(), 2);

    let log = server.requests_to(PAYMENTS);
    assert_eq!(log.len(), 4);
    assert_eq!(log[1].idempotency_key.as_deref(), Some("k1"));
    assert!(log[2].replayed);
    assert_eq!(&log[1].body[..], b"amount=10");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_connection_breaks_the_body_not_the_headers() {
    let server = FaultServer::start().await.unwrap();
    server.body("/drop", "a body long enough to be cut in half");
    server.script("/drop", [Reply::DropMidBody]);
    let response = reqwest::get(server.url("/drop")).await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    // reqwest reports a body cut short as a decode error whose source is
    // an `UnexpectedEof`.
    let err = response.bytes().await.unwrap_err();
    let mut source = std::error::Error::source(&err);
    let mut eof = false;
    while let Some(cause) = source {
        eof |= cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::UnexpectedEof);
        source = cause.source();
    }
    assert!(eof, "{err:?}");

    // The server keeps serving on new connections.
    let response = reqwest::get(server.url("/drop")).await.unwrap();
    assert_eq!(
        response.text().await.unwrap(),
        "a body long enough to be cut in half"
    );
}
