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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use macros_common::{ClientError, Script};
use resilience::{circuit_breaker, hedge, retry};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};

/// Every span (name, fields) and every event (message, span it ran in).
#[derive(Clone, Default)]
struct Spans {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    spans: Vec<(String, Vec<String>)>,
    events: Vec<(String, Option<u64>)>,
    stack: Vec<u64>,
}

#[derive(Default)]
struct Fields {
    message: String,
    others: Vec<String>,
}

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.others.push(format!("{}={value:?}", field.name()));
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.others.push(format!("{}={value}", field.name()));
        }
    }
}

impl Spans {
    fn calls(&self) -> Vec<(u64, Vec<String>)> {
        let state = self.state.lock().unwrap();
        (1..)
            .zip(state.spans.iter())
            .filter(|(_, (name, _))| name == "resilience.call")
            .map(|(id, (_, fields))| (id, fields.clone()))
            .collect()
    }
    fn events(&self) -> Vec<(String, Option<u64>)> {
        self.state.lock().unwrap().events.clone()
    }
}

impl Subscriber for Spans {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    // Asked at every callsite, whatever other tests' subscribers made of it.
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut fields = Fields::default();
        span.record(&mut fields);
        let mut state = self.state.lock().unwrap();
        state
            .spans
            .push((span.metadata().name().to_owned(), fields.others));
        Id::from_u64(state.spans.len() as u64)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut fields = Fields::default();
        values.record(&mut fields);
        let mut state = self.state.lock().unwrap();
        state.spans[span.into_u64() as usize - 1]
            .1
            .extend(fields.others);
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut state = self.state.lock().unwrap();
        let span = state.stack.last().copied();
        state.events.push((fields.message, span));
    }
    fn enter(&self, span: &Id) {
        self.state.lock().unwrap().stack.push(span.into_u64());
    }
    fn exit(&self, _: &Id) {
        self.state.lock().unwrap().stack.pop();
    }
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
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(spans.clone());
    let script = Script::new(&[502, 503]);
    assert_eq!(get_user(&script, 7).await, Ok(7));
    assert_eq!(script.calls(), 3);

    let calls = spans.calls();
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
    let events = spans.events();
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
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(spans.clone());
    let script = Script::new(&[503, 503, 503]);
    assert_eq!(get_user(&script, 7).await, Err(ClientError::Status(503)));
    let calls = spans.calls();
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
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(spans.clone());
    assert_eq!(get_page(true).await, Ok(1), "the hedge answered");
    assert_eq!(SENT.load(Ordering::SeqCst), 2);

    let calls = spans.calls();
    assert_eq!(calls.len(), 1, "one span for the hedged call: {calls:?}");
    let (id, fields) = &calls[0];
    assert!(
        fields.iter().any(|f| f == "target=spans_page"),
        "{fields:?}"
    );
    let events = spans.events();
    let requesting: Vec<_> = events.iter().filter(|(m, _)| m == "requesting").collect();
    assert_eq!(requesting.len(), 2, "{events:?}");
    assert!(
        requesting.iter().all(|(_, span)| *span == Some(*id)),
        "both attempts run in the call's span: {events:?}"
    );
}
