//! The transaction helper from the attribute: `#[retry(preset = "db_tx")]`
//! on a fn that takes the pool and runs one transaction per attempt, against
//! the real PostgreSQL (`DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`).
//!
//! `cargo test --workspace --all-features --test postgres_attribute -- --ignored`

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use resilience::chaos::{Proxy, Toxic};
use resilience::db::{self, sqlx};
use resilience::retry;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Executor, PgPool};
use tokio::sync::Barrier;

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

async fn pool() -> PgPool {
    PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&database_url())
        .await
        .expect("PostgreSQL must be reachable at DATABASE_URL")
}

/// A fault-injecting proxy in front of the real PostgreSQL, its toxic on
/// every connection, and a one-connection pool through it.
async fn pool_through(toxic: Toxic) -> (Proxy, PgPool) {
    let options: PgConnectOptions = database_url().parse().unwrap();
    let upstream = tokio::net::lookup_host((options.get_host(), options.get_port()))
        .await
        .unwrap()
        .next()
        .unwrap();
    let proxy = Proxy::builder(upstream)
        .toxic(toxic, 1.0)
        .start()
        .await
        .unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(5))
        .connect_with(options.host("127.0.0.1").port(proxy.addr().port()))
        .await
        .expect("PostgreSQL must be reachable through the proxy");
    (proxy, pool)
}

/// A table of payments, for the commit tests.
async fn payments(pool: &PgPool, test: &str) -> String {
    let table = format!("resilience_{test}_{}", std::process::id());
    pool.execute(
        format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id serial PRIMARY KEY, note text NOT NULL);")
            .as_str(),
    )
    .await
    .unwrap();
    table
}

