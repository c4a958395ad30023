//! A real overloaded server on loopback: `workers` requests served at once,
//! each taking `work` of a timer (not of CPU, which the client shares on a
//! small machine); the requests beyond them wait in a queue, so latency
//! grows with load; past `queue` waiting, the answer is an immediate `503`.
//! Shared by `benches/load` and `tests/limit_load.rs`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::sync::Semaphore;

/// The server's shape.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub workers: usize,
    pub work: Duration,
    pub queue: usize,
}

impl Shape {
    /// What it would serve per second if a timer were exact.
    pub fn nominal_rps(&self) -> f64 {
        self.workers as f64 / self.work.as_secs_f64()
    }
}

#[derive(Debug)]
struct Inner {
    shape: Shape,
    workers: Semaphore,
    /// Requests inside: waiting or served.
    inside: AtomicUsize,
    served: AtomicU64,
    refused: AtomicU64,
}

/// A running server; it stops with its runtime.
#[derive(Debug, Clone)]
pub struct Server {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
}

/// Decrements the requests inside however the handler ends (a client that
/// gave up closes its connection, and hyper drops the handler).
struct Inside<'a>(&'a AtomicUsize);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn handle(State(inner): State<Arc<Inner>>) -> StatusCode {
    let before = inner.inside.fetch_add(1, Ordering::SeqCst);
    let _inside = Inside(&inner.inside);
    if before >= inner.shape.workers + inner.shape.queue {
        inner.refused.fetch_add(1, Ordering::Relaxed);
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let _worker = inner.workers.acquire().await.expect("never closed");
    tokio::time::sleep(inner.shape.work).await;
    inner.served.fetch_add(1, Ordering::Relaxed);
    StatusCode::OK
}

impl Server {
    /// Binds 127.0.0.1 on a free port and serves on the current runtime.
    pub async fn start(shape: Shape) -> Server {
        let inner = Arc::new(Inner {
            shape,
            workers: Semaphore::new(shape.workers),
            inside: AtomicUsize::new(0),
            served: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        let app = Router::new()
            .route("/", get(handle))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Server { addr, inner }
    }

    /// Requests answered `200` and `503` so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.inner.served.load(Ordering::Relaxed),
            self.inner.refused.load(Ordering::Relaxed),
        )
    }
}
