//! The cost of the retry executor when the first attempt succeeds, against a
//! direct call of the same async fn, and backon (the most used peer) around
//! the same fn in the same run.
//!
//! `cargo bench --bench retry`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use resilience::retry::Policy;

mod common;
use common::poll_once;

#[inline(never)]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    Ok(black_box(id) + 1)
}

fn success_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("retry/first-attempt-succeeds");
    group.bench_function("direct call", |b| {
        b.iter(|| poll_once(get_user(black_box(7))))
    });
    let policy = Policy::http();
    group.bench_function("Policy::retry", |b| {
        b.iter(|| poll_once(black_box(policy).retry(|| get_user(black_box(7)))))
    });
    group.bench_function("backon (peer, same fn)", |b| {
        use backon::Retryable;
        let builder = backon::ExponentialBuilder::default().with_jitter();
        b.iter(|| poll_once((|| get_user(black_box(7))).retry(black_box(builder))))
    });
    group.finish();
}

fn report_sizes(_: &mut Criterion) {
    let policy = Policy::http();
    let direct = std::mem::size_of_val(&get_user(1));
    let chain = std::mem::size_of_val(&policy.retry(|| get_user(1)));
    println!(
        "size of the direct future: {direct} bytes; of the retry future around it: {chain} bytes"
    );
}

criterion_group!(benches, success_path, report_sizes);
criterion_main!(benches);
