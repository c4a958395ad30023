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
