//! The `reqwest-middleware` layer through the real HTTP stack, against the
//! scripted-fault server of `examples/common` on loopback.

#[path = "../examples/common/mod.rs"]
mod common;

use common::{FaultServer, PAYMENTS, Reply};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use resilience::IdempotencyKey;
use resilience::breaker::{BreakerConfig, CircuitBreaker, State};
use resilience::http::{HttpError, ResilienceMiddleware};
use resilience::registry::Registry;
use resilience::retry::Policy;
use resilience::retry::RetryOverride;

fn client(policy: Policy) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(ResilienceMiddleware::new("test-service", policy))
        .build()
}

/// Sends "streamed" to `url` as a body that cannot be sent twice.
async fn streamed(
    client: &ClientWithMiddleware,
    method: reqwest::Method,
    url: String,
    asked: Option<RetryOverride>,
) -> reqwest::Response {
    let mut request = client
        .request(method, url)
        .body(reqwest::Body::wrap(String::from("streamed")));
    if let Some(asked) = asked {
        request = request.with_extension(asked);
    }
    request.send().await.unwrap()
}

/// A client whose layer has a breaker that opens after 2 failed requests.
fn behind_a_breaker(name: &'static str) -> (CircuitBreaker, ClientWithMiddleware) {
    let breaker = CircuitBreaker::new(
        name,
        BreakerConfig::new()
            .with_min_requests(2)
            .with_failure_ratio(0.5),
    )
    .unwrap();
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(ResilienceMiddleware::new(name, Policy::http()).with_breaker(breaker.clone()))
        .build();
    (breaker, client)
}

#[tokio::test(start_paused = true)]
async fn every_request_of_the_client_is_retried() {
    let server = FaultServer::start().await.unwrap();
    server.script_statuses("/user", &[502, 502, 200]);
    let client = client(Policy::http());

    let response = client.get(server.url("/user")).send().await.unwrap();

    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.text().await.unwrap(), "ok /user");
    assert_eq!(server.requests_to("/user").len(), 3);
}

