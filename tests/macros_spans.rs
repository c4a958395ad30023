//! One span per logical call, through the attributes: a
//! `#[circuit_breaker]` + `#[retry]` fn and a `#[hedge]` fn each open one
//! `resilience.call` span, and every attempt, the pauses' events and the
//! body's own events run inside it. So an OpenTelemetry exporter shows one
//! client span per request with its attempts as events, and a client
//! instrumented with spans of its own nests one per attempt under it (the
//! guide: a retried call is one logical call in the trace, its attempts
//! visible inside).

mod macros_common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use macros_common::{ClientError, Script};
use resilience::{circuit_breaker, hedge, retry};

/// The runtime's own span collector, shared with its telemetry tests.
#[path = "../resilience-runtime/src/telemetry/traces.rs"]
mod traces;

/// The `resilience.call` spans, each its id and fields.
fn calls(spans: &traces::Collector) -> Vec<(u64, Vec<String>)> {
    spans
        .spans()
        .into_iter()
        .filter(|(_, name, _)| name == "resilience.call")
        .map(|(id, _, fields)| (id, fields))
        .collect()
}

/// Every event, its message and the span it ran in.
fn events(spans: &traces::Collector) -> Vec<(String, Option<u64>)> {
    spans
        .events()
        .into_iter()
        .map(|seen| (seen.message, seen.span))
        .collect()
}

#[circuit_breaker(name = "spans_user", min = 20, ratio = 0.5)]
#[retry(max = 3, initial = "100ms")]
async fn get_user(script: &Script, id: u64) -> Result<u64, ClientError> {
    tracing::info!("sending");
    script.send().await?;
    Ok(id)
}

#[tokio::test(start_paused = true)]
async fn a_breaker_and_a_retry_make_one_span_holding_every_attempt() {
    let spans = traces::Collector::default();
    let _guard = tracing::subscriber::set_default(spans.clone());
    let script = Script::new(&[502, 503]);
    assert_eq!(get_user(&script, 7).await, Ok(7));
    assert_eq!(script.calls(), 3);

    let calls = calls(&spans);
    assert_eq!(calls.len(), 1, "one span per logical call: {calls:?}");
    let (id, fields) = &calls[0];
    for field in [
        "target=spans_user",
        "otel.kind=client",
        "status=ok",
        "otel.status_code=OK",
    ] {
        assert!(fields.iter().any(|f| f == field), "{field} in {fields:?}");
    }
    let events = events(&spans);
    let sending: Vec<_> = events.iter().filter(|(m, _)| m == "sending").collect();
    assert_eq!(sending.len(), 3, "{events:?}");
    assert!(
        sending.iter().all(|(_, span)| *span == Some(*id)),
        "each attempt runs in the call's span: {events:?}"
    );
    let retried = events
        .iter()
        .filter(|(m, _)| m == "attempt failed, retrying after a pause")
        .collect::<Vec<_>>();
    assert_eq!(retried.len(), 2, "{events:?}");
    assert!(retried.iter().all(|(_, span)| *span == Some(*id)));
}

#[tokio::test(start_paused = true)]
async fn a_call_that_fails_is_one_span_marked_as_an_error() {
    let spans = traces::Collector::default();
    let _guard = tracing::subscriber::set_default(spans.clone());
    let script = Script::new(&[503, 503, 503]);
    assert_eq!(get_user(&script, 7).await, Err(ClientError::Status(503)));
    let calls = calls(&spans);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(
        calls[0].1.iter().any(|f| f == "otel.status_code=ERROR"),
        "{:?}",
        calls[0].1
    );
}

static SENT: AtomicU32 = AtomicU32::new(0);

#[hedge(delay = "50ms", max = 2, name = "spans_page")]
async fn get_page(slow_first: bool) -> Result<u32, ClientError> {
    let n = SENT.fetch_add(1, Ordering::SeqCst);
    tracing::info!("requesting");
    let ms = if n == 0 && slow_first { 1000 } else { 10 };
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(n)
}

#[tokio::test(start_paused = true)]
async fn a_hedged_call_is_one_span_holding_both_attempts() {
    let spans = traces::Collector::default();
    let _guard = tracing::subscriber::set_default(spans.clone());
    assert_eq!(get_page(true).await, Ok(1), "the hedge answered");
    assert_eq!(SENT.load(Ordering::SeqCst), 2);

    let calls = calls(&spans);
    assert_eq!(calls.len(), 1, "one span for the hedged call: {calls:?}");
    let (id, fields) = &calls[0];
    assert!(
        fields.iter().any(|f| f == "target=spans_page"),
        "{fields:?}"
    );
    let events = events(&spans);
    let requesting: Vec<_> = events.iter().filter(|(m, _)| m == "requesting").collect();
    assert_eq!(requesting.len(), 2, "{events:?}");
    assert!(
        requesting.iter().all(|(_, span)| *span == Some(*id)),
        "both attempts run in the call's span: {events:?}"
    );
}
