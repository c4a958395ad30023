//! The core on tokio's paused clock, against an in-memory broker.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::Error;
use crate::retry::{Classify, GiveUp, Policy, Verdict};
use crate::telemetry::Labels;

const ORDERS: Labels = Labels::new("billing", "orders");

#[derive(Debug, thiserror::Error)]
enum Failed {
    #[error("downstream answered 503")]
    Unavailable,
    #[error("invalid order")]
    Invalid,
    #[error(transparent)]
    Runtime(#[from] Error),
}

impl Classify for Failed {
    fn classify(&self) -> Verdict {
        match self {
            Failed::Unavailable => Verdict::Transient,
            Failed::Invalid => Verdict::Permanent,
            Failed::Runtime(err) => err.classify(),
        }
    }
}

#[derive(Debug, Clone)]
struct Delivery {
    message: Message,
}

/// A broker in memory: an inbox, and what was acked, requeued and
/// dead-lettered, in order.
#[derive(Debug, Default)]
struct Memory {
    inbox: VecDeque<Delivery>,
    acked: Mutex<Vec<Option<String>>>,
    requeued: Mutex<Vec<Option<String>>>,
    dead: Mutex<Vec<DeadLetter>>,
    refuse_dead_letters: AtomicBool,
    /// Whether the broker waits the requeue delay itself, as JetStream.
    delays_requeue: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("dead-letter queue unavailable")]
struct SinkDown;

impl Memory {
    fn with(messages: &[(&str, &str)]) -> Self {
        Self {
            inbox: messages
                .iter()
                .map(|(id, body)| Delivery {
                    message: Message::new(body.as_bytes()).with_id(*id),
                })
                .collect(),
            ..Self::default()
        }
    }

    fn acked(&self) -> Vec<Option<String>> {
        self.acked.lock().unwrap().clone()
    }

    fn dead(&self) -> Vec<DeadLetter> {
        self.dead.lock().unwrap().clone()
    }
}

fn id(delivery: &Delivery) -> Option<String> {
    delivery.message.id().map(str::to_owned)
}

impl Broker for Memory {
    type Delivery = Delivery;
    type Error = SinkDown;

    async fn next(&mut self) -> Option<Result<Delivery, SinkDown>> {
        self.inbox.pop_front().map(Ok)
    }
    fn message(&self, delivery: &Delivery) -> Message {
        delivery.message.clone()
    }
    async fn ack(&self, delivery: &Delivery) -> Result<(), SinkDown> {
        self.acked.lock().unwrap().push(id(delivery));
        Ok(())
    }
    async fn requeue(&self, delivery: &Delivery) -> Result<(), SinkDown> {
        self.requeued.lock().unwrap().push(id(delivery));
        Ok(())
    }
    fn delays_requeue(&self) -> bool {
        self.delays_requeue
    }
    async fn dead_letter(&self, _: &Delivery, letter: &DeadLetter) -> Result<(), SinkDown> {
        if self.refuse_dead_letters.load(Ordering::SeqCst) {
            return Err(SinkDown);
        }
        self.dead.lock().unwrap().push(letter.clone());
        Ok(())
    }
}

/// A handler whose messages answer per body: `poison` always fails
/// transiently, `invalid` permanently, `flaky` twice then succeeds, the
/// rest at once. It records the (paused) time of every attempt per body
/// and every applied effect.
#[derive(Debug, Clone, Default)]
struct Script {
    attempts: Arc<Mutex<HashMap<String, Vec<Instant>>>>,
    applied: Arc<Mutex<Vec<String>>>,
}

impl Script {
    fn handler(
        &self,
    ) -> impl Fn(Message) -> std::pin::Pin<Box<dyn Future<Output = Result<(), Failed>> + Send>>
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
                    let times = attempts.entry(body.clone()).or_default();
                    times.push(Instant::now());
                    times.len()
                };
                match (body.as_str(), attempt) {
                    ("poison", _) => Err(Failed::Unavailable),
                    ("invalid", _) => Err(Failed::Invalid),
                    ("flaky", 1 | 2) => Err(Failed::Unavailable),
                    _ => {
                        script.applied.lock().unwrap().push(body);
                        Ok(())
                    }
                }
            })
        }
    }

    fn attempts(&self, body: &str) -> Vec<Instant> {
        self.attempts
            .lock()
            .unwrap()
            .get(body)
            .cloned()
            .unwrap_or_default()
    }

    fn applied(&self) -> Vec<String> {
        self.applied.lock().unwrap().clone()
    }
}

use std::future::Future;

