//! Whole-transaction retry against a real PostgreSQL (never a mock).
//!
//! Not part of the default `cargo test`; run with
//!
//! ```text
//! cargo test -p resilience-runtime --features sqlx-postgres --test postgres -- --ignored
//! ```
//!
//! `DATABASE_URL` selects the server (default
//! `postgres://postgres@127.0.0.1:5432/test`). Each test works in a schema
//! of its own, `resilience_<test>_<pid>_<nanos>`, dropped when it ends,
//! panics included.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use resilience_runtime::db;
use resilience_runtime::retry::{Classify, Policy, Verdict};
use resilience_runtime::{Error, deadline};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgPool};
use tokio::sync::Barrier;
use tokio::time::Instant;

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A pool and a schema of the test's own, dropped on drop.
struct Scoped {
    pool: PgPool,
    schema: String,
}

impl Scoped {
    async fn new(test: &str, setup: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let schema = format!("resilience_{test}_{}_{nanos}", std::process::id());
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(5))
            .connect(&database_url())
            .await
            .expect("PostgreSQL must be reachable at DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test)");
        pool.execute(format!("CREATE SCHEMA {schema}").as_str())
            .await
            .unwrap();
        let scoped = Self { pool, schema };
        scoped
            .pool
            .execute(scoped.sql(setup).as_str())
            .await
            .unwrap();
        scoped
    }

    /// `sql` with `s.` naming the test's schema.
    fn sql(&self, sql: &str) -> String {
        sql.replace("s.", &format!("{}.", self.schema))
    }
}

impl Drop for Scoped {
    fn drop(&mut self) {
        // Drop runs outside the test's runtime, maybe while it unwinds: a
        // connection of its own, on a runtime of its own.
        let drop_schema = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema);
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(&database_url()).await.unwrap();
                conn.execute(drop_schema.as_str()).await.unwrap();
            });
        })
        .join();
    }
}

fn code(error: &sqlx::Error) -> Option<String> {
    match error {
        sqlx::Error::Database(error) => error.code().map(|code| code.into_owned()),
        _ => None,
    }
}

/// The runtime's own error inside a `sqlx::Error`.
fn runtime_error(error: &sqlx::Error) -> Option<&Error> {
    match error {
        sqlx::Error::Io(error) => error.get_ref()?.downcast_ref::<Error>(),
        _ => None,
    }
}

async fn value(scoped: &Scoped, sql: &str) -> i64 {
    sqlx::query_scalar(&scoped.sql(sql))
        .fetch_one(&scoped.pool)
        .await
        .unwrap()
}

/// Two SERIALIZABLE transactions read the same row, then both write it:
/// the second writer gets 40001, the helper runs it again from BEGIN, and
/// the final value is one that running them one after the other gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL at DATABASE_URL; run with --ignored"]
async fn a_serialization_failure_runs_the_whole_transaction_again() {
    let scoped = Scoped::new(
        "serialization",
        "CREATE TABLE s.counter (id int PRIMARY KEY, value bigint NOT NULL);
         INSERT INTO s.counter VALUES (1, 1);",
    )
    .await;
    let both_read = Arc::new(Barrier::new(2));
    let attempts = Arc::new(AtomicU32::new(0));
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));

    // One doubles the value, the other adds 10: serially 1 → 12 or 1 → 22,
    // never 2 or 11 (a lost update).
    let run = |update: &'static str| {
        let (pool, both_read, attempts, errors) = (
            scoped.pool.clone(),
            both_read.clone(),
            attempts.clone(),
            errors.clone(),
        );
        let select = scoped.sql("SELECT value FROM s.counter WHERE id = 1");
        let update = scoped.sql(update);
        tokio::spawn(async move {
            let mine = Arc::new(AtomicU32::new(0));
            let result = db::transaction(&pool)
                .serializable()
                .run(|tx| {
                    let (mine, attempts, both_read, errors) = (
                        mine.clone(),
                        attempts.clone(),
                        both_read.clone(),
                        errors.clone(),
                    );
                    let (select, update) = (select.clone(), update.clone());
                    Box::pin(async move {
                        let first = mine.fetch_add(1, Ordering::SeqCst) == 0;
                        attempts.fetch_add(1, Ordering::SeqCst);
                        let value: i64 = sqlx::query_scalar(&select).fetch_one(&mut *tx).await?;
                        if first {
                            // Both first attempts hold their snapshot before
                            // either writes.
                            both_read.wait().await;
                        }
                        let written = sqlx::query(&update).bind(value).execute(&mut *tx).await;
                        if let Err(error) = &written {
                            errors.lock().unwrap().push(code(error));
                        }
                        written?;
                        Ok::<_, sqlx::Error>(())
                    })
                })
                .await;
            (result, mine.load(Ordering::SeqCst))
        })
    };
    let double = run("UPDATE s.counter SET value = $1 * 2 WHERE id = 1");
    let add = run("UPDATE s.counter SET value = $1 + 10 WHERE id = 1");
    let (double, add) = (double.await.unwrap(), add.await.unwrap());

    double.0.expect("the doubling commits");
    add.0.expect("the addition commits");
    let final_value = value(&scoped, "SELECT value FROM s.counter WHERE id = 1").await;
    assert!(
        final_value == 12 || final_value == 22,
        "two serial runs give 12 or 22, got {final_value}"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 3, "one of them ran twice");
    assert_eq!(double.1 + add.1, 3);
    assert_eq!(*errors.lock().unwrap(), vec![Some("40001".to_owned())]);
}

