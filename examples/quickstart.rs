//! The retry engine against a scripted flaky dependency, as a timeline.
//!
//! `cargo run --example quickstart`

use std::cell::RefCell;
use std::time::Duration;

use resilience::retry::{Classify, Event, HttpStatus, Policy, Verdict};
use resilience::{Error, deadline};
use tokio::time::Instant;

#[derive(Debug)]
enum ClientError {
    Status(u16),
    Resilience(Error),
}

impl Classify for ClientError {
    fn classify(&self) -> Verdict {
        match self {
            ClientError::Status(code) => HttpStatus(*code).classify(),
            ClientError::Resilience(err) => err.classify(),
        }
    }
}

impl From<Error> for ClientError {
    fn from(err: Error) -> Self {
        ClientError::Resilience(err)
    }
}

async fn scene(title: &str, script: &[u16], policy: Policy) {
    println!("\n{title}");
    let start = Instant::now();
    let answers = RefCell::new(script.iter().copied());
    let stamp = || format!("{:>4} ms", start.elapsed().as_millis());
    let result = policy
        .retry(|| {
            let status = answers.borrow_mut().next().unwrap_or(200);
            let at = stamp();
            async move {
                println!("  {at}  attempt -> {status}");
                match status {
                    200..=299 => Ok(status),
                    _ => Err(ClientError::Status(status)),
                }
            }
        })
        .notify(|event: &Event<'_, ClientError>| match event {
            Event::Retry { attempt, delay, .. } => {
                println!(
                    "  {}  attempt {attempt} failed, pausing {delay:.0?}",
                    stamp()
                )
            }
            Event::GaveUp {
                attempt, reason, ..
            } => {
                println!(
                    "  {}  gave up after attempt {attempt}: {}",
                    stamp(),
                    reason.as_str()
                )
            }
            _ => {}
        })
        .await;
    match result {
        Ok(status) => println!("  {}  result: {status}", stamp()),
        Err(err) => println!("  {}  result: error {err:?}", stamp()),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let http = Policy::http();
    scene(
        "1. GET recovers after 502, 502 (3 attempts, 100 ms x2 backoff, +-25 % jitter)",
        &[502, 502, 200],
        http,
    )
    .await;
    scene("2. 400 is a bad request: not retried", &[400], http).await;
    scene(
        "3. the dependency stays down: 3 attempts, then the last error",
        &[503, 503, 503],
        http,
    )
    .await;
    deadline::with_timeout(
        Duration::from_millis(250),
        scene(
            "4. the caller's 250 ms deadline cuts the chain short",
            &[503, 503, 503],
            http,
        ),
    )
    .await;
}
