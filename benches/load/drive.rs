//! An open-loop load: new calls at a fixed rate, whatever the answers, for
//! a fixed time; the latency of each counted from when it was due.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// How one call ended, as the caller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// A `200`.
    Ok,
    /// Refused before it was sent, by the client's own limiter.
    Shed,
    /// A `503` from the server.
    Refused,
    /// No answer within the caller's deadline.
    TimedOut,
    /// Anything else (a connection error).
    Failed,
}

pub type Call = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Ended> + Send>> + Send + Sync>;

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub seconds: f64,
    pub ok: usize,
    pub shed: usize,
    pub refused: usize,
    pub timed_out: usize,
    pub failed: usize,
    /// Latencies of the calls that were sent (not shed), sorted.
    pub admitted: Vec<Duration>,
}

impl Report {
    pub fn goodput(&self) -> f64 {
        self.ok as f64 / self.seconds
    }

    pub fn percentile(&self, p: f64) -> Duration {
        if self.admitted.is_empty() {
            return Duration::ZERO;
        }
        let at = ((self.admitted.len() as f64 * p).ceil() as usize).clamp(1, self.admitted.len());
        self.admitted[at - 1]
    }
}

/// Starts `rate` calls a second for `warmup + measure`, each cut at
/// `deadline`; reports the calls due after the warm-up.
pub async fn open_loop(
    call: Call,
    rate: f64,
    warmup: Duration,
    measure: Duration,
    deadline: Duration,
) -> Report {
    let results = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let total = ((warmup + measure).as_secs_f64() * rate) as u64;
    let mut tasks = Vec::with_capacity(total as usize);
    for n in 0..total {
        let due = start + Duration::from_secs_f64(n as f64 / rate);
        tokio::time::sleep_until(due).await;
        let (call, results) = (call.clone(), results.clone());
        let counted = due >= start + warmup;
        tasks.push(tokio::spawn(async move {
            let ended = match tokio::time::timeout_at(due + deadline, call()).await {
                Ok(ended) => ended,
                Err(_) => Ended::TimedOut,
            };
            if counted {
                results.lock().unwrap().push((ended, due.elapsed()));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut report = Report {
        seconds: measure.as_secs_f64(),
        ..Report::default()
    };
    for (ended, latency) in results.lock().unwrap().drain(..) {
        match ended {
            Ended::Ok => report.ok += 1,
            Ended::Shed => report.shed += 1,
            Ended::Refused => report.refused += 1,
            Ended::TimedOut => report.timed_out += 1,
            Ended::Failed => report.failed += 1,
        }
        if ended != Ended::Shed {
            report.admitted.push(latency);
        }
    }
    report.admitted.sort();
    report
}