/// Two transactions lock two rows in opposite orders: the server aborts
/// one with 40P01, the helper runs it again, and each transfer is applied
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL at DATABASE_URL; run with --ignored"]
async fn a_deadlock_runs_the_aborted_transaction_again_and_both_commit_once() {
    let scoped = Scoped::new(
        "deadlock",
        "CREATE TABLE s.account (id int PRIMARY KEY, balance bigint NOT NULL);
         INSERT INTO s.account VALUES (1, 100), (2, 100);
         CREATE TABLE s.transfer (name text PRIMARY KEY);",
    )
    .await;
    let both_locked = Arc::new(Barrier::new(2));
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));

    let transfer = |name: &'static str, from: i32, to: i32, amount: i64| {
        let (pool, both_locked, errors) =
            (scoped.pool.clone(), both_locked.clone(), errors.clone());
        let debit = scoped.sql("UPDATE s.account SET balance = balance - $2 WHERE id = $1");
        let credit = scoped.sql("UPDATE s.account SET balance = balance + $2 WHERE id = $1");
        let record = scoped.sql("INSERT INTO s.transfer VALUES ($1)");
        tokio::spawn(async move {
            let mine = Arc::new(AtomicU32::new(0));
            let result = db::transaction(&pool)
                .run(|tx| {
                    let (mine, both_locked, errors) =
                        (mine.clone(), both_locked.clone(), errors.clone());
                    let (debit, credit, record) = (debit.clone(), credit.clone(), record.clone());
                    Box::pin(async move {
                        let first = mine.fetch_add(1, Ordering::SeqCst) == 0;
                        sqlx::query(&debit)
                            .bind(from)
                            .bind(amount)
                            .execute(&mut *tx)
                            .await?;
                        if first {
                            // Each holds its first row when it asks for the
                            // other's.
                            both_locked.wait().await;
                        }
                        let credited = sqlx::query(&credit)
                            .bind(to)
                            .bind(amount)
                            .execute(&mut *tx)
                            .await;
                        if let Err(error) = &credited {
                            errors.lock().unwrap().push(code(error));
                        }
                        credited?;
                        sqlx::query(&record).bind(name).execute(&mut *tx).await?;
                        Ok::<_, sqlx::Error>(())
                    })
                })
                .await;
            (result, mine.load(Ordering::SeqCst))
        })
    };
    let started = Instant::now();
    let one = transfer("1 to 2", 1, 2, 30);
    let two = transfer("2 to 1", 2, 1, 5);
    let (one, two) = (one.await.unwrap(), two.await.unwrap());

    one.0.expect("the first transfer commits");
    two.0.expect("the second transfer commits");
    assert_eq!(one.1 + two.1, 3, "the one aborted ran twice");
    assert_eq!(*errors.lock().unwrap(), vec![Some("40P01".to_owned())]);
    assert_eq!(
        value(&scoped, "SELECT balance FROM s.account WHERE id = 1").await,
        75
    );
    assert_eq!(
        value(&scoped, "SELECT balance FROM s.account WHERE id = 2").await,
        125
    );
    assert_eq!(value(&scoped, "SELECT count(*) FROM s.transfer").await, 2);
    // The server's deadlock_timeout (1 s by default) plus one short pause.
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

/// A unique violation is an answer, not a conflict: one attempt, and the
/// transaction rolled back.
#[tokio::test]
#[ignore = "needs PostgreSQL at DATABASE_URL; run with --ignored"]
async fn a_unique_violation_is_not_retried() {
    let scoped = Scoped::new(
        "unique",
        "CREATE TABLE s.users (email text PRIMARY KEY, note text);
         INSERT INTO s.users VALUES ('ann@example.com', NULL);",
    )
    .await;
    let insert = scoped.sql("INSERT INTO s.users VALUES ($1, NULL)");
    let note = scoped.sql("UPDATE s.users SET note = 'touched'");
    let attempts = Arc::new(AtomicU32::new(0));
    let error = db::transaction(&scoped.pool)
        .serializable()
        .run(|tx| {
            let (attempts, insert, note) = (attempts.clone(), insert.clone(), note.clone());
            Box::pin(async move {
                attempts.fetch_add(1, Ordering::SeqCst);
                sqlx::query(&note).execute(&mut *tx).await?;
                sqlx::query(&insert)
                    .bind("ann@example.com")
                    .execute(&mut *tx)
                    .await?;
                Ok::<_, sqlx::Error>(())
            })
        })
        .await
        .unwrap_err();

    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    assert_eq!(code(&error).as_deref(), Some("23505"));
    assert_eq!(error.classify(), Verdict::Permanent);
    let touched = value(
        &scoped,
        "SELECT count(*) FROM s.users WHERE note IS NOT NULL",
    )
    .await;
    assert_eq!(touched, 0, "rolled back");
}

