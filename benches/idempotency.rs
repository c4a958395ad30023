//! The cost of the idempotency layer on its two hot paths: a request it
//! does not guard (GET, passed through), and a replayed POST (fingerprint,
//! store lookup, stored response rebuilt), against the bare service.
//!
//! `cargo bench --bench idempotency --features idempotency-server`

use std::convert::Infallible;
use std::hint::black_box;

use axum::body::Body;
use axum::http::{Method, Request, Response, StatusCode};
use criterion::{Criterion, criterion_group, criterion_main};
use resilience::idempotency::server::{IdempotencyLayer, MemoryStore, Scope};
use tower::{Layer, Service, service_fn};

mod common;
use common::poll_once;

fn request(method: Method, key: Option<&'static str>) -> Request<Body> {
    let mut builder = Request::builder().method(method).uri("/payments");
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    builder
        .body(Body::from(r#"{"amount":100,"currency":"eur"}"#))
        .unwrap()
}

fn layer_paths(c: &mut Criterion) {
    let mut service = service_fn(|_: Request<Body>| async {
        let mut response = Response::new(Body::from(r#"{"id":"pay_1"}"#));
        *response.status_mut() = StatusCode::CREATED;
        Ok::<_, Infallible>(response)
    });
    let mut guarded =
        IdempotencyLayer::new(MemoryStore::default(), Scope::unscoped()).layer(service);
    let created = poll_once(guarded.call(request(Method::POST, Some("order-42")))).unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);

    let mut group = c.benchmark_group("idempotency");
    group.bench_function("GET, bare service", |b| {
        b.iter(|| poll_once(service.call(black_box(request(Method::GET, None)))))
    });
    group.bench_function("GET, through the layer (passed through)", |b| {
        b.iter(|| poll_once(guarded.call(black_box(request(Method::GET, None)))))
    });
    group.bench_function("POST, bare service", |b| {
        b.iter(|| poll_once(service.call(black_box(request(Method::POST, Some("order-42"))))))
    });
    group.bench_function("POST, through the layer (replayed)", |b| {
        b.iter(|| {
            let replay =
                poll_once(guarded.call(black_box(request(Method::POST, Some("order-42")))));
            debug_assert!(
                replay
                    .unwrap()
                    .headers()
                    .contains_key("x-idempotency-replay")
            );
        })
    });
    group.bench_function("POST, through the layer (no key, 400)", |b| {
        b.iter(|| poll_once(guarded.call(black_box(request(Method::POST, None)))))
    });
    group.finish();
}

criterion_group!(benches, layer_paths);
criterion_main!(benches);
