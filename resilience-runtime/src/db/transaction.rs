//! A whole transaction, run again on a serialization failure or a deadlock.

use std::fmt;

use std::future::Future;
use std::pin::Pin;

use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres};
use tokio::time::Instant;

use crate::error::Error;
use crate::retry::no_retry;
use crate::retry::{Classify, Policy};
use crate::telemetry::{Labels, RetryMetrics};

/// The future of one run of a transaction's closure, borrowing the
/// transaction's connection for `'c` (the same as `futures::future::BoxFuture`).
pub type BoxFuture<'c, T> = Pin<Box<dyn Future<Output = T> + Send + 'c>>;

/// The isolation level a [`Transaction`] begins with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Isolation {
    /// The server's default (`Read Committed` unless configured otherwise):
    /// a plain `BEGIN`.
    Default,
    /// `READ COMMITTED`.
    ReadCommitted,
    /// `REPEATABLE READ`: may fail with `40001` on a concurrent update.
    RepeatableRead,
    /// `SERIALIZABLE`: fails with `40001` whenever the transactions running
    /// together could not have run one after the other.
    Serializable,
}

impl Isolation {
    /// The statement that begins a transaction at this level.
    ///
    /// ```
    /// use resilience::db::Isolation;
    ///
    /// assert_eq!(Isolation::Serializable.begin(), "BEGIN ISOLATION LEVEL SERIALIZABLE");
    /// assert_eq!(Isolation::Default.begin(), "BEGIN");
    /// ```
    pub const fn begin(self) -> &'static str {
        match self {
            Isolation::Default => "BEGIN",
            Isolation::ReadCommitted => "BEGIN ISOLATION LEVEL READ COMMITTED",
            Isolation::RepeatableRead => "BEGIN ISOLATION LEVEL REPEATABLE READ",
            Isolation::Serializable => "BEGIN ISOLATION LEVEL SERIALIZABLE",
        }
    }
}

/// A transaction on a PostgreSQL pool: begin, run a closure on the
/// transaction's connection, commit; on `40001` serialization_failure or
/// `40P01` deadlock_detected (at any statement, the commit included), roll
/// back and run the **whole transaction** again, under
/// [`Policy::db_tx`] by default (3 attempts, pauses of 10 ms·n² plus up to
/// 25 %) and the caller's [deadline](crate::deadline). A connection that
/// broke before the commit is run again too (the server rolled the
/// transaction back); one that broke **during** the commit is not: the
/// server may have applied it, and the caller gets
/// [`Error::CommitOutcomeUnknown`]. Every other error rolls back and is
/// returned at once, after one attempt.
///
/// Each run is reported like every other retry chain: the attempt metrics
/// under the labels of [`labels`](Self::labels) (by default the service
/// the registry names and the target `postgres`), an INFO event
/// `attempt failed, retrying after a pause` for each run again, a WARN when
/// it gives up.
///
/// Built by [`transaction`]; see the [module docs](super) for when to use
/// it.
///
/// ```no_run
/// use resilience::db;
///
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// db::transaction(&pool)
///     .serializable()
///     .run(|tx| {
///         Box::pin(async move {
///             sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = 1")
///                 .execute(&mut *tx)
///                 .await?;
///             sqlx::query("UPDATE accounts SET balance = balance + 10 WHERE id = 2")
///                 .execute(&mut *tx)
///                 .await?;
///             Ok(())
///         })
///     })
///     .await
/// # }
/// ```
///
/// The closure borrows the transaction's connection only: it cannot commit,
/// roll back or reach the pool, and it runs once per attempt, so it must
/// not carry side effects outside the database (send a message through an
/// outbox table instead). A retry chain started inside it, by hand or by
/// `#[retry]`, fails before its first attempt with
/// [`Error::RetryInsideTransaction`]. Inside it,
/// [`deadline::current`](crate::deadline::current) is the transaction's
/// time bound: the caller's deadline or the end of the policy's
/// `max_elapsed`, whichever is earlier.
#[derive(Clone, Copy)]
#[must_use = "a transaction does nothing until `run` or `attempt` is awaited"]
pub struct Transaction<'p> {
    pool: &'p PgPool,
    isolation: Isolation,
    policy: Policy,
    labels: Option<Labels>,
}

