//! The transaction helper from the attribute: `#[retry(preset = "db_tx")]`
//! on a fn that takes the pool and runs one transaction per attempt, against
//! the real PostgreSQL (`DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`).
//!
//! `cargo test --workspace --all-features --test postgres_attribute -- --ignored`

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use resilience::db::{self, sqlx};
use resilience::retry;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgPool};
use tokio::sync::Barrier;

async fn pool() -> PgPool {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&url)
        .await
        .expect("PostgreSQL must be reachable at DATABASE_URL")
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