fn config() -> ConsumerConfig {
    ConsumerConfig::background(ORDERS, Duration::from_secs(300)).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_poison_message_is_dead_lettered_after_six_attempts_with_the_presets_backoff() {
    let script = Script::default();
    let consumer = Consumer::new(config(), script.handler()).with_dedup(MemoryDedup::new());
    let mut broker = Memory::with(&[("m-1", "ok-1"), ("m-2", "poison"), ("m-3", "ok-3")]);

    let summary = consumer.run(&mut broker).await.unwrap();

    assert_eq!(
        (summary.processed, summary.dead_lettered, summary.requeued),
        (2, 1, 0)
    );
    let times = script.attempts("poison");
    assert_eq!(times.len(), 6, "5 retries after the first attempt");
    for (n, (pair, base)) in times
        .windows(2)
        .zip([500u64, 1_000, 2_000, 4_000, 8_000])
        .enumerate()
    {
        let pause = (pair[1] - pair[0]).as_secs_f64() * 1e3;
        let (low, high) = (base as f64 * 0.75, base as f64 * 1.25);
        assert!(
            (low..=high + 1.0).contains(&pause),
            "pause {n}: {pause} ms not in {low}..={high}"
        );
    }
    let dead = broker.dead();
    assert_eq!(dead.len(), 1);
    let letter = &dead[0];
    assert_eq!(letter.message.id(), Some("m-2"));
    assert_eq!((letter.attempts, letter.reason), (6, GiveUp::Exhausted));
    assert_eq!(letter.error, "downstream answered 503");
    assert_eq!(script.applied(), ["ok-1", "ok-3"]);
    // Every message acknowledged, the poison one after its dead letter.
    assert_eq!(
        broker.acked(),
        [Some("m-1".into()), Some("m-2".into()), Some("m-3".into())]
    );
}

#[tokio::test(start_paused = true)]
async fn a_message_that_fails_twice_is_processed_once_and_never_dead_lettered() {
    let script = Script::default();
    let consumer = Consumer::new(config(), script.handler());
    let mut broker = Memory::with(&[("m-1", "flaky")]);

    let summary = consumer.run(&mut broker).await.unwrap();

    assert_eq!((summary.processed, summary.dead_lettered), (1, 0));
    assert_eq!(script.attempts("flaky").len(), 3);
    assert_eq!(script.applied(), ["flaky"]);
    assert!(broker.dead().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_is_dead_lettered_at_once() {
    let script = Script::default();
    let consumer = Consumer::new(config(), script.handler());
    let mut broker = Memory::with(&[("m-1", "invalid")]);
    let started = Instant::now();

    consumer.run(&mut broker).await.unwrap();

    assert_eq!(started.elapsed(), Duration::ZERO);
    let dead = broker.dead();
    assert_eq!((dead[0].attempts, dead[0].reason), (1, GiveUp::Permanent));
    assert_eq!(dead[0].error, "invalid order");
}

#[tokio::test(start_paused = true)]
async fn a_chain_cut_by_max_elapsed_is_dead_lettered_with_the_last_error() {
    // A hung second attempt: the budget cuts it, and the letter says what
    // the first one answered.
    let policy = Policy::background()
        .to_builder()
        .with_max_elapsed(Duration::from_secs(3))
        .build()
        .unwrap();
    let config = ConsumerConfig::new(ORDERS, policy, Duration::from_secs(3)).unwrap();
    let calls = Arc::new(Mutex::new(0));
    let consumer = Consumer::new(config, {
        let calls = calls.clone();
        move |_: Message| {
            let calls = calls.clone();
            async move {
                let first = {
                    let mut calls = calls.lock().unwrap();
                    *calls += 1;
                    *calls == 1
                };
                if first {
                    return Err(Failed::Unavailable);
                }
                std::future::pending::<Result<(), Failed>>().await
            }
        }
    });
    let mut broker = Memory::with(&[("m-1", "hangs")]);

    consumer.run(&mut broker).await.unwrap();

    let dead = broker.dead();
    assert_eq!((dead[0].attempts, dead[0].reason), (2, GiveUp::Elapsed));
    assert!(
        dead[0]
            .error
            .starts_with("the retry chain's max_elapsed of 3s passed with attempt 2 in flight"),
        "{}",
        dead[0].error
    );
    assert!(
        dead[0].error.contains("downstream answered 503"),
        "{}",
        dead[0].error
    );
}

#[tokio::test(start_paused = true)]
async fn a_message_applied_but_not_acknowledged_is_not_applied_again() {
    let script = Script::default();
    let dedup = MemoryDedup::new();
    let consumer = Consumer::new(config(), script.handler()).with_dedup(dedup.clone());
    let message = Message::new(&b"ok-1"[..]).with_id("m-1");

    // Applied, then the consumer dies before `settle`.
    let handled = consumer.handle(message.clone()).await;
    assert_eq!(
        handled.disposition(),
        &Disposition::Processed { attempts: 1 }
    );
    drop(handled);

    // The redelivery, to another consumer sharing the deduplicator.
    let other = Consumer::new(config(), script.handler()).with_dedup(dedup);
    let mut broker = Memory::default();
    broker.inbox.push_back(Delivery {
        message: message.with_redelivered(true),
    });
    let summary = other.run(&mut broker).await.unwrap();

    assert_eq!((summary.duplicates, summary.processed), (1, 0));
    assert_eq!(script.applied(), ["ok-1"]);
    assert_eq!(broker.acked(), [Some("m-1".into())]);
}

#[tokio::test(start_paused = true)]
async fn a_dead_lettered_message_redelivered_is_not_dead_lettered_twice() {
    let script = Script::default();
    let dedup = MemoryDedup::new();
    let consumer = Consumer::new(config(), script.handler()).with_dedup(dedup);
    let mut broker = Memory::with(&[("m-1", "invalid"), ("m-1", "invalid")]);

    let summary = consumer.run(&mut broker).await.unwrap();

    assert_eq!((summary.dead_lettered, summary.duplicates), (1, 1));
    assert_eq!(broker.dead().len(), 1);
    assert_eq!(script.attempts("invalid").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_message_held_elsewhere_is_handed_back_after_the_requeue_delay() {
    let script = Script::default();
    let dedup = MemoryDedup::new();
    let Begin::Fresh(_held) = dedup.begin("m-1", Duration::from_secs(300)).await.unwrap() else {
        panic!("fresh id");
    };
    let consumer = Consumer::new(config(), script.handler()).with_dedup(dedup);
    let mut broker = Memory::with(&[("m-1", "ok-1")]);
    let started = Instant::now();

    let summary = consumer.run(&mut broker).await.unwrap();

    assert_eq!(summary.requeued, 1);
    assert_eq!(started.elapsed(), Duration::from_millis(500));
    assert!(script.applied().is_empty());
    assert_eq!(*broker.requeued.lock().unwrap(), [Some("m-1".into())]);
}

#[tokio::test(start_paused = true)]
async fn a_broker_that_delays_requeues_itself_is_not_waited_for_twice() {
    let script = Script::default();
    let dedup = MemoryDedup::new();
    let Begin::Fresh(_held) = dedup.begin("m-1", Duration::from_secs(300)).await.unwrap() else {
        panic!("fresh id");
    };
    let consumer = Consumer::new(config(), script.handler()).with_dedup(dedup);
    let mut broker = Memory::with(&[("m-1", "ok-1"), ("m-2", "ok-2")]);
    broker.delays_requeue = true;
    let started = Instant::now();

    let summary = consumer.run(&mut broker).await.unwrap();

    assert_eq!(summary.requeued, 1);
    // The broker waits the 500 ms; the consumer goes on with m-2 at once.
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(*broker.requeued.lock().unwrap(), [Some("m-1".into())]);
    assert_eq!(script.applied(), ["ok-2"]);
}

#[tokio::test(start_paused = true)]
async fn a_refused_dead_letter_hands_the_message_back_and_frees_it() {
    let script = Script::default();
    let dedup = MemoryDedup::new();
    let consumer = Consumer::new(config(), script.handler()).with_dedup(dedup.clone());
    let mut broker = Memory::with(&[("m-1", "invalid")]);
    broker.refuse_dead_letters.store(true, Ordering::SeqCst);

    let summary = consumer.run(&mut broker).await.unwrap();

    assert_eq!((summary.requeued, summary.dead_lettered), (1, 0));
    assert!(broker.acked().is_empty(), "never acknowledged unsettled");
    // The lock was released: the redelivery runs the chain again.
    assert!(matches!(
        dedup.begin("m-1", Duration::from_secs(1)).await.unwrap(),
        Begin::Fresh(_)
    ));
}

/// A store that never answers: `begin` fails closed within a second.
#[derive(Debug)]
struct Hung;

impl Dedup for Hung {
    async fn begin(&self, _: &str, _: Duration) -> Result<Begin, DedupError> {
        std::future::pending().await
    }
    async fn settle(&self, _: &str, _: Lease, _: Settled, _: Duration) -> Result<bool, DedupError> {
        std::future::pending().await
    }
    async fn release(&self, _: &str, _: Lease) -> Result<(), DedupError> {
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_hung_deduplicator_fails_closed_fast() {
    let script = Script::default();
    let consumer = Consumer::new(config(), script.handler()).with_dedup(Hung);
    let started = Instant::now();

    let handled = consumer
        .handle(Message::new(&b"ok-1"[..]).with_id("m-1"))
        .await;

    assert_eq!(
        handled.disposition(),
        &Disposition::Requeue(Requeue::DedupUnavailable)
    );
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    assert!(script.applied().is_empty());
}

#[cfg(feature = "metrics")]
#[tokio::test(start_paused = true)]
async fn dead_letters_and_duplicates_are_counted_with_the_http_label_scheme() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = ::metrics::set_default_local_recorder(&recorder);

    let script = Script::default();
    let consumer = Consumer::new(config(), script.handler()).with_dedup(MemoryDedup::new());
    let mut broker = Memory::with(&[("m-1", "poison"), ("m-2", "invalid"), ("m-2", "invalid")]);
    consumer.run(&mut broker).await.unwrap();

    let mut counters: Vec<(String, u64)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let DebugValue::Counter(n) = value else {
                return None;
            };
            let key = key.key();
            let mut labels: Vec<_> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            Some((format!("{}{{{}}}", key.name(), labels.join(",")), n))
        })
        .collect();
    counters.sort();
    let get = |name: &str| {
        counters
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, n)| *n)
            .unwrap_or_else(|| panic!("{name} not in {counters:#?}"))
    };
    assert_eq!(
        get("consumer_dead_letters_total{reason=exhausted,service=billing,target=orders}"),
        1
    );
    assert_eq!(
        get("consumer_dead_letters_total{reason=permanent,service=billing,target=orders}"),
        1
    );
    assert_eq!(
        get("consumer_duplicates_total{service=billing,target=orders}"),
        1
    );
    // The poison message's attempts, as the HTTP side counts them.
    assert_eq!(
        get("http_client_retries_total{attempt=5,result=retry,service=billing,target=orders}"),
        1
    );
    assert_eq!(
        get("http_client_retries_total{attempt=6,result=exhausted,service=billing,target=orders}"),
        1
    );
}

/// A shutdown that comes while a message is retried: that message's chain
/// is finished and the message settled, then nothing else is pulled.
#[tokio::test(start_paused = true)]
async fn a_shutdown_finishes_and_settles_the_message_in_hand_then_stops_pulling() {
    let script = Script::default();
    let consumer = Consumer::new(config(), script.handler());
    let mut broker = Memory::with(&[("m-1", "flaky"), ("m-2", "ok-2"), ("m-3", "ok-3")]);
    let started = Instant::now();
    // During the first pause (500 ms) of m-1's chain.
    let shutdown = tokio::time::sleep(Duration::from_millis(100));

    let summary = consumer.run_until(&mut broker, shutdown).await.unwrap();

    assert_eq!(summary.processed, 1);
    assert_eq!(
        script.attempts("flaky").len(),
        3,
        "m-1's chain ran to its end"
    );
    assert_eq!(script.applied(), ["flaky"]);
    assert_eq!(broker.acked(), [Some("m-1".to_owned())]);
    assert_eq!(broker.inbox.len(), 2, "m-2 and m-3 were not pulled");
    assert!(
        started.elapsed() >= Duration::from_millis(1_125),
        "the two pauses were waited"
    );
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_already_come_pulls_nothing() {
    let script = Script::default();
    let consumer = Consumer::new(config(), script.handler());
    let mut broker = Memory::with(&[("m-1", "ok-1")]);

    let summary = consumer
        .run_until(&mut broker, std::future::ready(()))
        .await
        .unwrap();

    assert_eq!(summary, Summary::default());
    assert_eq!(broker.inbox.len(), 1);
}

/// A retry chain inside the handler (what a `#[retry]` fn called there
/// is) makes one attempt per attempt of the consumer's chain, and its
/// WARN names the consumer as the chain that retries. (The event
/// recorder is built with the metrics or the config file.)
#[cfg(any(feature = "metrics", feature = "config-file"))]
#[tokio::test(start_paused = true)]
async fn a_chain_inside_the_handler_makes_one_attempt_and_names_the_consumer() {
    let warnings = crate::test_events::record(tracing::Level::WARN);
    let inner_attempts = Arc::new(Mutex::new(0u32));
    let counted = inner_attempts.clone();
    let config = ConsumerConfig::background(
        Labels::new("billing", "nested-orders"),
        Duration::from_secs(300),
    )
    .unwrap();
    let consumer = Consumer::new(config, move |_: Message| {
        let counted = counted.clone();
        async move {
            Policy::http()
                .retry(|| {
                    *counted.lock().unwrap() += 1;
                    async { Err::<(), Failed>(Failed::Unavailable) }
                })
                .await
        }
    });

    let handled = consumer.handle(Message::new(vec![])).await;

    assert!(handled.disposition().is_dead_letter());
    assert_eq!(
        *inner_attempts.lock().unwrap(),
        6,
        "one inner attempt per consumer attempt, not 6 × 3"
    );
    let said: Vec<String> = warnings
        .take()
        .into_iter()
        .filter(|event| event.contains("retry at one layer"))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("the consumer `nested-orders`"), "{said:?}");
}
