//! A tracing subscriber that records every span (name and fields) and
//! every event (level, message, fields, the span it ran in), for tests:
//! the runtime's telemetry tests and the facade's `tests/macros_spans.rs`
//! (through `#[path]`) share it.
#![allow(dead_code)] // each of the two test crates uses part of it
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

#[derive(Debug, Clone, PartialEq)]
pub(super) struct RecordedEvent {
    pub(super) level: Level,
    pub(super) message: String,
    /// The fields other than the message, as `name=value`.
    pub(super) fields: Vec<String>,
    /// The id of the span the event happened in.
    pub(super) span: Option<u64>,
}

#[derive(Debug, Default)]
struct State {
    spans: Vec<(String, Vec<String>)>,
    /// Each span's parent, by the same index.
    parents: Vec<Option<u64>>,
    stack: Vec<u64>,
    events: Vec<RecordedEvent>,
}

/// Every span and event, or (`events_only`) events alone.
#[derive(Debug, Clone, Default)]
pub(super) struct Collector {
    state: Arc<Mutex<State>>,
    events_only: bool,
}

#[derive(Default)]
struct Fields {
    message: String,
    others: Vec<String>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.others.push(format!("{}={value:?}", field.name()));
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.others.push(format!("{}={value}", field.name()));
    }
}

impl Collector {
    /// A subscriber that wants no span, but every event.
    pub(super) fn events_only() -> Self {
        Collector {
            events_only: true,
            ..Collector::default()
        }
    }
    pub(super) fn events(&self) -> Vec<RecordedEvent> {
        self.state.lock().unwrap().events.clone()
    }
    /// The name and the fields (as recorded so far) of span `id`.
    pub(super) fn span(&self, id: u64) -> (String, Vec<String>) {
        self.state.lock().unwrap().spans[id as usize - 1].clone()
    }
    /// The parent of span `id`: the one it was opened in, or the one it
    /// names.
    pub(super) fn parent(&self, id: u64) -> Option<u64> {
        self.state.lock().unwrap().parents[id as usize - 1]
    }
    /// Whether span `id` is `ancestor` or opened (at any depth) inside it.
    pub(super) fn within(&self, id: u64, ancestor: u64) -> bool {
        let mut at = Some(id);
        while let Some(id) = at {
            if id == ancestor {
                return true;
            }
            at = self.parent(id);
        }
        false
    }
    pub(super) fn span_count(&self) -> usize {
        self.state.lock().unwrap().spans.len()
    }
    /// Every span, its id (from 1) with its name and fields.
    pub(super) fn spans(&self) -> Vec<(u64, String, Vec<String>)> {
        let state = self.state.lock().unwrap();
        (1..)
            .zip(state.spans.iter())
            .map(|(id, (name, fields))| (id, name.clone(), fields.clone()))
            .collect()
    }
}

impl Subscriber for Collector {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        !(self.events_only && metadata.is_span())
    }
    // Asked at every callsite, whatever other tests' subscribers made
    // of it.
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut fields = Fields::default();
        span.record(&mut fields);
        let mut state = self.state.lock().unwrap();
        let parent = if span.is_contextual() {
            state.stack.last().copied()
        } else {
            span.parent().map(Id::into_u64)
        };
        state.parents.push(parent);
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
        state.events.push(RecordedEvent {
            level: *event.metadata().level(),
            message: fields.message,
            fields: fields.others,
            span,
        });
    }
    fn enter(&self, span: &Id) {
        self.state.lock().unwrap().stack.push(span.into_u64());
    }
    fn exit(&self, _: &Id) {
        self.state.lock().unwrap().stack.pop();
    }
}
