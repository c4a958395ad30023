//! What the broker suites (`consumer_rabbitmq`, `consumer_jetstream`)
//! share: the handler's error and the scripted handler, so that both
//! brokers run the same scenarios with the same numbers.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use resilience_runtime::consumer::Message;
use resilience_runtime::retry::{Classify, Verdict};

#[derive(Debug, thiserror::Error)]
pub enum Failed {
    #[error("downstream answered 503")]
    Unavailable,
    #[error(transparent)]
    Runtime(#[from] resilience_runtime::Error),
}

impl Classify for Failed {
    fn classify(&self) -> Verdict {
        match self {
            Failed::Unavailable => Verdict::Transient,
            Failed::Runtime(err) => err.classify(),
        }
    }
}

/// A handler scripted by body: `poison` always fails transiently, `flaky`
/// fails twice then succeeds, the rest succeed; it records the time of
/// each attempt per body and each applied body.
#[derive(Clone, Default)]
pub struct Script {
    attempts: Arc<Mutex<Vec<(String, Instant)>>>,
    applied: Arc<Mutex<Vec<String>>>,
}

impl Script {
    pub fn handler(
        &self,
    ) -> impl Fn(
        Message,
    )
        -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Failed>> + Send>>
    + Send
    + Sync
    + use<> {
        let script = self.clone();
        move |message: Message| {
            let script = script.clone();
            Box::pin(async move {
                let body = String::from_utf8_lossy(message.payload()).into_owned();
                let attempt = {
                    let mut attempts = script.attempts.lock().unwrap();
                    attempts.push((body.clone(), Instant::now()));
                    attempts.iter().filter(|(b, _)| *b == body).count()
                };
                match (body.as_str(), attempt) {
                    ("poison", _) | ("flaky", 1 | 2) => Err(Failed::Unavailable),
                    _ => {
                        script.applied.lock().unwrap().push(body);
                        Ok(())
                    }
                }
            })
        }
    }

    pub fn times(&self, body: &str) -> Vec<Instant> {
        let attempts = self.attempts.lock().unwrap();
        attempts
            .iter()
            .filter(|(b, _)| b == body)
            .map(|(_, t)| *t)
            .collect()
    }

    pub fn applied(&self) -> Vec<String> {
        self.applied.lock().unwrap().clone()
    }
}