/// A [`Transaction`] on `pool`, at the server's default isolation level
/// under [`Policy::db_tx`].
///
/// ```no_run
/// use resilience::db::{self, Isolation};
/// use resilience::retry::Policy;
///
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// let count: i64 = db::transaction(&pool)
///     .isolation(Isolation::RepeatableRead)
///     .policy(Policy::db_tx())
///     .run(|tx| Box::pin(sqlx::query_scalar("SELECT count(*) FROM orders").fetch_one(&mut *tx)))
///     .await?;
/// # Ok(()) }
/// ```
pub fn transaction(pool: &PgPool) -> Transaction<'_> {
    Transaction {
        pool,
        isolation: Isolation::Default,
        policy: Policy::db_tx(),
        labels: None,
    }
}

impl<'p> Transaction<'p> {
    /// Begins at `isolation` instead of the server's default.
    pub const fn isolation(mut self, isolation: Isolation) -> Self {
        self.isolation = isolation;
        self
    }

    /// Begins at `SERIALIZABLE`: the case this helper is for.
    pub const fn serializable(self) -> Self {
        self.isolation(Isolation::Serializable)
    }

    /// Runs under `policy` instead of [`Policy::db_tx`].
    pub const fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Reports its attempts under `labels` instead of the service the
    /// registry names and the target `postgres`: one target per kind of
    /// transaction tells a hot row from a busy database.
    ///
    /// ```no_run
    /// use resilience::db;
    /// use resilience::telemetry::Labels;
    ///
    /// # async fn demo(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
    /// db::transaction(&pool)
    ///     .serializable()
    ///     .labels(Labels::of("transfers"))
    ///     .run(|tx| Box::pin(async move { sqlx::query("SELECT 1").execute(&mut *tx).await.map(drop) }))
    ///     .await
    /// # }
    /// ```
    pub const fn labels(mut self, labels: Labels) -> Self {
        self.labels = Some(labels);
        self
    }

    /// The isolation level the transaction begins with.
    pub const fn isolation_level(&self) -> Isolation {
        self.isolation
    }

    /// Runs the transaction, again from `BEGIN` on a serialization failure
    /// or a deadlock, and returns what the closure returned once it
    /// committed; see [`Transaction`].
    ///
    /// The closure is called once per attempt and returns its work boxed,
    /// `|tx| Box::pin(async move { … })`, as sqlx's own
    /// `Connection::transaction` takes it: an `async` closure called more
    /// than once cannot, today, give a future that is `Send` for every
    /// borrow of the connection, and a handler's future must be `Send`.
    /// As with sqlx's, the future may borrow the connection only: move
    /// into it what it needs (clone inputs per attempt, share counters by
    /// `Arc`).
    ///
    /// The error type is the closure's: `sqlx::Error` itself, or any type
    /// that [classifies](Classify) its errors and is built from both
    /// `sqlx::Error` (begin and commit fail with it) and the runtime's
    /// [`Error`] (a passed deadline, a spent budget).
    pub async fn run<T, E, F>(self, f: F) -> Result<T, E>
    where
        F: for<'c> FnMut(&'c mut PgConnection) -> BoxFuture<'c, Result<T, E>>,
        E: Classify + From<sqlx::Error> + From<Error>,
    {
        let until = Instant::now().checked_add(self.policy.max_elapsed());
        // The executor drops an attempt before it starts the next, so the
        // lock is never contended: it only lends the closure to one
        // attempt's future at a time.
        let f = tokio::sync::Mutex::new(f);
        let (this, f) = (&self, &f);
        let labels = self.labels.unwrap_or_else(|| Labels::of("postgres"));
        self.policy
            .retry(move || async move {
                let mut f = f.lock().await;
                let mut conn = this.pool.acquire().await?;
                let mut tx = conn.begin_with(this.isolation.begin()).await?;
                let result = no_retry::open(bound(until), (*f)(&mut tx)).await;
                let (result, refused) = finish(tx, result).await;
                if refused {
                    forget_refused_commit(&mut conn).await;
                }
                result
            })
            .notify_with(RetryMetrics::new(labels))
            .await
    }

    /// Runs the transaction once: begin, the closure, commit, or roll back
    /// on an error. For a fn whose `#[retry(preset = "db_tx")]` re-runs the
    /// whole transaction on each attempt:
    ///
    /// ```no_run
    /// use resilience::db;
    ///
    /// // With the `resilience` facade:
    /// // #[resilience::retry(preset = "db_tx", idempotent)]: a transaction that
    /// // failed with 40001 or 40P01 was rolled back, so it may run again.
    /// async fn transfer(pool: &sqlx::PgPool, from: i64, to: i64) -> Result<(), sqlx::Error> {
    ///     db::transaction(pool)
    ///         .serializable()
    ///         .attempt(async |tx| {
    ///             sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = $1")
    ///                 .bind(from)
    ///                 .execute(&mut *tx)
    ///                 .await?;
    ///             sqlx::query("UPDATE accounts SET balance = balance + 10 WHERE id = $1")
    ///                 .bind(to)
    ///                 .execute(&mut *tx)
    ///                 .await?;
    ///             Ok(())
    ///         })
    ///         .await
    /// }
    /// ```
    ///
    /// The same guard holds: a retry chain started inside the closure fails
    /// before its first attempt.
    pub async fn attempt<T, E, F>(self, f: F) -> Result<T, E>
    where
        F: AsyncFnOnce(&mut PgConnection) -> Result<T, E>,
        E: From<sqlx::Error>,
    {
        let until = Instant::now().checked_add(self.policy.max_elapsed());
        self.attempt_until(until, f).await
    }

    async fn attempt_until<T, E, F>(&self, until: Option<Instant>, f: F) -> Result<T, E>
    where
        F: AsyncFnOnce(&mut PgConnection) -> Result<T, E>,
        E: From<sqlx::Error>,
    {
        let mut conn = self.pool.acquire().await?;
        let mut tx = conn.begin_with(self.isolation.begin()).await?;
        let result = no_retry::open(bound(until), f(&mut tx)).await;
        let (result, refused) = finish(tx, result).await;
        if refused {
            forget_refused_commit(&mut conn).await;
        }
        result
    }
}

