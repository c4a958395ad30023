//! The Kafka consumer against a real Kafka-protocol broker on loopback:
//! messages per second through the library's consumer (no dedup, dedup in
//! memory, dedup on Redis) against a bare `StreamConsumer` loop that
//! stores each offset after "handling" it; then the time from a transient
//! failure to its retry, in place and through a retry topic.
//!
//! ```text
//! cargo bench --bench kafka_consumer --features kafka,consumer-redis
//! ```
//!
//! Needs a broker on `KAFKA_BOOTSTRAP` (127.0.0.1:9092: `.ci/run` starts
//! tansu there) and, for the Redis row, Redis on `REDIS_URL`
//! (127.0.0.1:6379). Environment: `KAFKA_MESSAGES` (5000) per row,
//! `KAFKA_ROUNDS` (3) rounds over the rows, each row reporting its median.
//!
//! Each row produces its messages to a fresh one-partition topic first,
//! then times a fresh group from its first message to its last one
//! settled (the group's join is not timed). Every message is 64 bytes
//! with a `message-id` header; the handler does nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use resilience::consumer::kafka::rdkafka::ClientConfig;
use resilience::consumer::kafka::rdkafka::admin::{
    AdminClient, AdminOptions, NewTopic, TopicReplication,
};
use resilience::consumer::kafka::rdkafka::client::DefaultClientContext;
use resilience::consumer::kafka::rdkafka::consumer::{Consumer as _, StreamConsumer};
use resilience::consumer::kafka::rdkafka::message::{Header, Message as _, OwnedHeaders};
use resilience::consumer::kafka::rdkafka::producer::{FutureProducer, FutureRecord};
use resilience::consumer::kafka::{Kafka, RetryTopics};
use resilience::consumer::{
    Broker, Consumer, ConsumerConfig, Dedup, Disposition, MemoryDedup, Message, NoDedup, RedisDedup,
};
use resilience::retry::Policy;
use resilience::telemetry::Labels;

const LABELS: Labels = Labels::new("bench", "orders");

