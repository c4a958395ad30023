//! PostgreSQL through `sqlx` (feature `sqlx-postgres`): transactions run
//! again as a whole on a serialization failure or a deadlock, and `sqlx`
//! errors classified by SQLSTATE.
//!
//! - [`transaction`]: begin, run a closure on the transaction, commit; on
//!   `40001` serialization_failure or `40P01` deadlock_detected, roll back
//!   and run the whole transaction again under [`Policy::db_tx`] and the
//!   caller's [deadline](crate::deadline); also when the connection broke
//!   before the commit (the server rolled the transaction back). A
//!   connection that broke **during** the commit is
//!   [`Error::CommitOutcomeUnknown`](crate::Error::CommitOutcomeUnknown),
//!   never run again: the server may have applied it. Anything else is
//!   returned at once.
//! - [`Classify`] for `sqlx::Error`: `40001` and `40P01` transient, every
//!   other SQLSTATE (`23505`, `23503`…) permanent, broken connections
//!   transient, a pool timeout not retried (see the impl).
//!
//! # When to use it
//!
//! Where a transaction fails **by design** when it meets another one:
//!
//! - transactions at `SERIALIZABLE` (or `REPEATABLE READ`), which the
//!   server aborts with `40001` whenever running them together could give
//!   a result that no serial order gives;
//! - concurrent updates of the same rows in an order that may differ from
//!   one transaction to the other (a transfer between two accounts), where
//!   the server breaks a deadlock by aborting one of them with `40P01`.
//!
//! A plain `READ COMMITTED` transaction that does not deadlock needs no
//! retry: the server waits on row locks instead of failing, and a unique
//! violation or a failed check is an answer, not a conflict. Use
//! `pool.begin()` as usual there.
//!
//! # Retry around the transaction, never inside
//!
//! A retry inside a transaction sleeps with the transaction's row locks
//! held: every query waiting on those rows waits through each pause, and a
//! slow dependency slows the database for everyone. So the helper retries
//! the whole transaction, from `BEGIN`, and a retry chain started inside
//! its closure fails before its first attempt with
//! [`Error::RetryInsideTransaction`]: retry around the transaction, or move
//! the external call out of it (record the intent in an outbox table, in
//! the same transaction, and send it afterwards).
//!
//! ```no_run
//! use resilience::{db, deadline};
//! use std::time::Duration;
//!
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
//! // A handler with a 2 s deadline: no attempt starts, and no pause lasts,
//! // past it.
//! deadline::with_timeout(Duration::from_secs(2), async {
//!     db::transaction(&pool)
//!         .serializable()
//!         .run(|tx| {
//!             Box::pin(async move {
//!                 let total: i64 = sqlx::query_scalar("SELECT sum(amount) FROM ledger")
//!                     .fetch_one(&mut *tx)
//!                     .await?;
//!                 sqlx::query("INSERT INTO totals (amount) VALUES ($1)")
//!                     .bind(total)
//!                     .execute(&mut *tx)
//!                     .await?;
//!                 Ok(())
//!             })
//!         })
//!         .await
//! })
//! .await
//! # }
//! ```
//!
//! With the attributes, put `#[retry(preset = "db_tx")]` on a fn that takes
//! the pool and runs one attempt of the transaction
//! ([`Transaction::attempt`]); a `#[circuit_breaker]` around the database
//! is refused at compile time: the pool already queues and bounds the
//! calls, and the database's protection is the pool's size and
//! `statement_timeout`.
//!
//! [`Policy::db_tx`]: crate::retry::Policy::db_tx
//! [`Classify`]: crate::retry::Classify
//! [`Error::RetryInsideTransaction`]: crate::Error::RetryInsideTransaction

mod classify;
mod transaction;

pub use transaction::{BoxFuture, Isolation, Transaction, transaction};

/// The driver (0.8), re-exported so that code naming its types uses the
/// version these integrations are built for: an `sqlx::Error` of another
/// version is another type, which the classification does not cover.
pub use sqlx;
