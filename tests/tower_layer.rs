//! The tower layer (`resilience::tower`) around a hyper client, through the
//! real HTTP stack against the scripted-fault server of `examples/common`
//! on loopback: what reached the server, and what the caller got.

#[path = "../examples/common/mod.rs"]
mod common;

use bytes::Bytes;
use common::{FaultServer, Reply};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use resilience::breaker::{BreakerConfig, CircuitBreaker, State};
use resilience::retry::Policy;
use resilience::retry::RetryOverride;
use resilience::tower::{BoxError, ResilienceLayer};
use resilience::{Error, IdempotencyKey};
use tower::{Service, ServiceBuilder, ServiceExt};

type Body = Full<Bytes>;

/// A hyper client behind `layer`.
fn client(
    layer: ResilienceLayer,
) -> impl Service<
    http::Request<Body>,
    Response = http::Response<hyper::body::Incoming>,
    Error = BoxError,
> + Clone {
    let hyper_client = Client::builder(TokioExecutor::new()).build_http::<Body>();
    ServiceBuilder::new().layer(layer).service(hyper_client)
}

fn request(method: http::Method, url: String) -> http::Request<Body> {
    http::Request::builder()
        .method(method)
        .uri(url)
        .body(Full::new(Bytes::from_static(b"amount=10")))
        .unwrap()
}