#[tokio::test(start_paused = true)]
async fn the_last_response_is_returned_as_is_once_the_attempts_are_spent() {
    let server = FaultServer::start().await.unwrap();
    server.always("/user", Reply::Status(503));
    server.script_statuses("/bad", &[400]);
    let client = client(Policy::http());

    let response = client.get(server.url("/user")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(response.text().await.unwrap(), "scripted 503");
    assert_eq!(server.requests_to("/user").len(), 3);

    let response = client.get(server.url("/bad")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(server.requests_to("/bad").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_post_keeps_its_key_and_body_across_attempts() {
    let server = FaultServer::start().await.unwrap();
    server.script_statuses(PAYMENTS, &[503, 502]);
    let client = client(Policy::http());
    let key = IdempotencyKey::new();
    let (name, value) = key.header();

    let response = client
        .post(server.url(PAYMENTS))
        .header(name, &value)
        .body("amount=10")
        .send()
        .await
        .unwrap();

    assert!(response.headers().get("x-idempotency-replay").is_none());
    assert_eq!(response.text().await.unwrap(), "payment 1 created");
    let log = server.requests_to(PAYMENTS);
    assert_eq!(log.len(), 3);
    assert!(
        log.iter()
            .all(|r| r.idempotency_key.as_deref() == Some(key.as_str()))
    );
    assert!(log.iter().all(|r| &r.body[..] == b"amount=10"));
    assert_eq!(server.payments_created(), 1);

    // The same logical call sent again (say, after a crash) is replayed.
    let again = client
        .post(server.url(PAYMENTS))
        .header(name, value)
        .body("amount=10")
        .send()
        .await
        .unwrap();
    assert_eq!(again.headers()["x-idempotency-replay"], "true");
    assert_eq!(server.payments_created(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_keyless_post_and_a_streaming_body_are_sent_exactly_once() {
    let server = FaultServer::start().await.unwrap();
    server.always(PAYMENTS, Reply::Status(503));
    server.always("/blob", Reply::Status(503));
    let client = client(Policy::http());

    // Without a key a retry could charge twice: one attempt, and the
    // caller gets the server's answer as it is.
    let response = client
        .post(server.url(PAYMENTS))
        .body("amount=10")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    let log = server.requests_to(PAYMENTS);
    assert_eq!(log.len(), 1);
    assert_eq!(&log[0].body[..], b"amount=10");
    assert_eq!(log[0].idempotency_key, None);

    // A stream is consumed by the first attempt.
    let response = streamed(&client, reqwest::Method::PUT, server.url("/blob"), None).await;
    assert_eq!(response.status().as_u16(), 503);
    let log = server.requests_to("/blob");
    assert_eq!(log.len(), 1);
    assert_eq!(&log[0].body[..], b"streamed");
}

#[tokio::test(start_paused = true)]
async fn a_keyless_post_still_goes_through_the_breaker() {
    let server = FaultServer::start().await.unwrap();
    server.always(PAYMENTS, Reply::Status(503));
    let (breaker, client) = behind_a_breaker("payments");
    for _ in 0..2 {
        let response = client.post(server.url(PAYMENTS)).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 503);
    }
    assert_eq!(server.requests_to(PAYMENTS).len(), 2);
    assert_eq!(breaker.state(), State::Open);

    let err = client.post(server.url(PAYMENTS)).send().await.unwrap_err();
    let reqwest_middleware::Error::Middleware(err) = err else {
        panic!("{err:?}")
    };
    assert!(
        err.downcast_ref::<HttpError>()
            .unwrap()
            .is_dependency_down()
    );
    assert_eq!(server.requests_to(PAYMENTS).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_request_can_override_the_layer() {
    let server = FaultServer::start().await.unwrap();
    server.script_statuses("/user", &[502, 200]);
    server.script_statuses("/reports", &[502, 502, 200]);
    let client = client(Policy::http());

    // Never: a GET the policy would retry goes out once.
    let response = client
        .get(server.url("/user"))
        .with_extension(RetryOverride::Never)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 502);
    assert_eq!(server.requests_to("/user").len(), 1);

    // Idempotent: a keyless POST the caller vouches for is retried.
    let response = client
        .post(server.url("/reports"))
        .body("query")
        .with_extension(RetryOverride::Idempotent)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let log = server.requests_to("/reports");
    assert_eq!(log.len(), 3);
    assert!(log.iter().all(|r| &r.body[..] == b"query"));

    // Idempotent cannot make a stream replayable: still once.
    server.always("/blob", Reply::Status(503));
    let response = streamed(
        &client,
        reqwest::Method::POST,
        server.url("/blob"),
        Some(RetryOverride::Idempotent),
    )
    .await;
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(server.requests_to("/blob").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_rejects_requests_without_sending_them() {
    let server = FaultServer::start().await.unwrap();
    server.always("/user", Reply::Status(503));
    let (breaker, client) = behind_a_breaker("users");

    // Two requests, three attempts each: the breaker counts two failures.
    for _ in 0..2 {
        let response = client.get(server.url("/user")).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 503);
    }
    assert_eq!(server.requests_to("/user").len(), 6);
    assert_eq!(breaker.state(), State::Open);

    let err = client.get(server.url("/user")).send().await.unwrap_err();
    let reqwest_middleware::Error::Middleware(err) = err else {
        panic!("{err:?}")
    };
    let err = err.downcast_ref::<HttpError>().unwrap();
    assert!(err.is_dependency_down(), "{err:?}");
    assert_eq!(
        err.to_string(),
        "dependency down: circuit breaker `users` is open"
    );
    assert_eq!(server.requests_to("/user").len(), 6);
}

#[tokio::test(start_paused = true)]
async fn a_single_attempt_sends_even_a_streaming_body() {
    let server = FaultServer::start().await.unwrap();
    let once = Policy::builder().with_max_attempts(1).build().unwrap();
    let client = client(once);

    let response = streamed(&client, reqwest::Method::PUT, server.url("/blob"), None).await;

    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(&server.requests_to("/blob")[0].body[..], b"streamed");
}

#[cfg(feature = "config-file")]
#[tokio::test(start_paused = true)]
async fn a_named_layer_takes_its_policy_and_breaker_from_the_registry() {
    let registry = Registry::builder()
        .config_str(
            "[breakers.payments]\nmin = 1\nratio = 0.5\n\n[retry.payments]\nmax_attempts = 2\n",
            "inline",
        )
        .unwrap()
        .build()
        .unwrap();
    let layer = ResilienceMiddleware::from_registry(&registry, "payments");
    assert_eq!(layer.policy().max_attempts(), 2);
    let breaker = layer.breaker().unwrap().clone();
    assert_eq!(breaker.name(), "payments");
    let server = FaultServer::start().await.unwrap();
    server.always("/pay", Reply::Status(502));
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(layer)
        .build();
    let response = client.get(server.url("/pay")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 502);
    assert_eq!(server.requests_to("/pay").len(), 2);
    // The layer's breaker is the registry's: it tripped for everyone.
    assert_eq!(
        registry.breaker("payments", BreakerConfig::new()).state(),
        State::Open
    );
    assert!(client.get(server.url("/pay")).send().await.is_err());
    assert_eq!(server.requests_to("/pay").len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_hedged_get_is_answered_by_the_second_copy_when_the_first_is_slow() {
    use std::time::Duration;

    let server = FaultServer::start().await.unwrap();
    server.script("/search", [Reply::Slow(Duration::from_secs(1)), Reply::Ok]);
    server.body("/search", "found");
    server.always("/orders", Reply::Slow(Duration::from_secs(1)));
    let hedge = resilience::retry::Hedge::new("http-hedge", Duration::from_millis(50), 2).unwrap();
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(ResilienceMiddleware::new("http-hedge", Policy::http()).with_hedge(hedge))
        .build();

    let started = tokio::time::Instant::now();
    let response = client.get(server.url("/search")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.text().await.unwrap(), "found");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "answered by the hedge, not the slow copy: {:?}",
        started.elapsed()
    );
    assert_eq!(server.requests_to("/search").len(), 2);

    // A keyless POST is sent once: never hedged, however slow.
    let response = client
        .post(server.url("/orders"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(server.requests_to("/orders").len(), 1);
}
