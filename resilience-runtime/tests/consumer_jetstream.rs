//! The background consumer against the real NATS server with JetStream
//! (`NATS_URL`, by default `127.0.0.1:4222`) and, for the crash test, the
//! real Redis (`REDIS_URL`, by default `redis://127.0.0.1:6379/`): the
//! RabbitMQ suite's scenarios (tests/consumer_rabbitmq.rs), with their
//! numbers, on JetStream.
//!
//! ```sh
//! cargo test -p resilience-runtime --features jetstream,consumer-redis --test consumer_jetstream -- --ignored
//! ```
//!
//! Each test creates its own work and dead-letter streams (and Redis keys)
//! under a unique name and deletes them, whatever the outcome, before
//! asserting.

mod consumer_common;

use consumer_common::{Failed, Script};
use std::sync::atomic::{AtomicU32, Ordering};

use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::{self as js, Context};
use resilience_runtime::consumer::jetstream::{JetStream, JetStreamError, async_nats, header_text};
use resilience_runtime::consumer::{
    Begin, Broker, Consumer, ConsumerConfig, Dedup, Disposition, MemoryDedup, Message, RedisDedup,
    Requeue, Settled,
};
use resilience_runtime::retry::Policy;
use resilience_runtime::telemetry::Labels;

const ORDERS: Labels = Labels::new("resilience-tests", "orders");

fn nats_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".into())
}

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into())
}