async fn send<S>(client: &mut S, request: http::Request<Body>) -> Result<(u16, String), BoxError>
where
    S: Service<
            http::Request<Body>,
            Response = http::Response<hyper::body::Incoming>,
            Error = BoxError,
        >,
{
    let response = client.ready().await?.call(request).await?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[tokio::test(start_paused = true)]
async fn a_get_is_retried_until_it_succeeds() {
    let server = FaultServer::start().await.unwrap();
    server.script_statuses("/user", &[502, 503, 200]);
    server.body("/user", "Ada");
    let mut client = client(ResilienceLayer::new("tower-get", Policy::http()));

    let got = send(&mut client, request(http::Method::GET, server.url("/user"))).await;

    assert_eq!(got.unwrap(), (200, "Ada".to_owned()));
    assert_eq!(server.requests_to("/user").len(), 3);
}

#[tokio::test(start_paused = true)]
async fn the_last_response_is_returned_as_is_and_a_400_is_not_retried() {
    let server = FaultServer::start().await.unwrap();
    server.always("/down", Reply::Status(503));
    server.script_statuses("/bad", &[400]);
    let mut client = client(ResilienceLayer::new("tower-last", Policy::http()));

    let (status, _) = send(&mut client, request(http::Method::GET, server.url("/down")))
        .await
        .unwrap();
    assert_eq!(status, 503);
    assert_eq!(server.requests_to("/down").len(), 3, "max 3 attempts");

    let (status, _) = send(&mut client, request(http::Method::GET, server.url("/bad")))
        .await
        .unwrap();
    assert_eq!(status, 400);
    assert_eq!(server.requests_to("/bad").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_post_is_retried_only_with_an_idempotency_key() {
    let server = FaultServer::start().await.unwrap();
    server.always("/orders", Reply::Status(503));
    let mut client = client(ResilienceLayer::new("tower-post", Policy::http()));

    let (status, _) = send(
        &mut client,
        request(http::Method::POST, server.url("/orders")),
    )
    .await
    .unwrap();
    assert_eq!(status, 503);
    assert_eq!(
        server.requests_to("/orders").len(),
        1,
        "a keyless POST goes out once"
    );

    let key = IdempotencyKey::new();
    let mut keyed = request(http::Method::POST, server.url("/orders"));
    let (header, value) = key.header();
    keyed.headers_mut().insert(header, value.parse().unwrap());
    send(&mut client, keyed).await.unwrap();
    let posts = server.requests_to("/orders");
    assert_eq!(posts.len(), 4, "the keyed POST is retried: 3 attempts");
    assert!(
        posts[1..]
            .iter()
            .all(|p| p.idempotency_key.as_deref() == Some(key.as_str())
                && &p.body[..] == b"amount=10"),
        "every attempt carries the same key and body: {posts:?}"
    );

    // The caller vouches for it: retried without a key.
    let mut vouched = request(http::Method::POST, server.url("/orders"));
    vouched.extensions_mut().insert(RetryOverride::Idempotent);
    send(&mut client, vouched).await.unwrap();
    assert_eq!(server.requests_to("/orders").len(), 7);

    // Marked never: a GET goes out once.
    let mut never = request(http::Method::GET, server.url("/orders"));
    never.extensions_mut().insert(RetryOverride::Never);
    send(&mut client, never).await.unwrap();
    assert_eq!(server.requests_to("/orders").len(), 8);
}

#[tokio::test(start_paused = true)]
async fn the_breaker_counts_one_logical_call_once_and_then_sends_nothing() {
    let server = FaultServer::start().await.unwrap();
    server.always("/stock", Reply::Status(502));
    let breaker = CircuitBreaker::new(
        "tower-stock",
        BreakerConfig::new()
            .with_min_requests(2)
            .with_failure_ratio(0.5),
    )
    .unwrap();
    let layer = ResilienceLayer::new("tower-stock", Policy::http()).with_breaker(breaker.clone());
    let mut client = client(layer);

    let (status, _) = send(
        &mut client,
        request(http::Method::GET, server.url("/stock")),
    )
    .await
    .unwrap();
    assert_eq!(status, 502);
    assert_eq!(server.requests_to("/stock").len(), 3);
    // Three attempts, one logical call: under `min`, still closed.
    let snapshot = breaker.snapshot();
    assert_eq!((snapshot.calls, snapshot.failures), (1, 1));
    assert_eq!(breaker.state(), State::Closed);

    send(
        &mut client,
        request(http::Method::GET, server.url("/stock")),
    )
    .await
    .unwrap();
    assert_eq!(breaker.state(), State::Open);
    assert_eq!(server.requests_to("/stock").len(), 6);

    let rejected = send(
        &mut client,
        request(http::Method::GET, server.url("/stock")),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(rejected.downcast_ref::<Error>(), Some(Error::DependencyDown(down)) if down.breaker() == "tower-stock"),
        "{rejected:?}"
    );
    assert_eq!(
        server.requests_to("/stock").len(),
        6,
        "nothing sent while open"
    );
}

#[tokio::test(start_paused = true)]
async fn a_transport_error_is_retried_and_returned_after_the_last_attempt() {
    // A port nobody listens on: every attempt is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/x", closed.local_addr().unwrap());
    drop(closed);
    let breaker = CircuitBreaker::new("tower-refused", BreakerConfig::new()).unwrap();
    let layer = ResilienceLayer::new("tower-refused", Policy::http()).with_breaker(breaker.clone());
    let mut client = client(layer);

    let err = send(&mut client, request(http::Method::GET, url))
        .await
        .unwrap_err();

    assert!(
        err.downcast_ref::<hyper_util::client::legacy::Error>()
            .is_some_and(|err| err.is_connect()),
        "{err:?}"
    );
    assert_eq!(
        (breaker.snapshot().calls, breaker.snapshot().failures),
        (1, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_hedged_get_is_answered_by_the_second_copy_when_the_first_is_slow() {
    use std::time::Duration;

    let server = FaultServer::start().await.unwrap();
    // The first copy waits a second; the second answers at once.
    server.script("/search", [Reply::Slow(Duration::from_secs(1)), Reply::Ok]);
    server.body("/search", "found");
    server.always("/orders", Reply::Slow(Duration::from_secs(1)));
    let hedge = resilience::retry::Hedge::new("tower-hedge", Duration::from_millis(50), 2).unwrap();
    let mut client = client(ResilienceLayer::new("tower-hedge", Policy::http()).with_hedge(hedge));

    let started = tokio::time::Instant::now();
    let got = send(
        &mut client,
        request(http::Method::GET, server.url("/search")),
    )
    .await;
    assert_eq!(got.unwrap(), (200, "found".to_owned()));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "answered by the hedge, not the slow copy: {:?}",
        started.elapsed()
    );
    assert_eq!(server.requests_to("/search").len(), 2);

    // A keyless POST is sent once: never hedged, however slow.
    let (status, _) = send(
        &mut client,
        request(http::Method::POST, server.url("/orders")),
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    assert_eq!(server.requests_to("/orders").len(), 1);
}