fn bootstrap() -> String {
    std::env::var("KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn unique(what: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "resilience-bench-{what}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn settings(group: &str) -> ClientConfig {
    let mut settings = ClientConfig::new();
    settings
        .set("bootstrap.servers", bootstrap())
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("max.poll.interval.ms", "300000");
    settings
}

fn producer() -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("linger.ms", "5")
        .create()
        .expect("a producer")
}

async fn topic_with(admin: &AdminClient<DefaultClientContext>, names: &[String], n: usize) {
    let new: Vec<NewTopic<'_>> = names
        .iter()
        .map(|name| NewTopic::new(name, 1, TopicReplication::Fixed(1)))
        .collect();
    for result in admin
        .create_topics(&new, &AdminOptions::new())
        .await
        .expect("a Kafka-protocol broker on KAFKA_BOOTSTRAP (127.0.0.1:9092)")
    {
        result.expect("topic created");
    }
    let producer = producer();
    let payload = [b'x'; 64];
    let ids: Vec<String> = (0..n).map(|i| format!("m-{i}")).collect();
    let mut sends = Vec::with_capacity(n);
    for id in &ids {
        let headers = OwnedHeaders::new().insert(Header {
            key: "message-id",
            value: Some(id),
        });
        let record = FutureRecord::to(&names[0])
            .key(id)
            .payload(&payload[..])
            .headers(headers);
        sends.push(producer.send(record, Duration::from_secs(30)));
    }
    for send in futures_util::future::join_all(sends).await {
        send.expect("produced");
    }
}

/// The bare loop: receive, store the offset.
async fn bare(topic: &str, n: usize) -> Duration {
    let consumer: StreamConsumer = settings(&unique("bare"))
        .set("enable.auto.offset.store", "false")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let first = consumer.recv().await.unwrap();
    let started = Instant::now();
    consumer
        .store_offset(first.topic(), first.partition(), first.offset())
        .unwrap();
    drop(first);
    for _ in 1..n {
        let message = consumer.recv().await.unwrap();
        consumer
            .store_offset(message.topic(), message.partition(), message.offset())
            .unwrap();
    }
    started.elapsed()
}

/// The library's consumer: dedup, the chain (one attempt, succeeding),
/// the record, the offset stored.
async fn library<D: Dedup>(topic: &str, n: usize, dedup: D) -> Duration {
    let config = ConsumerConfig::background(LABELS, Duration::from_secs(300)).unwrap();
    let consumer =
        Consumer::new(config, |_: Message| async { Ok::<_, std::io::Error>(()) }).with_dedup(dedup);
    let mut broker =
        Kafka::subscribe(&settings(&unique("lib")), &[topic], producer(), &config).unwrap();
    let first = broker.next().await.unwrap().unwrap();
    let started = Instant::now();
    consumer.process(&broker, &first).await.unwrap();
    for _ in 1..n {
        let delivery = broker.next().await.unwrap().unwrap();
        consumer.process(&broker, &delivery).await.unwrap();
    }
    started.elapsed()
}

/// The time from a message's failed first attempt to its second one: in
/// place under `initial`, or through one retry topic of `delay`.
async fn retry_gap(
    admin: &AdminClient<DefaultClientContext>,
    initial: Duration,
    retry_topic: Option<Duration>,
) -> Duration {
    let topic = unique("gap");
    let mut names = vec![topic.clone()];
    if retry_topic.is_some() {
        names.push(format!("{topic}.retry.1"));
    }
    names.push(format!("{topic}.dlq"));
    topic_with(admin, &names, 1).await;
    let policy = Policy::background()
        .to_builder()
        .with_initial(initial)
        .with_max_attempts(if retry_topic.is_some() { 1 } else { 2 })
        .build()
        .unwrap();
    let config = ConsumerConfig::new(LABELS, policy, Duration::from_secs(300)).unwrap();
    let times = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = times.clone();
    let consumer = Consumer::new(config, move |_: Message| {
        let seen = seen.clone();
        async move {
            let mut seen = seen.lock().unwrap();
            seen.push(Instant::now());
            if seen.len() == 1 {
                Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
            } else {
                Ok(())
            }
        }
    });
    let mut broker =
        Kafka::subscribe(&settings(&unique("gap")), &[&topic], producer(), &config).unwrap();
    if let Some(delay) = retry_topic {
        broker = broker
            .with_retry_topics(RetryTopics::new([delay]).unwrap())
            .unwrap();
    }
    loop {
        let delivery = broker.next().await.unwrap().unwrap();
        if let Disposition::Processed { .. } = consumer.process(&broker, &delivery).await.unwrap() {
            break;
        }
    }
    let gap = {
        let times = times.lock().unwrap();
        times[1] - times[0]
    };
    drop(broker);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let _ = admin.delete_topics(&names, &AdminOptions::new()).await;
    gap
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn main() {
    let n = env("KAFKA_MESSAGES", 5000);
    let rounds = env("KAFKA_ROUNDS", 3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .create()
            .unwrap();
        let redis_url =
            std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
        let redis = RedisDedup::connect(&redis_url).await.ok();
        let rows = [
            "bare StreamConsumer",
            "library, no dedup",
            "library, MemoryDedup",
            "library, RedisDedup",
        ];
        let mut timings: Vec<Vec<Duration>> = vec![Vec::new(); rows.len()];
        for _ in 0..rounds {
            for (row, times) in timings.iter_mut().enumerate() {
                let topic = unique("rate");
                topic_with(&admin, std::slice::from_ref(&topic), n).await;
                let elapsed = match row {
                    0 => bare(&topic, n).await,
                    1 => library(&topic, n, NoDedup).await,
                    2 => library(&topic, n, MemoryDedup::new()).await,
                    _ => match &redis {
                        Some(redis) => {
                            library(&topic, n, redis.clone().with_prefix(unique("dedup"))).await
                        }
                        None => Duration::ZERO,
                    },
                };
                let _ = admin.delete_topics(&[&topic], &AdminOptions::new()).await;
                times.push(elapsed);
            }
        }
        println!("| path | messages/s (median of {rounds}) | per message |");
        println!("|---|---|---|");
        for (row, times) in rows.iter().zip(timings) {
            let elapsed = median(times);
            if elapsed.is_zero() {
                println!("| {row} | skipped (no Redis) | |");
                continue;
            }
            let rate = (n - 1) as f64 / elapsed.as_secs_f64();
            println!(
                "| {row} | {rate:.0} | {:.1} µs |",
                elapsed.as_secs_f64() * 1e6 / (n - 1) as f64
            );
        }

        let mut in_place = Vec::new();
        let mut topic = Vec::new();
        for _ in 0..rounds {
            in_place.push(retry_gap(&admin, Duration::from_millis(500), None).await);
            topic.push(
                retry_gap(
                    &admin,
                    Duration::from_millis(500),
                    Some(Duration::from_millis(500)),
                )
                .await,
            );
        }
        println!();
        println!("| mode | first failure → retry (median of {rounds}) |");
        println!("|---|---|");
        println!(
            "| in place, pause of 500 ms ±25 % | {:?} |",
            median(in_place)
        );
        println!("| retry topic, delay 500 ms | {:?} |", median(topic));
    });
}
