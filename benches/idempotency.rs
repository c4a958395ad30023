//! The cost of the idempotency layer on its two hot paths: a request it
//! does not guard (GET, passed through), and a replayed POST (fingerprint,
//! store lookup, stored response rebuilt), against the bare service.
//!
//! Every row, the bare service's included, is one `block_on` of a
//! current-thread runtime.
//!
//! `cargo bench --bench idempotency --features idempotency-server`

use std::convert::Infallible;
use std::hint::black_box;

use axum::body::Body;
use axum::http::{Method, Request, Response, StatusCode};
use criterion::{Criterion, criterion_group, criterion_main};
use resilience::idempotency::server::{IdempotencyLayer, MemoryStore, Scope};
use tower::{Layer, Service, service_fn};

fn request(method: Method, key: Option<&'static str>) -> Request<Body> {
    let mut builder = Request::builder()
        .method(method)
        .uri("/payments")
        .header("authorization", "Bearer alice-token-0123456789abcdef");
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    builder
        .body(Body::from(r#"{"amount":100,"currency":"eur"}"#))
        .unwrap()
}

fn layer_paths(c: &mut Criterion) {
    // The layer runs a key's first POST in a task of its own (so that a
    // client going away cannot stop it half-way) and bounds each store call
    // by a timer: every call, the bare service's too, runs on a runtime.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _entered = rt.enter();
    let mut service = service_fn(|_: Request<Body>| async {
        let mut response = Response::new(Body::from(r#"{"id":"pay_1"}"#));
        *response.status_mut() = StatusCode::CREATED;
        Ok::<_, Infallible>(response)
    });
    let mut guarded =
        IdempotencyLayer::new(MemoryStore::default(), Scope::unscoped()).layer(service);
    let created = rt
        .block_on(guarded.call(request(Method::POST, Some("order-42"))))
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    // Keys scoped to the caller (the default a layer is built with): the
    // scope is hashed (SHA-256) into the stored key on every guarded call.
    let mut scoped = IdempotencyLayer::new(
        MemoryStore::default(),
        Scope::header(axum::http::header::AUTHORIZATION),
    )
    .layer(service);
    let created = rt
        .block_on(scoped.call(request(Method::POST, Some("order-42"))))
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);

    let mut group = c.benchmark_group("idempotency");
    group.bench_function("GET, bare service", |b| {
        b.iter(|| rt.block_on(service.call(black_box(request(Method::GET, None)))))
    });
    group.bench_function("GET, through the layer (passed through)", |b| {
        b.iter(|| rt.block_on(guarded.call(black_box(request(Method::GET, None)))))
    });
    group.bench_function("POST, bare service", |b| {
        b.iter(|| rt.block_on(service.call(black_box(request(Method::POST, Some("order-42"))))))
    });
    group.bench_function("POST, through the layer (replayed)", |b| {
        b.iter(|| {
            let replay =
                rt.block_on(guarded.call(black_box(request(Method::POST, Some("order-42")))));
            debug_assert!(
                replay
                    .unwrap()
                    .headers()
                    .contains_key("x-idempotency-replay")
            );
        })
    });
    group.bench_function(
        "POST, through the layer scoped by a header (replayed)",
        |b| {
            b.iter(|| {
                let replay =
                    rt.block_on(scoped.call(black_box(request(Method::POST, Some("order-42")))));
                debug_assert!(
                    replay
                        .unwrap()
                        .headers()
                        .contains_key("x-idempotency-replay")
                );
            })
        },
    );
    group.bench_function("POST, through the layer (no key, 400)", |b| {
        b.iter(|| rt.block_on(guarded.call(black_box(request(Method::POST, None)))))
    });
    group.finish();
}

criterion_group!(benches, layer_paths);
criterion_main!(benches);