/// A retry chain started inside the transaction is refused before its
/// first attempt, and the transaction is rolled back and not retried.
#[tokio::test]
#[ignore = "needs PostgreSQL at DATABASE_URL; run with --ignored"]
async fn a_retry_inside_the_transaction_is_refused_before_its_first_attempt() {
    let scoped = Scoped::new("guard", "CREATE TABLE s.outbox (id serial PRIMARY KEY);").await;
    let insert = scoped.sql("INSERT INTO s.outbox DEFAULT VALUES");
    let transaction_attempts = Arc::new(AtomicU32::new(0));
    let external_calls = Arc::new(AtomicU32::new(0));
    let deadline_inside = Arc::new(std::sync::Mutex::new(None));
    let error = db::transaction(&scoped.pool)
        .run(|tx| {
            let (attempts, calls, seen, insert) = (
                transaction_attempts.clone(),
                external_calls.clone(),
                deadline_inside.clone(),
                insert.clone(),
            );
            Box::pin(async move {
                attempts.fetch_add(1, Ordering::SeqCst);
                *seen.lock().unwrap() = deadline::current();
                sqlx::query(&insert).execute(&mut *tx).await?;
                // An HTTP call with its own retry, inside the transaction.
                Policy::http()
                    .retry(|| {
                        calls.fetch_add(1, Ordering::SeqCst);
                        async { Ok::<_, sqlx::Error>(()) }
                    })
                    .await
            })
        })
        .await
        .unwrap_err();

    assert_eq!(
        external_calls.load(Ordering::SeqCst),
        0,
        "refused before its first attempt"
    );
    // The transaction's time bound: the end of `db_tx`'s 5 s budget.
    let seen = deadline_inside
        .lock()
        .unwrap()
        .expect("a deadline inside the transaction");
    let left = seen - Instant::now();
    assert!(left <= Duration::from_secs(5), "{left:?}");
    assert_eq!(
        transaction_attempts.load(Ordering::SeqCst),
        1,
        "the refusal is not retried"
    );
    assert_eq!(runtime_error(&error), Some(&Error::RetryInsideTransaction));
    assert_eq!(error.classify(), Verdict::Ignored);
    assert!(
        error.to_string().contains("retry around the transaction"),
        "{error}"
    );
    assert_eq!(
        value(&scoped, "SELECT count(*) FROM s.outbox").await,
        0,
        "rolled back"
    );

    // The same chain, around the transaction, runs.
    let mut calls = 0;
    Policy::http()
        .retry(|| {
            calls += 1;
            async { Ok::<_, sqlx::Error>(()) }
        })
        .await
        .unwrap();
    assert_eq!(calls, 1);
}

/// WARN events of sqlx's notice target that say "there is no transaction
/// in progress", seen by the process-wide subscriber this binary installs.
static STRAY_ROLLBACKS: AtomicU32 = AtomicU32::new(0);

struct StrayRollbacks;

impl tracing::Subscriber for StrayRollbacks {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let meta = event.metadata();
        if *meta.level() == tracing::Level::WARN && meta.target() == "sqlx::postgres::notice" {
            let mut message = Message(String::new());
            event.record(&mut message);
            if message.0.contains("no transaction in progress") {
                STRAY_ROLLBACKS.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// The process-wide recorder and subscriber of this binary, installed once.
fn observers() -> &'static metrics_util::debugging::Snapshotter {
    static SNAPSHOTTER: std::sync::OnceLock<metrics_util::debugging::Snapshotter> =
        std::sync::OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::set_global_recorder(recorder).expect("no other recorder in this binary");
        tracing::subscriber::set_global_default(StrayRollbacks)
            .expect("no other subscriber in this binary");
        snapshotter
    })
}

type Snapshot = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    metrics_util::debugging::DebugValue,
)>;

