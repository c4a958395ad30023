//! The rate limit on both ends, through the real HTTP stack on loopback:
//! an axum server behind `RateLimitLayer`, and a `#[retry]` client of the
//! library sending three times the rate. What the draft of the `RateLimit`
//! fields and RFC 9110's `Retry-After` promise: no request beyond the rate
//! reaches the handler, every refusal says when to come back, and the
//! client's next attempt never comes earlier than it was told.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::Response;
use axum::routing::get;
use resilience::http::{HttpError, ResponseExt};
use resilience::limit::server::RateLimitLayer;
use resilience::limit::{Rate, RateLimit};
use resilience::retry;
use tokio::time::Instant;

/// Every request that reached the server: its logical call, when, and the
/// status and `Retry-After` it got.
type Log = Arc<Mutex<Vec<(u32, Duration, u16, Option<u64>)>>>;

async fn record(
    State((log, start)): State<(Log, Instant)>,
    request: Request,
    next: Next,
) -> Response {
    let id = request.headers()["x-call"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let at = start.elapsed();
    let response = next.run(request).await;
    let after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    log.lock()
        .unwrap()
        .push((id, at, response.status().as_u16(), after));
    response
}

#[retry(max = 5, initial = "50ms")]
async fn get_quote(client: &reqwest::Client, url: &str, id: u32) -> Result<(), HttpError> {
    client
        .get(url)
        .header("x-call", id)
        .send()
        .await?
        .check()
        .await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_client_at_three_times_the_rate_never_gets_past_it_and_waits_as_told() {
    const RATE: u32 = 10;
    let start = Instant::now();
    let log = Log::default();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(
            RateLimit::new("partner", Rate::per_second(RATE)).unwrap(),
        ))
        .layer(from_fn_with_state((log.clone(), start), record));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    // Three times the rate for two seconds: 60 logical calls.
    let client = reqwest::Client::new();
    let mut calls = Vec::new();
    for id in 0..60 {
        let (client, url) = (client.clone(), url.clone());
        calls.push(tokio::spawn(
            async move { get_quote(&client, &url, id).await },
        ));
        tokio::time::sleep(Duration::from_millis(1000 / (3 * u64::from(RATE)))).await;
    }
    let mut succeeded = 0;
    for call in calls {
        succeeded += u32::from(call.await.unwrap().is_ok());
    }

    let log = log.lock().unwrap().clone();
    let admitted: Vec<Duration> = log
        .iter()
        .filter(|(_, _, status, _)| *status == 200)
        .map(|&(_, at, _, _)| at)
        .collect();
    assert_eq!(admitted.len() as u32, succeeded);
    // GCRA's bound: in any window `w`, at most `burst + w × rate` (the
    // burst is the rate's count, 10).
    let mut sorted = admitted.clone();
    sorted.sort();
    for (i, &from) in sorted.iter().enumerate() {
        let within = sorted[i..]
            .iter()
            .take_while(|&&at| at < from + Duration::from_secs(1))
            .count();
        assert!(
            within <= 2 * RATE as usize,
            "{within} requests reached the handler within 1 s of {from:?}"
        );
    }
    // Every refusal is a 429 with `Retry-After`, and the same call's next
    // attempt came no earlier than it said.
    let mut by_call: HashMap<u32, Vec<(Duration, u16, Option<u64>)>> = HashMap::new();
    for &(id, at, status, after) in &log {
        by_call.entry(id).or_default().push((at, status, after));
    }
    let mut refused = 0;
    for (id, attempts) in &by_call {
        for pair in attempts.windows(2) {
            let (at, status, after) = pair[0];
            assert_eq!(status, 429, "call {id}: only a 429 is retried here");
            let after = after.expect("a 429 says when to come back");
            assert!(
                pair[1].0 >= at + Duration::from_secs(after),
                "call {id}: the next attempt at {:?}, told to wait {after} s after {at:?}",
                pair[1].0
            );
            refused += 1;
        }
    }
    assert!(refused > 0, "three times the rate is refused in part");
    // The rate is used: the calls that waited got through in the end.
    assert!(succeeded >= 40, "{succeeded} of 60 calls succeeded");
}
