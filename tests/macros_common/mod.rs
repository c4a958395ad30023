//! What the macro and metrics tests share: an HTTP-like error type and a
//! scripted fake dependency.
#![allow(dead_code, unreachable_pub)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use resilience::retry::{Classify, HttpStatus, Reason, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub enum ClientError {
    Status(u16),
    /// The connection failed before a status arrived.
    Transport,
    Resilience(resilience::Error),
}

impl From<resilience::Error> for ClientError {
    fn from(err: resilience::Error) -> Self {
        ClientError::Resilience(err)
    }
}

impl Classify for ClientError {
    fn classify(&self) -> Verdict {
        match self {
            ClientError::Status(code) => HttpStatus(*code).classify(),
            ClientError::Transport => Verdict::Transient,
            ClientError::Resilience(err) => err.classify(),
        }
    }

    fn reason(&self) -> Option<Reason> {
        match self {
            ClientError::Status(code) => HttpStatus(*code).reason(),
            ClientError::Transport => Some(Reason::Network),
            ClientError::Resilience(err) => err.reason(),
        }
    }
}

/// A dependency that answers with the scripted statuses, then 200s.
#[derive(Debug, Default)]
pub struct Script {
    statuses: Mutex<Vec<u16>>,
    calls: AtomicU32,
}

impl Script {
    pub fn new(statuses: &[u16]) -> Self {
        let mut statuses = statuses.to_vec();
        statuses.reverse();
        Self {
            statuses: Mutex::new(statuses),
            calls: AtomicU32::new(0),
        }
    }

    /// One call: `Ok(())` on 2xx, the status as an error otherwise.
    pub fn call(&self) -> Result<(), ClientError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let status = self.statuses.lock().unwrap().pop().unwrap_or(200);
        match status {
            200..=299 => Ok(()),
            failed => Err(ClientError::Status(failed)),
        }
    }

    /// [`call`](Self::call) as the network call it stands for: a breaker
    /// protects calls that await.
    #[allow(dead_code)] // not every test binary sends
    pub async fn send(&self) -> Result<(), ClientError> {
        std::future::ready(()).await;
        self.call()
    }

    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

/// The events of one level a test sees, as `field=value` lines: a
/// subscriber to set with `tracing::subscriber::set_default`.
#[derive(Clone)]
pub struct Events {
    level: tracing::Level,
    lines: std::sync::Arc<Mutex<Vec<String>>>,
}

impl Events {
    pub fn at(level: tracing::Level) -> Self {
        Self {
            level,
            lines: Default::default(),
        }
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// How many lines hold every one of `needles`.
    pub fn count(&self, needles: &[&str]) -> usize {
        self.lines()
            .iter()
            .filter(|line| needles.iter().all(|needle| line.contains(needle)))
            .count()
    }
}

impl tracing::Subscriber for Events {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() == self.level
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        self.lines.lock().unwrap().push(fields.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
