//! The reqwest integration through the real HTTP stack, against the
//! scripted-fault server of `examples/common` on loopback (`resilience::guide`: what may be retried, idempotency, testing).

#[path = "../examples/common/mod.rs"]
mod common;

use std::time::Duration;

use common::{FaultServer, PAYMENTS, Reply};
use resilience::IdempotencyKey;
use resilience::http::{HttpError, RequestBuilderExt, ResponseExt};
use resilience::retry::{Classify, Event, Policy, Verdict};

/// The HTTP preset; tests that count pauses remove the jitter.
fn policy() -> Policy {
    Policy::http()
}

#[tokio::test(start_paused = true)]
async fn bad_gateway_twice_then_ok_takes_exactly_three_requests() {
    let server = FaultServer::start().await.unwrap();
    server.script_statuses("/user", &[502, 502, 200]);
    server.body("/user", "ada");
    let client = reqwest::Client::new();

    let body = client
        .get(server.url("/user"))
        .with_policy(policy())
        .text()
        .await
        .unwrap();

    assert_eq!(body, "ada");
    let log = server.requests_to("/user");
    assert_eq!(log.len(), 3);
    // The pauses of the preset: ~100 ms then ~200 ms, ±25 %.
    let first = log[1].at - log[0].at;
    let second = log[2].at - log[1].at;
    assert!((75..=125).contains(&first.as_millis()), "{first:?}");
    assert!((150..=250).contains(&second.as_millis()), "{second:?}");
}

