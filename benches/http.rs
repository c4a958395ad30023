//! What the reqwest integration adds to a successful GET through the real
//! HTTP stack on loopback: a bare `reqwest` call, the same request under
//! `with_policy(Policy::http())`, and through `ResilienceMiddleware` (retry
//! and breaker), against the scripted-fault server of `examples/common`
//! (every request answered `200` at once).
//!
//! `cargo bench --bench http`

#[path = "../examples/common/mod.rs"]
mod common;

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use resilience::breaker::{BreakerConfig, CircuitBreaker};
use resilience::http::{RequestBuilderExt, ResilienceMiddleware};
use resilience::retry::Policy;

fn get_200(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let server = rt
        .block_on(common::FaultServer::start())
        .expect("bind 127.0.0.1");
    let url = server.url("/user");
    let client = reqwest::Client::new();
    let breaker = rt.block_on(async { CircuitBreaker::new("bench", BreakerConfig::new()) });
    let layered = reqwest_middleware::ClientBuilder::new(client.clone())
        .with(
            ResilienceMiddleware::new("bench", Policy::http())
                .with_breaker(breaker.expect("a valid config")),
        )
        .build();

    let mut group = c.benchmark_group("http/get-200-loopback");
    group.bench_function("reqwest", |b| {
        b.iter(|| {
            rt.block_on(async {
                let response = client.get(&url).send().await.unwrap();
                black_box(response.bytes().await.unwrap())
            })
        })
    });
    group.bench_function("with_policy(http)", |b| {
        b.iter(|| {
            rt.block_on(async {
                black_box(
                    client
                        .get(&url)
                        .with_policy(Policy::http())
                        .bytes()
                        .await
                        .unwrap(),
                )
            })
        })
    });
    group.bench_function("ResilienceMiddleware (retry + breaker)", |b| {
        b.iter(|| {
            rt.block_on(async {
                let response = layered.get(&url).send().await.unwrap();
                black_box(response.bytes().await.unwrap())
            })
        })
    });
    group.finish();
}

criterion_group!(benches, get_200);
criterion_main!(benches);