async fn rows(pool: &PgPool, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The runtime's own error inside a `sqlx::Error`.
fn runtime_error(error: &sqlx::Error) -> Option<&resilience::Error> {
    match error {
        sqlx::Error::Io(error) => error.get_ref()?.downcast_ref(),
        _ => None,
    }
}

/// One payment, one transaction per attempt. Before each attempt after the
/// first, `heal` clears the proxy's toxics (for new connections).
#[retry(preset = "db_tx", idempotent)]
async fn pay(
    pool: &PgPool,
    table: &str,
    attempts: &AtomicU32,
    heal: &Proxy,
) -> Result<(), sqlx::Error> {
    if attempts.fetch_add(1, Ordering::SeqCst) > 0 {
        heal.heal();
    }
    db::transaction(pool)
        .attempt(async |tx| {
            sqlx::query(&format!("INSERT INTO {table} (note) VALUES ('paid')"))
                .execute(&mut *tx)
                .await?;
            Ok(())
        })
        .await
}

/// The connection breaks after the server applied the `COMMIT`, before its
/// answer reached the client: the outcome is unknown to the caller, and
/// running the transaction again would pay twice. It is not run again,
/// from the attribute or from `transaction().run`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: cargo test --all-features --test postgres_attribute -- --ignored"]
async fn a_connection_broken_during_commit_is_not_run_again() {
    let direct = pool().await;
    let table = payments(&direct, "commit_lost").await;

    // A proxy that is never healed: a second attempt would be reset too,
    // and pay again.
    let (proxy, through) = pool_through(Toxic::reset_after_response_to(b"COMMIT")).await;
    let never = Proxy::builder(proxy.upstream()).start().await.unwrap();
    let attempts = AtomicU32::new(0);
    let err = pay(&through, &table, &attempts, &never).await.unwrap_err();
    assert!(
        matches!(
            runtime_error(&err),
            Some(resilience::Error::CommitOutcomeUnknown { .. })
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("may or may not have been applied"),
        "{err}"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 1, "not run again");
    assert_eq!(proxy.faults().reset_after_response_to, 1);
    assert_eq!(rows(&direct, &table).await, 1, "the server applied it once");

    let (proxy, through) = pool_through(Toxic::reset_after_response_to(b"COMMIT")).await;
    let runs = Arc::new(AtomicU32::new(0));
    let result: Result<(), sqlx::Error> = db::transaction(&through)
        .run(|tx| {
            let (runs, insert) = (
                runs.clone(),
                format!("INSERT INTO {table} (note) VALUES ('run')"),
            );
            Box::pin(async move {
                runs.fetch_add(1, Ordering::SeqCst);
                sqlx::query(&insert).execute(&mut *tx).await?;
                Ok(())
            })
        })
        .await;
    let err = result.unwrap_err();
    assert!(
        matches!(
            runtime_error(&err),
            Some(resilience::Error::CommitOutcomeUnknown { .. })
        ),
        "{err:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "not run again");
    assert_eq!(proxy.faults().reset_after_response_to, 1);
    assert_eq!(rows(&direct, &table).await, 2);
    direct
        .execute(format!("DROP TABLE {table}").as_str())
        .await
        .unwrap();
}

/// The connection breaks after the server ran the `INSERT`, before the
/// commit: the server rolls the open transaction back, so running it
/// again is safe, and the payment is made exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: cargo test --all-features --test postgres_attribute -- --ignored"]
async fn a_connection_broken_before_commit_runs_the_transaction_again_once() {
    let direct = pool().await;
    let table = payments(&direct, "insert_lost").await;
    let (proxy, through) = pool_through(Toxic::reset_after_response_to(b"INSERT")).await;
    let attempts = AtomicU32::new(0);
    pay(&through, &table, &attempts, &proxy).await.unwrap();
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert_eq!(proxy.faults().reset_after_response_to, 1);
    assert_eq!(rows(&direct, &table).await, 1, "applied exactly once");
    direct
        .execute(format!("DROP TABLE {table}").as_str())
        .await
        .unwrap();
}

/// Reads the counter, waits for the other writer on its first attempt,
/// then writes `value · factor + add`: a serialization failure for one of
/// two concurrent calls, which the attribute runs again whole.
// A transaction that failed with 40001 or 40P01 was rolled back: running it
// again is safe, which `idempotent` asserts.
#[retry(preset = "db_tx", idempotent)]
async fn update_counter(
    pool: &PgPool,
    table: &str,
    factor: i64,
    add: i64,
    both_read: &Barrier,
    attempts: &AtomicU32,
) -> Result<(), sqlx::Error> {
    let first = attempts.fetch_add(1, Ordering::SeqCst) == 0;
    db::transaction(pool)
        .serializable()
        .attempt(async |tx| {
            let value: i64 = sqlx::query_scalar(&format!("SELECT value FROM {table} WHERE id = 1"))
                .fetch_one(&mut *tx)
                .await?;
            if first {
                both_read.wait().await;
            }
            sqlx::query(&format!("UPDATE {table} SET value = $1 WHERE id = 1"))
                .bind(value * factor + add)
                .execute(&mut *tx)
                .await?;
            Ok(())
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: cargo test --all-features --test postgres_attribute -- --ignored"]
async fn the_attribute_runs_a_serializable_transaction_again_on_40001() {
    let pool = pool().await;
    let table = format!("resilience_attr_{}", std::process::id());
    pool.execute(format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int PRIMARY KEY, value bigint NOT NULL); INSERT INTO {table} VALUES (1, 1);").as_str())
        .await
        .unwrap();
    let both_read = Arc::new(Barrier::new(2));
    let (double, add) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let task = |factor, plus, attempts: Arc<AtomicU32>| {
        let (pool, table, both_read) = (pool.clone(), table.clone(), both_read.clone());
        tokio::spawn(async move {
            update_counter(&pool, &table, factor, plus, &both_read, &attempts).await
        })
    };
    let first = task(2, 0, double.clone());
    let second = task(1, 10, add.clone());
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    let value: i64 = sqlx::query_scalar(&format!("SELECT value FROM {table} WHERE id = 1"))
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.execute(format!("DROP TABLE {table}").as_str())
        .await
        .unwrap();
    first.expect("the doubling commits");
    second.expect("the addition commits");
    // Serially 1 → 2 → 12 or 1 → 11 → 22; a lost update would leave 2 or 11.
    assert!(value == 12 || value == 22, "{value}");
    let (d, a) = (double.load(Ordering::SeqCst), add.load(Ordering::SeqCst));
    assert_eq!(
        d + a,
        3,
        "one of the two ran its transaction again: {d} + {a}"
    );
}
