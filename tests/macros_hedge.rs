//! `#[hedge]` end to end on tokio's paused clock: a slow replica overtaken,
//! what the caller gets, and how many attempts reached the dependency.

mod macros_common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use macros_common::ClientError;
use resilience::hedge;
use tokio::time::{Instant, sleep};

/// A dependency whose n-th request answers `status` after `ms`.
struct Replicas {
    script: Mutex<Vec<(u64, u16)>>,
    sent: AtomicU32,
    finished: AtomicU32,
}

impl Replicas {
    fn new(script: &[(u64, u16)]) -> Self {
        Self {
            script: Mutex::new(script.iter().rev().copied().collect()),
            sent: AtomicU32::new(0),
            finished: AtomicU32::new(0),
        }
    }

    async fn request(&self) -> Result<u16, ClientError> {
        self.sent.fetch_add(1, Ordering::SeqCst);
        let (ms, status) = self.script.lock().unwrap().pop().unwrap_or((1, 200));
        sleep(Duration::from_millis(ms)).await;
        self.finished.fetch_add(1, Ordering::SeqCst);
        match status {
            200 => Ok(status),
            code => Err(ClientError::Status(code)),
        }
    }

    #[hedge(delay = "50ms", max = 3)]
    async fn get_page(&self, page: String) -> Result<String, ClientError> {
        let status = self.request().await?;
        Ok(format!("{page}: {status}"))
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_replica_is_overtaken_and_its_attempt_dropped() {
    let replicas = Replicas::new(&[(1000, 200), (10, 200)]);
    let start = Instant::now();
    let page = replicas.get_page("home".to_owned()).await;
    assert_eq!(page.as_deref(), Ok("home: 200"));
    assert_eq!(start.elapsed(), Duration::from_millis(60));
    assert_eq!(replicas.sent.load(Ordering::SeqCst), 2);
    assert_eq!(
        replicas.finished.load(Ordering::SeqCst),
        1,
        "the slow one dropped"
    );
}

#[tokio::test(start_paused = true)]
async fn a_503_starts_the_next_attempt_at_once_and_a_404_is_the_answer() {
    let replicas = Replicas::new(&[(5, 503), (5, 404)]);
    let start = Instant::now();
    assert_eq!(
        replicas.get_page("gone".to_owned()).await,
        Err(ClientError::Status(404))
    );
    assert_eq!(start.elapsed(), Duration::from_millis(10));
    assert_eq!(replicas.sent.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_fast_answer_sends_one_request() {
    let replicas = Replicas::new(&[(20, 200)]);
    assert!(replicas.get_page("fast".to_owned()).await.is_ok());
    assert_eq!(replicas.sent.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn under_once_a_slow_replica_is_waited_for_and_not_hedged() {
    let replicas = Replicas::new(&[(1000, 200), (10, 200)]);
    let start = Instant::now();
    let page = resilience::retry::once(replicas.get_page("home".to_owned())).await;
    assert_eq!(page.as_deref(), Ok("home: 200"));
    assert_eq!(start.elapsed(), Duration::from_millis(1000));
    assert_eq!(replicas.sent.load(Ordering::SeqCst), 1);
}

/// A free fn borrowing its argument, each attempt its own future.
#[hedge(delay = "20ms", max = 2, name = "lookup")]
async fn get_length(word: &str, slow_first: &AtomicU32) -> Result<usize, ClientError> {
    let ms = if slow_first.fetch_add(1, Ordering::SeqCst) == 0 {
        500
    } else {
        5
    };
    sleep(Duration::from_millis(ms)).await;
    Ok(word.len())
}

#[tokio::test(start_paused = true)]
async fn a_free_fn_borrowing_its_arguments_is_hedged() {
    let calls = AtomicU32::new(0);
    let start = Instant::now();
    assert_eq!(get_length("hedge", &calls).await, Ok(5));
    assert_eq!(start.elapsed(), Duration::from_millis(25));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// Each hedge is counted, and the hedged call is observed once.
#[cfg(feature = "metrics")]
#[tokio::test(start_paused = true)]
async fn each_hedge_is_counted_and_the_call_observed_once() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let replicas = Replicas::new(&[(1000, 200), (1000, 200), (10, 200)]);
    assert!(replicas.get_page("slow".to_owned()).await.is_ok());
    assert_eq!(replicas.sent.load(Ordering::SeqCst), 3);
    let text = handle.render();
    let series = |prefix: &str| {
        text.lines()
            .find(|line| line.starts_with(prefix) && line.contains("get_page"))
            .and_then(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
    };
    assert_eq!(series("http_client_hedges_total{"), Some(2.0), "{text}");
    assert_eq!(
        series("http_client_request_duration_seconds_count{"),
        Some(1.0),
        "{text}"
    );
}
