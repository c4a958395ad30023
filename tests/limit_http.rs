//! Load limiting in the HTTP layers (`with_limit` on the reqwest
//! middleware and the tower layer), through the real HTTP stack against
//! the scripted-fault server of `examples/common` on loopback: a slot is
//! held per attempt, a shed attempt is not sent nor retried, ends the call
//! with `Error::Overloaded`, and counts for nothing in the breaker.

#[path = "../examples/common/mod.rs"]
mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{FaultServer, Reply};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use reqwest_middleware::ClientBuilder;
use resilience::Error;
use resilience::breaker::{BreakerConfig, CircuitBreaker, State};
use resilience::http::{HttpError, ResilienceMiddleware};
use resilience::limit::{Bulkhead, Limiter, Priority, ShedBy};
use resilience::retry::Policy;
use resilience::tower::ResilienceLayer;
use tower::{Service, ServiceBuilder, ServiceExt};

fn overloaded(err: &reqwest_middleware::Error) -> Option<resilience::Overloaded> {
    let reqwest_middleware::Error::Middleware(err) = err else {
        return None;
    };
    match err.downcast_ref::<HttpError>()? {
        HttpError::Resilience(Error::Overloaded(shed)) => Some(*shed),
        _ => None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_full_bulkhead_sheds_the_request_before_it_is_sent_and_the_breaker_ignores_it() {
    let server = FaultServer::start().await.unwrap();
    server.always("/slow", Reply::Slow(Duration::from_millis(500)));
    let breaker = CircuitBreaker::new(
        "limited",
        BreakerConfig::new()
            .with_min_requests(2)
            .with_failure_ratio(0.5),
    )
    .unwrap();
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(
            ResilienceMiddleware::new("limited", Policy::http())
                .with_breaker(breaker.clone())
                .with_limit(Limiter::bulkhead(Bulkhead::new("limited", 1).unwrap())),
        )
        .build();
    let first = tokio::spawn({
        let (client, url) = (client.clone(), server.url("/slow"));
        async move { client.get(url).send().await.map(|r| r.status().as_u16()) }
    });
    // Let the first request reach the server and take the slot.
    while server.requests_to("/slow").is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for _ in 0..5 {
        let err = client.get(server.url("/slow")).send().await.unwrap_err();
        let shed = overloaded(&err).expect("shed with Error::Overloaded");
        assert_eq!((shed.limiter(), shed.by()), ("limited", ShedBy::Bulkhead));
    }
    // Shed, not sent, not retried; and no failure for the breaker, whose
    // `min` of 2 at a ratio of 0.5 five failures would have tripped.
    assert_eq!(server.requests_to("/slow").len(), 1);
    assert_eq!(breaker.state(), State::Closed);
    assert_eq!(first.await.unwrap().unwrap(), 200);
    // The slot is free again.
    let answer = client.get(server.url("/slow")).send().await.unwrap();
    assert_eq!(answer.status(), 200);
}

/// A slot per attempt: a chain pausing between its attempts holds none,
/// so another call goes through a bulkhead of 1 meanwhile, and the chain's
/// own retries each get the slot back.
#[tokio::test(start_paused = true)]
async fn a_slot_is_held_per_attempt_not_through_the_pauses() {
    let server = FaultServer::start().await.unwrap();
    server.script_statuses("/flaky", &[503, 503, 200]);
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(
            ResilienceMiddleware::new("per-attempt", Policy::http())
                .with_limit(Limiter::bulkhead(Bulkhead::new("per-attempt", 1).unwrap())),
        )
        .build();
    let chain = tokio::spawn({
        let (client, url) = (client.clone(), server.url("/flaky"));
        async move { client.get(url).send().await.map(|r| r.status().as_u16()) }
    });
    // The chain's first attempt answered 503: it pauses ~100 ms.
    while server.requests_to("/flaky").is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let other = client.get(server.url("/other")).send().await.unwrap();
    assert_eq!(other.status(), 200, "the pausing chain holds no slot");
    assert_eq!(chain.await.unwrap().unwrap(), 200);
    assert_eq!(server.requests_to("/flaky").len(), 3);
}

/// The tower layer, with the request's priority from its extensions: a
/// sheddable request finds a bulkhead of 2 full at 1, a critical one not.
#[tokio::test(start_paused = true)]
async fn the_tower_layer_sheds_by_the_requests_priority() {
    let server = FaultServer::start().await.unwrap();
    server.always("/slow", Reply::Slow(Duration::from_millis(500)));
    let layer = ResilienceLayer::new("tower-limited", Policy::http()).with_limit(
        Limiter::bulkhead(Bulkhead::new("tower-limited", 2).unwrap()),
    );
    let hyper_client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let client = ServiceBuilder::new().layer(layer).service(hyper_client);
    let request = |priority: Priority| {
        let mut request = http::Request::get(server.url("/slow"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        request.extensions_mut().insert(priority);
        request
    };
    let first = tokio::spawn(client.clone().oneshot(request(Priority::Default)));
    while server.requests_to("/slow").is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let err = client
        .clone()
        .oneshot(request(Priority::Sheddable))
        .await
        .unwrap_err();
    let shed = err.downcast_ref::<Error>().expect("the runtime's error");
    assert!(matches!(shed, Error::Overloaded(o) if o.by() == ShedBy::Bulkhead));
    let mut critical = client.clone();
    let answer = critical
        .ready()
        .await
        .unwrap()
        .call(request(Priority::Critical))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    assert_eq!(server.requests_to("/slow").len(), 2);
}

/// A layer built from the registry takes the `[limits.<name>]` of its file.
#[cfg(feature = "config-file")]
#[tokio::test(start_paused = true)]
async fn a_layer_from_the_registry_takes_its_limit_from_the_file() {
    let registry = resilience::registry::Registry::builder()
        .config_str("[limits.stock]\nmax_concurrent = 1\n", "limits.toml")
        .unwrap()
        .breaker("stock", BreakerConfig::new())
        .build()
        .unwrap();
    let layer = ResilienceMiddleware::from_registry(&registry, "stock");
    assert_eq!(
        layer.limit().and_then(|l| l.as_bulkhead()).map(|b| b.max()),
        Some(1)
    );
    let server = FaultServer::start().await.unwrap();
    server.always("/slow", Reply::Slow(Duration::from_millis(500)));
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(layer)
        .build();
    let first = tokio::spawn({
        let (client, url) = (client.clone(), server.url("/slow"));
        async move { client.get(url).send().await.map(|r| r.status().as_u16()) }
    });
    while server.requests_to("/slow").is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let err = client.get(server.url("/slow")).send().await.unwrap_err();
    assert_eq!(overloaded(&err).map(|o| o.limiter()), Some("stock"));
    assert_eq!(first.await.unwrap().unwrap(), 200);
    assert_eq!(server.requests_to("/slow").len(), 1);
}