/// The transaction's time bound, or an hour when the budget is too long to
/// represent (no policy reaches it): a deadline must be in scope for the
/// guard, see `retry::no_retry`.
fn bound(until: Option<Instant>) -> Instant {
    until.unwrap_or_else(|| Instant::now() + std::time::Duration::from_secs(3600))
}

/// Commits after `Ok`, rolls back after `Err`; `true` beside the result
/// when the server refused the commit.
///
/// A commit the server refused (`40001` at `COMMIT` under `SERIALIZABLE`)
/// was not applied and may run again. A commit whose connection broke may
/// have been applied: it becomes [`Error::CommitOutcomeUnknown`], which no
/// classifier retries, carried in `sqlx::Error::Io` like every runtime
/// error.
async fn finish<T, E: From<sqlx::Error>>(
    tx: sqlx::Transaction<'_, Postgres>,
    result: Result<T, E>,
) -> (Result<T, E>, bool) {
    match result {
        Ok(value) => match tx.commit().await {
            Ok(()) => (Ok(value), false),
            Err(refused @ sqlx::Error::Database(_)) => (Err(refused.into()), true),
            Err(broken) => {
                let unknown = Error::CommitOutcomeUnknown {
                    cause: Some(crate::error::Cause::new(broken)),
                };
                (Err(sqlx::Error::from(unknown).into()), false)
            }
        },
        Err(error) => {
            // The closure's error is the one that matters; a rollback that
            // fails leaves a broken connection, which the pool closes.
            let _ = tx.rollback().await;
            (Err(error), false)
        }
    }
}

/// After a refused `COMMIT`, the server has already ended the transaction,
/// but sqlx (0.8) still queues a `ROLLBACK` on the connection as the
/// failed transaction drops, and offers no way to take it back: sent with
/// whatever next uses the connection, it earns the server's warning "there
/// is no transaction in progress", which sqlx logs at WARN and which reads
/// like a bug in the application. It is flushed here, at once, with that
/// one answer kept out of the logs; the retry that follows is reported by
/// the chain.
async fn forget_refused_commit(conn: &mut PoolConnection<Postgres>) {
    use tracing::instrument::WithSubscriber;
    let flushed = conn
        .ping()
        .with_subscriber(tracing::subscriber::NoSubscriber::default())
        .await;
    if flushed.is_err() {
        // A connection that cannot even answer a ping goes, not back to
        // the pool.
        conn.close_on_drop();
    }
}

impl fmt::Debug for Transaction<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transaction")
            .field("isolation", &self.isolation)
            .field("policy", &self.policy)
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}