/// `http_client_retries_total` of `target`, by (attempt, result). (A
/// snapshot drains the counters: take one, read every target from it.)
fn retries(snapshot: &Snapshot, target: &str) -> Vec<(String, String, u64)> {
    let mut found = Vec::new();
    for (key, _, _, value) in snapshot {
        let key = key.key();
        if key.name() != "http_client_retries_total"
            || !key
                .labels()
                .any(|l| l.key() == "target" && l.value() == target)
        {
            continue;
        }
        let label = |name: &str| {
            key.labels()
                .find(|l| l.key() == name)
                .map(|l| l.value().to_owned())
                .unwrap_or_default()
        };
        if let metrics_util::debugging::DebugValue::Counter(n) = value {
            found.push((label("attempt"), label("result"), *n));
        }
    }
    found.sort();
    found
}

/// The doctors' write skew (PostgreSQL's own SSI example): two SERIALIZABLE
/// transactions each see two doctors on call and take one off. The first
/// commits; the server refuses the second at `COMMIT` (40001), the helper
/// runs it again, and it now sees one doctor left and keeps them on call.
/// The run again is reported like every retry chain's (a 40001 re-run
/// once left no metric and no event), and the refused commit leaves no
/// stray `ROLLBACK` behind, whose sqlx WARN "there is no transaction in
/// progress" read like a bug.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL at DATABASE_URL; run with --ignored"]
async fn a_commit_refused_runs_again_reported_and_without_a_stray_rollback() {
    let snapshotter = observers();
    let scoped = Scoped::new(
        "refused_commit",
        "CREATE TABLE s.doctors (id int PRIMARY KEY, on_call bool NOT NULL);
         INSERT INTO s.doctors VALUES (1, true), (2, true);",
    )
    .await;
    let both_read = Arc::new(Barrier::new(2));
    let both_wrote = Arc::new(Barrier::new(2));
    let count = scoped.sql("SELECT count(*) FROM s.doctors WHERE on_call");
    let off = scoped.sql("UPDATE s.doctors SET on_call = false WHERE id = $1");
    let first_off = scoped.sql("SELECT NOT on_call FROM s.doctors WHERE id = 1");

    let go_off = |id: i32, target: &'static str| {
        let (pool, both_read, both_wrote) =
            (scoped.pool.clone(), both_read.clone(), both_wrote.clone());
        let (count, off, first_off) = (count.clone(), off.clone(), first_off.clone());
        tokio::spawn(async move {
            let runs = Arc::new(AtomicU32::new(0));
            let result = db::transaction(&pool)
                .serializable()
                .labels(resilience_runtime::telemetry::Labels::new("test", target))
                .run(|tx| {
                    let (runs, both_read, both_wrote, pool) = (
                        runs.clone(),
                        both_read.clone(),
                        both_wrote.clone(),
                        pool.clone(),
                    );
                    let (count, off, first_off) = (count.clone(), off.clone(), first_off.clone());
                    Box::pin(async move {
                        let first = runs.fetch_add(1, Ordering::SeqCst) == 0;
                        let on_call: i64 = sqlx::query_scalar(&count).fetch_one(&mut *tx).await?;
                        if first {
                            both_read.wait().await;
                        }
                        if on_call >= 2 {
                            sqlx::query(&off).bind(id).execute(&mut *tx).await?;
                        }
                        if first {
                            both_wrote.wait().await;
                            if id == 2 {
                                // Commit after doctor 1's transaction did.
                                let deadline = Instant::now() + Duration::from_secs(10);
                                while !sqlx::query_scalar::<_, bool>(&first_off)
                                    .fetch_one(&pool)
                                    .await?
                                {
                                    assert!(Instant::now() < deadline, "doctor 1 never committed");
                                    tokio::time::sleep(Duration::from_millis(5)).await;
                                }
                            }
                        }
                        Ok::<_, sqlx::Error>(())
                    })
                })
                .await;
            (result, runs.load(Ordering::SeqCst))
        })
    };
    let one = go_off(1, "doctor-1");
    let two = go_off(2, "doctor-2");
    let (one, two) = (one.await.unwrap(), two.await.unwrap());
    one.0.expect("doctor 1 goes off call");
    two.0
        .expect("doctor 2's transaction commits on its second run");
    assert_eq!((one.1, two.1), (1, 2), "only the refused commit runs again");
    assert_eq!(
        value(&scoped, "SELECT count(*) FROM s.doctors WHERE on_call").await,
        1,
        "one doctor stays on call"
    );

    let snapshot = snapshotter.snapshot().into_vec();
    assert_eq!(
        retries(&snapshot, "doctor-1"),
        [("1".into(), "success".into(), 1)]
    );
    assert_eq!(
        retries(&snapshot, "doctor-2"),
        [
            ("1".into(), "retry".into(), 1),
            ("2".into(), "success".into(), 1)
        ]
    );
    // Every connection back and closed: a ROLLBACK still queued on one
    // would have been sent by now.
    scoped.pool.close().await;
    assert_eq!(
        STRAY_ROLLBACKS.load(Ordering::SeqCst),
        0,
        "sqlx warned of a stray ROLLBACK"
    );
}