/// A name no other test, run or process uses (a valid stream name: no
/// `.`).
fn unique(what: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "resilience-test-{what}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The preset's shape (6 attempts, ×2, ±25 %) with its pauses shortened
/// from 500 ms to 20 ms (20, 40, 80, 160, 320 ms), `max_elapsed` cut to
/// `max_elapsed`, for a JetStream consumer whose `ack_wait` is
/// `ack_deadline`.
fn short_background(max_elapsed: Duration, ack_deadline: Duration) -> ConsumerConfig {
    let policy = Policy::background()
        .to_builder()
        .with_initial(Duration::from_millis(20))
        .with_max_elapsed(max_elapsed)
        .build()
        .unwrap();
    ConsumerConfig::new(ORDERS, policy, ack_deadline).unwrap()
}

/// A connection, a work stream with its durable pull consumer, and a
/// dead-letter stream.
struct Streams {
    context: Context,
    work: String,
    dlq: String,
    consumer: String,
}

impl Streams {
    async fn create(ack_wait: Duration) -> Streams {
        let client = async_nats::connect(nats_url()).await.expect(
            "NATS with JetStream on 127.0.0.1:4222 (start it with `bash .ci/run`, or set NATS_URL)",
        );
        let context = js::new(client);
        let work = unique("orders");
        let dlq = format!("{work}-dlq");
        for name in [&work, &dlq] {
            context
                .create_stream(js::stream::Config {
                    name: name.clone(),
                    subjects: vec![format!("{name}.>")],
                    ..Default::default()
                })
                .await
                .unwrap();
        }
        let consumer = "billing".to_owned();
        context
            .get_stream(&work)
            .await
            .unwrap()
            .create_consumer(pull::Config {
                durable_name: Some(consumer.clone()),
                ack_policy: AckPolicy::Explicit,
                ack_wait,
                max_deliver: -1,
                ..Default::default()
            })
            .await
            .unwrap();
        Streams {
            context,
            work,
            dlq,
            consumer,
        }
    }

    fn dlq_subject(&self) -> String {
        format!("{}.letters", self.dlq)
    }

    async fn publish(&self, id: &str, body: &str) {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, id);
        self.context
            .publish_with_headers(
                format!("{}.new", self.work),
                headers,
                body.as_bytes().to_vec().into(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }

    async fn pull(&self, context: &Context) -> PullConsumer {
        context
            .get_stream(&self.work)
            .await
            .unwrap()
            .get_consumer(&self.consumer)
            .await
            .unwrap()
    }

    async fn subscribe(&self, context: &Context, config: &ConsumerConfig) -> JetStream {
        let pull = self.pull(context).await;
        JetStream::subscribe(context.clone(), pull, self.dlq_subject(), config)
            .await
            .unwrap()
    }

    /// Every message of the dead-letter stream.
    async fn dead_letters(&self) -> Vec<js::message::StreamMessage> {
        let mut stream = self.context.get_stream(&self.dlq).await.unwrap();
        let count = stream.info().await.unwrap().state.messages;
        let mut letters = Vec::new();
        for sequence in 1..=count {
            letters.push(stream.get_raw_message(sequence).await.unwrap());
        }
        letters
    }

    /// Deletes both streams (and the consumer); returns how many messages
    /// the consumer had not had acknowledged (pending or in flight).
    async fn delete(self) -> u64 {
        let left = match self.pull(&self.context).await.info().await {
            Ok(info) => info.num_pending + info.num_ack_pending as u64,
            Err(_) => u64::MAX,
        };
        for name in [&self.work, &self.dlq] {
            self.context.delete_stream(name).await.unwrap();
        }
        left
    }
}

/// Processes exactly `n` deliveries of `broker`.
async fn process<H, Fut>(
    consumer: &Consumer<H, impl resilience_runtime::consumer::Dedup>,
    broker: &mut JetStream,
    n: usize,
) -> Vec<Disposition>
where
    H: Fn(Message) -> Fut + Send + Sync,
    Fut: std::future::Future<Output = Result<(), Failed>> + Send,
{
    let mut dispositions = Vec::new();
    for _ in 0..n {
        let delivery = tokio::time::timeout(Duration::from_secs(10), broker.next())
            .await
            .expect("a delivery within 10 s")
            .expect("the subscription is open")
            .unwrap();
        dispositions.push(consumer.process(broker, &delivery).await.unwrap());
    }
    dispositions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs NATS with JetStream on 127.0.0.1:4222; run with --ignored"]
async fn a_poison_message_is_dead_lettered_after_six_attempts_and_the_others_are_processed() {
    let streams = Streams::create(Duration::from_secs(10)).await;
    for (id, body) in [("m-1", "ok-1"), ("m-2", "poison"), ("m-3", "ok-3")] {
        streams.publish(id, body).await;
    }
    let script = Script::default();
    let config = short_background(Duration::from_secs(5), Duration::from_secs(10));
    let consumer = Consumer::new(config, script.handler());
    let mut broker = streams.subscribe(&streams.context, &config).await;

    let dispositions = process(&consumer, &mut broker, 3).await;
    drop(broker);
    let letters = streams.dead_letters().await;
    let (work, subject) = (streams.work.clone(), format!("{}.new", streams.work));
    let left = streams.delete().await;

    let kinds: Vec<_> = dispositions
        .iter()
        .map(|d| match d {
            Disposition::Processed { attempts } => format!("processed after {attempts}"),
            Disposition::DeadLetter(letter) => format!("dead letter after {}", letter.attempts),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "processed after 1",
            "dead letter after 6",
            "processed after 1"
        ]
    );
    assert_eq!(script.applied(), ["ok-1", "ok-3"]);
    assert_eq!(left, 0, "every message acknowledged");

    // Exactly 6 attempts at the preset's pauses (shortened), ±25 %.
    let times = script.times("poison");
    assert_eq!(times.len(), 6);
    let pauses: Vec<u128> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis())
        .collect();
    for (pause, base) in pauses.iter().zip([20u128, 40, 80, 160, 320]) {
        let (low, high) = (base * 3 / 4, base * 5 / 4 + 50);
        assert!(
            (low..=high).contains(pause),
            "pauses {pauses:?} ms: {pause} not within {low}..={high}"
        );
    }

    // One dead letter, with the last error and the original's id and body.
    assert_eq!(letters.len(), 1, "exactly one dead letter");
    let letter = &letters[0];
    assert_eq!(&letter.payload[..], b"poison");
    let header = |name| header_text(&letter.headers, name);
    assert_eq!(header("Nats-Msg-Id").as_deref(), Some("m-2"));
    assert_eq!(
        header("x-resilience-error").as_deref(),
        Some("downstream answered 503")
    );
    assert_eq!(header("x-resilience-attempts").as_deref(), Some("6"));
    assert_eq!(header("x-resilience-give-up").as_deref(), Some("exhausted"));
    assert_eq!(header("x-resilience-stream"), Some(work));
    assert_eq!(header("x-resilience-subject"), Some(subject));
    assert_eq!(header("x-resilience-sequence").as_deref(), Some("2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs NATS with JetStream on 127.0.0.1:4222; run with --ignored"]
async fn a_message_failing_twice_is_processed_once_and_never_dead_lettered() {
    let streams = Streams::create(Duration::from_secs(10)).await;
    streams.publish("m-1", "flaky").await;
    let script = Script::default();
    let config = short_background(Duration::from_secs(5), Duration::from_secs(10));
    let consumer = Consumer::new(config, script.handler());
    let mut broker = streams.subscribe(&streams.context, &config).await;

    let dispositions = process(&consumer, &mut broker, 1).await;
    drop(broker);
    let letters = streams.dead_letters().await;
    let left = streams.delete().await;

    assert_eq!(dispositions, [Disposition::Processed { attempts: 3 }]);
    assert_eq!(script.times("flaky").len(), 3);
    assert_eq!(script.applied(), ["flaky"]);
    assert!(letters.is_empty(), "never dead-lettered");
    assert_eq!(left, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs NATS with JetStream on 127.0.0.1:4222 and Redis on 127.0.0.1:6379; run with --ignored"]
async fn a_consumer_killed_after_applying_before_acking_does_not_apply_the_redelivery() {
    // JetStream redelivers an unacknowledged message once `ack_wait` has
    // passed (a closed connection does not hand it back): 2 s here, and a
    // chain that fits in it.
    let ack_wait = Duration::from_secs(2);
    let streams = Streams::create(ack_wait).await;
    streams.publish("m-1", "ok-1").await;
    let prefix = format!("{}:", unique("dedup"));
    let dedup = RedisDedup::connect(&redis_url())
        .await
        .expect("Redis on 127.0.0.1:6379 (or set REDIS_URL)")
        .with_prefix(prefix.clone());
    let script = Script::default();
    let config = short_background(Duration::from_secs(1), ack_wait);

    // Consumer A, on a connection of its own: applies the message, and
    // dies before acknowledging it.
    let doomed = async_nats::connect(nats_url()).await.unwrap();
    let mut broker = streams.subscribe(&js::new(doomed.clone()), &config).await;
    let first = Consumer::new(config, script.handler()).with_dedup(dedup.clone());
    let delivery = broker.next().await.unwrap().unwrap();
    let message = broker.message(&delivery);
    let first_delivery = message.redelivered();
    let handled = first.handle(message).await;
    let applied_by_a = handled.disposition().clone();
    drop(handled);
    drop((broker, delivery));
    doomed.drain().await.unwrap();

    // Consumer B gets the redelivery once `ack_wait` has passed.
    let mut broker = streams.subscribe(&streams.context, &config).await;
    let second = Consumer::new(config, script.handler()).with_dedup(dedup);
    let delivery = tokio::time::timeout(Duration::from_secs(10), broker.next())
        .await
        .expect("the redelivery within 10 s")
        .unwrap()
        .unwrap();
    let redelivered = broker.message(&delivery).redelivered();
    let disposition = second.process(&broker, &delivery).await.unwrap();
    drop(broker);

    let mut redis = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let record: Option<String> = redis::cmd("GET")
        .arg(format!("{prefix}m-1"))
        .query_async(&mut redis)
        .await
        .unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg(format!("{prefix}m-1"))
        .query_async(&mut redis)
        .await
        .unwrap();
    let left = streams.delete().await;

    assert_eq!(applied_by_a, Disposition::Processed { attempts: 1 });
    assert!(!first_delivery, "the first delivery is not a redelivery");
    assert!(
        redelivered,
        "JetStream redelivered the unacknowledged message"
    );
    assert_eq!(disposition, Disposition::Duplicate(Settled::Applied));
    assert_eq!(script.applied(), ["ok-1"], "applied once");
    assert_eq!(record.as_deref(), Some("applied"));
    assert_eq!(left, 0, "the redelivery was acknowledged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs NATS with JetStream on 127.0.0.1:4222; run with --ignored"]
async fn a_requeue_is_delayed_by_the_server_once_and_the_puller_goes_on() {
    let streams = Streams::create(Duration::from_secs(10)).await;
    streams.publish("m-1", "ok-1").await;
    streams.publish("m-2", "ok-2").await;
    // Another consumer holds m-1: it is handed back, to come again after
    // the requeue delay.
    let dedup = MemoryDedup::new();
    let Begin::Fresh(_held) = dedup.begin("m-1", Duration::from_secs(300)).await.unwrap() else {
        panic!("fresh id");
    };
    let delay = Duration::from_secs(2);
    let config =
        short_background(Duration::from_secs(5), Duration::from_secs(10)).with_requeue_delay(delay);
    let script = Script::default();
    let consumer = Consumer::new(config, script.handler()).with_dedup(dedup);
    let mut broker = streams.subscribe(&streams.context, &config).await;

    let started = tokio::time::Instant::now();
    let first = process(&consumer, &mut broker, 1).await;
    let handed_back = started.elapsed();
    let second = process(&consumer, &mut broker, 1).await;
    let next_done = started.elapsed();
    let again = tokio::time::timeout(Duration::from_secs(10), broker.next())
        .await
        .expect("m-1 again within 10 s")
        .unwrap()
        .unwrap();
    let redelivered_after = started.elapsed();
    let again = broker.message(&again);
    drop(broker);
    streams.delete().await;

    assert_eq!(first, [Disposition::Requeue(Requeue::InFlight)]);
    assert_eq!(second, [Disposition::Processed { attempts: 1 }]);
    assert_eq!(script.applied(), ["ok-2"]);
    // The puller did not wait the delay (the server does): m-2 was done
    // long before m-1 came back, and m-1 came back once, after one delay,
    // not two.
    assert!(handed_back < delay / 2, "handed back after {handed_back:?}");
    assert!(next_done < delay / 2, "m-2 done after {next_done:?}");
    assert_eq!(again.id(), Some("m-1"));
    assert!(again.redelivered());
    assert!(
        redelivered_after >= delay && redelivered_after < 2 * delay,
        "m-1 redelivered after {redelivered_after:?}, the requeue delay being {delay:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs NATS with JetStream on 127.0.0.1:4222; run with --ignored"]
async fn subscribing_refuses_a_chain_longer_than_the_consumers_ack_wait() {
    // JetStream's default `ack_wait` (30 s) against the `background`
    // preset, whose chain can hold a message for 2 min.
    let streams = Streams::create(Duration::from_secs(30)).await;
    let config = ConsumerConfig::background(ORDERS, Duration::from_secs(300)).expect("fits 300 s");
    let pull = streams.pull(&streams.context).await;
    let refused = JetStream::subscribe(
        streams.context.clone(),
        pull,
        streams.dlq_subject(),
        &config,
    )
    .await;
    // The same chain against a consumer whose `ack_wait` is 5 min.
    let longer = streams.context.clone();
    let stream = longer.get_stream(&streams.work).await.unwrap();
    stream
        .create_consumer(pull::Config {
            durable_name: Some("patient".into()),
            ack_policy: AckPolicy::Explicit,
            ack_wait: Duration::from_secs(300),
            ..Default::default()
        })
        .await
        .unwrap();
    let patient: PullConsumer = stream.get_consumer("patient").await.unwrap();
    let accepted = JetStream::subscribe(longer, patient, streams.dlq_subject(), &config).await;
    let accepted = accepted.map(|broker| (broker.ack_wait(), broker.consumer().to_owned()));
    streams.delete().await;

    let err = match refused {
        Err(JetStreamError::AckWait(err)) => err,
        other => panic!("expected the ack_wait check to refuse, got {other:?}"),
    };
    assert_eq!((err.field(), err.value()), ("ack_deadline", "300s"));
    let text = err.to_string();
    assert!(
        text.starts_with("invalid consumer `orders`: `ack_deadline = 300s`: longer than the JetStream consumer's `ack_wait = 30s` (the retry chain can hold one message for up to 120s)"),
        "{text}"
    );
    assert!(text.contains("at least 300s"), "{text}");
    assert_eq!(
        accepted.unwrap(),
        (Duration::from_secs(300), "patient".to_owned())
    );
}
