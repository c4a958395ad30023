//! The background consumer against the real RabbitMQ (`AMQP_ADDR`, by
//! default `amqp://guest:guest@127.0.0.1:5672/%2f`) and, for the crash
//! test, the real Redis (`REDIS_URL`, by default `redis://127.0.0.1:6379/`).
//!
//! ```sh
//! cargo test -p resilience-runtime --features rabbitmq,consumer-redis --test consumer_rabbitmq -- --ignored
//! ```
//!
//! Each test declares its own queues (and Redis keys) under a unique name
//! and deletes them, whatever the outcome, before asserting.

mod consumer_common;

use consumer_common::{Failed, Script};
use std::sync::atomic::{AtomicU32, Ordering};

use std::time::Duration;

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection};
use resilience_runtime::consumer::rabbitmq::{self, DeadLetterRoute, RabbitMq, header_text};
use resilience_runtime::consumer::{
    Broker, Consumer, ConsumerConfig, Disposition, Message, RedisDedup, Settled,
};
use resilience_runtime::retry::Policy;
use resilience_runtime::telemetry::Labels;

const ORDERS: Labels = Labels::new("resilience-tests", "orders");

fn amqp_addr() -> String {
    std::env::var("AMQP_ADDR").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into())
}

/// A name no other test, run or process uses.
fn unique(what: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "resilience-test.{what}.{}.{nanos}.{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The preset's shape (6 attempts, ×2, ±25 %) with its pauses shortened
/// from 500 ms to 20 ms: 20, 40, 80, 160, 320 ms.
fn short_background() -> ConsumerConfig {
    let policy = Policy::background()
        .to_builder()
        .with_initial(Duration::from_millis(20))
        .with_max_elapsed(Duration::from_secs(5))
        .build()
        .unwrap();
    ConsumerConfig::new(ORDERS, policy, Duration::from_secs(10)).unwrap()
}

/// A connection, a channel, and a work queue plus its dead-letter queue.
struct Queues {
    connection: Connection,
    channel: Channel,
    work: String,
    dlq: String,
}

impl Queues {
    async fn declare() -> Queues {
        let connection = rabbitmq::connect(&amqp_addr())
            .await
            .expect("RabbitMQ on 127.0.0.1:5672 (start it with `bash .ci/run`, or set AMQP_ADDR)");
        let channel = connection.create_channel().await.unwrap();
        let work = unique("orders");
        let dlq = format!("{work}.dlq");
        for queue in [&work, &dlq] {
            channel
                .queue_declare(queue, QueueDeclareOptions::default(), FieldTable::default())
                .await
                .unwrap();
        }
        Queues {
            connection,
            channel,
            work,
            dlq,
        }
    }

    async fn publish(&self, id: &str, body: &str) {
        self.channel
            .basic_publish(
                "",
                &self.work,
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default().with_message_id(id.into()),
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }

    async fn subscribe(&self, connection: &Connection) -> RabbitMq {
        let channel = connection.create_channel().await.unwrap();
        RabbitMq::subscribe(channel, &self.work, DeadLetterRoute::queue(&self.dlq))
            .await
            .unwrap()
    }

    /// Everything left in the dead-letter queue.
    async fn drain_dlq(&self) -> Vec<lapin::message::BasicGetMessage> {
        let mut letters = Vec::new();
        while let Some(letter) = self
            .channel
            .basic_get(&self.dlq, BasicGetOptions { no_ack: true })
            .await
            .unwrap()
        {
            letters.push(letter);
        }
        letters
    }

    /// Deletes both queues; returns how many messages the work queue still
    /// held.
    async fn delete(self) -> u32 {
        let left = self
            .channel
            .queue_delete(&self.work, QueueDeleteOptions::default())
            .await
            .unwrap();
        self.channel
            .queue_delete(&self.dlq, QueueDeleteOptions::default())
            .await
            .unwrap();
        let _ = self.connection.close(200, "done").await;
        left
    }
}

/// Processes exactly `n` deliveries of `broker`.
async fn process<H, Fut>(
    consumer: &Consumer<H, impl resilience_runtime::consumer::Dedup>,
    broker: &mut RabbitMq,
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
#[ignore = "needs RabbitMQ on 127.0.0.1:5672; run with --ignored"]
async fn a_poison_message_is_dead_lettered_after_six_attempts_and_the_others_are_processed() {
    let queues = Queues::declare().await;
    for (id, body) in [("m-1", "ok-1"), ("m-2", "poison"), ("m-3", "ok-3")] {
        queues.publish(id, body).await;
    }
    let script = Script::default();
    let consumer = Consumer::new(short_background(), script.handler());
    let mut broker = queues.subscribe(&queues.connection).await;

    let dispositions = process(&consumer, &mut broker, 3).await;
    let letters = queues.drain_dlq().await;
    let left = queues.delete().await;

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
    let letter = &letters[0].delivery;
    assert_eq!(letter.data, b"poison");
    assert_eq!(
        letter
            .properties
            .message_id()
            .as_ref()
            .map(|id| id.as_str()),
        Some("m-2")
    );
    let headers = letter.properties.headers().clone().unwrap_or_default();
    let header = |name| header_text(&headers, name);
    assert_eq!(
        header("x-resilience-error").as_deref(),
        Some("downstream answered 503")
    );
    assert_eq!(header("x-resilience-attempts").as_deref(), Some("6"));
    assert_eq!(header("x-resilience-give-up").as_deref(), Some("exhausted"));
    assert!(header("x-resilience-queue").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs RabbitMQ on 127.0.0.1:5672; run with --ignored"]
async fn a_message_failing_twice_is_processed_once_and_never_dead_lettered() {
    let queues = Queues::declare().await;
    queues.publish("m-1", "flaky").await;
    let script = Script::default();
    let consumer = Consumer::new(short_background(), script.handler());
    let mut broker = queues.subscribe(&queues.connection).await;

    let dispositions = process(&consumer, &mut broker, 1).await;
    let letters = queues.drain_dlq().await;
    let left = queues.delete().await;

    assert_eq!(dispositions, [Disposition::Processed { attempts: 3 }]);
    assert_eq!(script.times("flaky").len(), 3);
    assert_eq!(script.applied(), ["flaky"]);
    assert!(letters.is_empty(), "never dead-lettered");
    assert_eq!(left, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs RabbitMQ on 127.0.0.1:5672 and Redis on 127.0.0.1:6379; run with --ignored"]
async fn a_consumer_killed_after_applying_before_acking_does_not_apply_the_redelivery() {
    let queues = Queues::declare().await;
    queues.publish("m-1", "ok-1").await;
    let prefix = format!("{}:", unique("dedup"));
    let dedup = RedisDedup::connect(&redis_url())
        .await
        .expect("Redis on 127.0.0.1:6379 (or set REDIS_URL)")
        .with_prefix(prefix.clone());
    let script = Script::default();

    // Consumer A, on a connection of its own: applies the message, and
    // dies before acknowledging it.
    let doomed = rabbitmq::connect(&amqp_addr()).await.unwrap();
    let mut broker = queues.subscribe(&doomed).await;
    let first = Consumer::new(short_background(), script.handler()).with_dedup(dedup.clone());
    let delivery = broker.next().await.unwrap().unwrap();
    let message = broker.message(&delivery);
    let handled = first.handle(message).await;
    let applied_by_a = handled.disposition().clone();
    drop(handled);
    doomed.close(320, "killed before ack").await.unwrap();
    drop((broker, delivery));

    // Consumer B gets the redelivery.
    let mut broker = queues.subscribe(&queues.connection).await;
    let second = Consumer::new(short_background(), script.handler()).with_dedup(dedup);
    let delivery = tokio::time::timeout(Duration::from_secs(10), broker.next())
        .await
        .expect("the redelivery within 10 s")
        .unwrap()
        .unwrap();
    let redelivered = delivery.redelivered;
    let disposition = second.process(&broker, &delivery).await.unwrap();

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
    let left = queues.delete().await;

    assert_eq!(applied_by_a, Disposition::Processed { attempts: 1 });
    assert!(
        redelivered,
        "the broker redelivered the unacknowledged message"
    );
    assert_eq!(disposition, Disposition::Duplicate(Settled::Applied));
    assert_eq!(script.applied(), ["ok-1"], "applied once");
    assert_eq!(record.as_deref(), Some("applied"));
    assert_eq!(left, 0, "the redelivery was acknowledged");
}

#[test]
fn the_partition_blocking_check_refuses_a_chain_longer_than_the_ack_deadline() {
    // The preset with a 1 s attempt timeout can hold a message for
    // 6 × 1 s + 19.375 s of pauses: more than a 20 s deadline.
    let policy = Policy::background()
        .to_builder()
        .with_attempt_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let err = ConsumerConfig::new(ORDERS, policy, Duration::from_secs(20)).unwrap_err();
    assert_eq!((err.field(), err.value()), ("ack_deadline", "20s"));
    let text = err.to_string();
    assert!(
        text.starts_with("invalid consumer `orders`: `ack_deadline = 20s`: the retry chain can hold one message for up to 25.375s"),
        "{text}"
    );
    assert!(text.contains("rebalance"), "{text}");
    // The same policy fits RabbitMQ's default `consumer_timeout` (30 min).
    ConsumerConfig::new(ORDERS, policy, Duration::from_secs(1800)).unwrap();
}