#[tokio::test(start_paused = true)]
async fn bad_request_is_sent_once() {
    let server = FaultServer::start().await.unwrap();
    server.script_statuses("/user", &[400, 200]);
    let client = reqwest::Client::new();

    let err = client
        .get(server.url("/user"))
        .with_policy(policy())
        .send()
        .await
        .unwrap_err();

    assert_eq!(server.requests_to("/user").len(), 1);
    assert_eq!(err.status().map(|s| s.as_u16()), Some(400));
    assert_eq!(err.classify(), Verdict::Permanent);
    let HttpError::Status(status) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(status.body(), "scripted 400");
    assert!(
        err.to_string()
            .starts_with("HTTP 400 Bad Request from http://127.0.0.1:"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn too_many_requests_waits_for_retry_after() {
    let server = FaultServer::start().await.unwrap();
    server.script("/user", [Reply::RetryAfter(429, 1), Reply::Ok]);
    let client = reqwest::Client::new();

    let mut delays = Vec::new();
    let response = Policy::http()
        .retry(|| async {
            client
                .get(server.url("/user"))
                .send()
                .await?
                .check()
                .await
                .map_err(HttpError::from)
        })
        .notify(|event: &Event<'_, HttpError>| {
            if let Event::Retry { delay, verdict, .. } = event {
                delays.push((*delay, *verdict));
            }
        })
        .await
        .unwrap();

    assert_eq!(response.status().as_u16(), 200);
    let log = server.requests_to("/user");
    assert_eq!(log.len(), 2);
    assert!(log[1].at - log[0].at >= Duration::from_secs(1));
    assert_eq!(
        delays,
        [(
            Duration::from_secs(1),
            Verdict::RetryAfter(Duration::from_secs(1))
        )]
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_beyond_the_budget_gives_up_at_once() {
    let server = FaultServer::start().await.unwrap();
    server.script("/user", [Reply::RetryAfter(429, 60), Reply::Ok]);
    let client = reqwest::Client::new();

    let err = client
        .get(server.url("/user"))
        .with_policy(policy())
        .send()
        .await
        .unwrap_err();

    assert_eq!(server.requests_to("/user").len(), 1);
    let HttpError::Status(status) = err else {
        panic!("{err:?}")
    };
    assert_eq!(status.retry_after(), Some(Duration::from_secs(60)));
}

#[tokio::test(start_paused = true)]
async fn a_post_carries_the_same_key_and_body_on_every_attempt() {
    let server = FaultServer::start().await.unwrap();
    // The first attempt creates the payment, and its response is lost.
    server.script(
        PAYMENTS,
        [Reply::Status(503), Reply::DropMidBody, Reply::Ok],
    );
    let client = reqwest::Client::new();
    let key = IdempotencyKey::new();

    let (replayed, receipt) = client
        .post(server.url(PAYMENTS))
        .idempotency_key(&key)
        .body("amount=10")
        .with_policy(policy())
        .read_with(|response| async move {
            let replayed = response.headers().contains_key("x-idempotency-replay");
            Ok((replayed, response.text().await?))
        })
        .await
        .unwrap();

    let log = server.requests_to(PAYMENTS);
    assert_eq!(log.len(), 3);
    for request in &log {
        assert_eq!(request.idempotency_key.as_deref(), Some(key.as_str()));
        // On the wire, the IETF draft's Structured Field String.
        let quoted = format!("\"{}\"", key.as_str());
        assert_eq!(request.idempotency_header.as_deref(), Some(&*quoted));
        assert_eq!(&request.body[..], b"amount=10");
    }
    assert!(replayed);
    assert_eq!(receipt, "payment 1 created");
    assert_eq!(server.payments_created(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_post_without_a_key_is_refused_before_it_is_sent() {
    let server = FaultServer::start().await.unwrap();
    let client = reqwest::Client::new();

    let err = client
        .post(server.url(PAYMENTS))
        .body("amount=10")
        .with_policy(policy())
        .send()
        .await
        .unwrap_err();

    assert!(
        matches!(err, HttpError::MissingIdempotencyKey { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("`POST http://127.0.0.1:"), "{err}");
    assert_eq!(err.classify(), Verdict::Permanent);
    assert!(server.requests().is_empty());

    // Without retries, nothing to protect.
    let once = Policy::builder().with_max_attempts(1).build().unwrap();
    let err = client
        .post(server.url(PAYMENTS))
        .with_policy(once)
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.status().map(|s| s.as_u16()), Some(400));
}

#[tokio::test(start_paused = true)]
async fn a_streaming_body_is_refused_before_the_first_attempt() {
    let server = FaultServer::start().await.unwrap();
    let client = reqwest::Client::new();

    let err = client
        .put(server.url("/blob"))
        .body(reqwest::Body::wrap(String::from("streamed")))
        .with_policy(policy())
        .send()
        .await
        .unwrap_err();

    assert!(
        matches!(err, HttpError::BodyNotReplayable { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("is a stream and cannot be sent again"),
        "{err}"
    );
    assert_eq!(err.classify(), Verdict::Permanent);
    assert!(server.requests().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_connection_dropped_mid_response_is_retried() {
    let server = FaultServer::start().await.unwrap();
    server.body("/user", "a body long enough to be cut in half");
    server.script("/user", [Reply::DropMidBody, Reply::Ok]);
    let client = reqwest::Client::new();

    let mut errors = Vec::new();
    let request = client.get(server.url("/user")).replayable().unwrap();
    let body = Policy::http()
        .retry(|| async {
            let response = request.send().await?;
            Ok::<_, HttpError>(response.bytes().await?)
        })
        .notify(|event: &Event<'_, HttpError>| {
            if let Event::Retry { error, verdict, .. } = event {
                errors.push((error.to_string(), *verdict));
            }
        })
        .await
        .unwrap();

    assert_eq!(&body[..], b"a body long enough to be cut in half");
    assert_eq!(server.requests_to("/user").len(), 2);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].1, Verdict::Transient);
}

#[tokio::test(start_paused = true)]
async fn a_slow_server_is_cut_by_the_attempt_timeout_and_retried() {
    let server = FaultServer::start().await.unwrap();
    server.script("/user", [Reply::Slow(Duration::from_secs(30)), Reply::Ok]);
    let client = reqwest::Client::new();
    let policy = Policy::http()
        .to_builder()
        .with_attempt_timeout(Duration::from_secs(1))
        .build()
        .unwrap();

    let body = client
        .get(server.url("/user"))
        .with_policy(policy)
        .text()
        .await
        .unwrap();

    assert_eq!(body, "ok /user");
    assert_eq!(server.requests_to("/user").len(), 2);
}

#[tokio::test(start_paused = true)]
async fn reqwest_errors_follow_the_table() {
    // Connection refused: a port that was just released.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let client = reqwest::Client::new();
    let refused = client
        .get(format!("http://127.0.0.1:{port}/"))
        .send()
        .await
        .unwrap_err();
    assert!(refused.is_connect(), "{refused:?}");
    assert_eq!(refused.classify(), Verdict::Transient);

    let builder = client.get("not a url").send().await.unwrap_err();
    assert!(builder.is_builder(), "{builder:?}");
    assert_eq!(builder.classify(), Verdict::Permanent);

    let server = FaultServer::start().await.unwrap();
    server.script_statuses("/s", &[503, 404]);
    for expected in [Verdict::Transient, Verdict::Permanent] {
        let status = client
            .get(server.url("/s"))
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap_err();
        assert_eq!(status.classify(), expected, "{status:?}");
    }

    // A success has nothing to retry.
    let ok = client.get(server.url("/s")).send().await.unwrap();
    assert_eq!(ok.verdict(), Verdict::Permanent);
}

/// The error of the hanging-server fns: an HTTP error, or the runtime's.
#[derive(Debug, thiserror::Error, resilience::Classify)]
enum HangError {
    #[error(transparent)]
    #[classify(source)]
    Http(#[from] HttpError),
    #[error(transparent)]
    #[classify(runtime)]
    Resilience(resilience::Error),
}

#[resilience::circuit_breaker(name = "hangs-forever", min = 2, call_timeout = "2s")]
async fn get_hanging(client: &reqwest::Client, url: &str) -> Result<String, HangError> {
    fetch(client, url).await
}

#[resilience::circuit_breaker(
    name = "hangs-forever-fallback",
    min = 2,
    call_timeout = "2s",
    fallback = hanging_fallback
)]
async fn get_hanging_or_fallback(client: &reqwest::Client, url: &str) -> Result<String, HangError> {
    fetch(client, url).await
}

async fn fetch(client: &reqwest::Client, url: &str) -> Result<String, HangError> {
    let response = client.get(url).send().await.map_err(HttpError::from)?;
    Ok(response.text().await.map_err(HttpError::from)?)
}

async fn hanging_fallback(
    _: &reqwest::Client,
    _: &str,
    error: HangError,
) -> Result<String, HangError> {
    Err(error)
}

/// A `#[circuit_breaker]` fn alone, with no deadline in scope, against a
/// server that never answers: each call is cut at `call_timeout` and
/// counts as a failure, so the breaker opens after `min` calls and the
/// next call never leaves. Before, the caller waited forever and the
/// breaker never heard of it. The same with a `fallback =`.
#[tokio::test(start_paused = true)]
async fn a_breaker_alone_cuts_a_server_that_never_answers_and_opens() {
    let server = FaultServer::start().await.unwrap();
    let client = reqwest::Client::new();
    for (path, fallback) in [("/hangs", false), ("/hangs-fallback", true)] {
        let url = server.url(path);
        server.script(path, vec![Reply::Slow(Duration::from_secs(24 * 3600)); 3]);
        let call = || async {
            if fallback {
                get_hanging_or_fallback(&client, &url).await
            } else {
                get_hanging(&client, &url).await
            }
        };
        for _ in 0..2 {
            let started = tokio::time::Instant::now();
            let err = call().await.unwrap_err();
            assert_eq!(started.elapsed(), Duration::from_secs(2), "{path}");
            assert!(
                matches!(err, HangError::Resilience(resilience::Error::AttemptTimeout(t)) if t == Duration::from_secs(2)),
                "{path}: {err:?}"
            );
        }
        let err = call().await.unwrap_err();
        assert!(
            matches!(
                err,
                HangError::Resilience(resilience::Error::DependencyDown(_))
            ),
            "{path}: {err:?}"
        );
        assert_eq!(
            server.requests_to(path).len(),
            2,
            "{path}: the third never left"
        );
    }
}
