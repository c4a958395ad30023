//! Consumer idempotency: a message that was already settled is not applied
//! again when the broker redelivers it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::RngCore;

use crate::error::Error;
use crate::idempotency::records::{Full, Record, Records};
use crate::retry::{Classify, Verdict};

/// How a message was settled, as its record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Settled {
    /// The handler succeeded: its effect is applied.
    Applied,
    /// The message was handed to the dead-letter sink.
    DeadLettered,
}

impl Settled {
    /// `applied` or `dead_lettered`: the value a store writes.
    ///
    /// ```
    /// use resilience::consumer::Settled;
    ///
    /// assert_eq!(Settled::Applied.as_str(), "applied");
    /// assert_eq!(Settled::parse("dead_lettered"), Some(Settled::DeadLettered));
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Settled::Applied => "applied",
            Settled::DeadLettered => "dead_lettered",
        }
    }

    /// The value [`as_str`](Self::as_str) wrote, read back.
    ///
    /// ```
    /// use resilience::consumer::Settled;
    ///
    /// assert_eq!(Settled::parse("applied"), Some(Settled::Applied));
    /// assert_eq!(Settled::parse("lock:1234"), None);
    /// ```
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "applied" => Some(Settled::Applied),
            "dead_lettered" => Some(Settled::DeadLettered),
            _ => None,
        }
    }
}

/// The proof that this consumer holds a message's id while its handler
/// runs: a random 128-bit token. A store settles or releases an id only
/// for the lease that took it, so a consumer whose lock expired cannot
/// overwrite the record of the one that took the message after it.
///
/// ```
/// use resilience::consumer::Lease;
///
/// assert_ne!(Lease::new(), Lease::new());
/// assert_eq!(Lease::from_token(7).token(), 7);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease(u128);

impl Lease {
    /// A lease with a fresh random token.
    pub fn new() -> Self {
        let mut token = [0u8; 16];
        crate::retry::thread_rng(|rng| rng.fill_bytes(&mut token));
        Self(u128::from_be_bytes(token))
    }

    /// A lease read back from a store.
    pub const fn from_token(token: u128) -> Self {
        Self(token)
    }

    /// The token.
    pub const fn token(&self) -> u128 {
        self.0
    }
}

impl Default for Lease {
    fn default() -> Self {
        Self::new()
    }
}

/// What [`Dedup::begin`] found for a message id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begin {
    /// Nobody had it: it is now locked under this lease, for the lock ttl.
    Fresh(Lease),
    /// It was settled before: acknowledge the redelivery, do not run it.
    Settled(Settled),
    /// Another consumer (or a crashed one, until its lock expires) holds
    /// it: hand the message back to the broker for later.
    InFlight,
}

/// A deduplicator that failed or could not be reached.
///
/// Transient for the retry executor: settling a record is retried under
/// [`Policy::http`](crate::retry::Policy::http) before the consumer gives
/// up on it.
///
/// ```
/// use resilience::consumer::DedupError;
/// use resilience::{Classify, Verdict};
///
/// let err = DedupError::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
/// assert_eq!(err.classify(), Verdict::Transient);
/// assert_eq!(err.to_string(), "deduplicator unavailable: connection refused");
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[error("deduplicator unavailable: {0}")]
pub struct DedupError(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl DedupError {
    /// Wraps the store's own error.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }
}

impl Classify for DedupError {
    fn classify(&self) -> Verdict {
        match self.0.downcast_ref::<Error>() {
            Some(runtime) => runtime.classify(),
            None => Verdict::Transient,
        }
    }
}

impl From<Error> for DedupError {
    fn from(error: Error) -> Self {
        Self::new(error)
    }
}

/// The storage contract of consumer idempotency: one record per message
/// id, first a lock (while the handler runs), then how the message was
/// settled.
///
/// # Contract
///
/// - [`begin`](Self::begin) atomically takes an id that has no record
///   (locking it for `lock_ttl`), or reports its record.
/// - [`settle`](Self::settle) replaces the lock with the settled record
///   (kept for `ttl`) only when `lease` still holds it, and reports whether
///   it did.
/// - [`release`](Self::release) deletes the lock only when `lease` still
///   holds it.
/// - Expiry is the store's: a crashed consumer's lock vanishes after
///   `lock_ttl`, and the redelivered message runs again.
///
/// The consumer calls `settle(Applied)` as soon as the handler succeeds and
/// before it acknowledges the message, so a consumer killed between the two
/// leaves a record, and the redelivery is acknowledged without running the
/// handler. What this cannot cover is a crash between the handler's effect
/// and `settle`: close that window with a unique
/// constraint on the effect itself (or by writing the record in the
/// handler's own transaction, a PostgreSQL implementation of this trait).
///
/// [`MemoryDedup`] keeps records in the process (tests, one replica);
/// `RedisDedup` (feature `consumer-redis`) shares them between replicas.
///
/// ```
/// use resilience::consumer::{Begin, Dedup, MemoryDedup, Settled};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), resilience::consumer::DedupError> {
/// let dedup = MemoryDedup::new();
/// let Begin::Fresh(lease) = dedup.begin("order-1", Duration::from_secs(30)).await? else { unreachable!() };
/// assert_eq!(dedup.begin("order-1", Duration::from_secs(30)).await?, Begin::InFlight);
/// assert!(dedup.settle("order-1", lease, Settled::Applied, Duration::from_secs(3600)).await?);
/// assert_eq!(dedup.begin("order-1", Duration::from_secs(30)).await?, Begin::Settled(Settled::Applied));
/// # Ok(()) }
/// ```
pub trait Dedup: Send + Sync {
    /// Takes `id` for `lock_ttl`, or reports what holds it.
    fn begin(
        &self,
        id: &str,
        lock_ttl: Duration,
    ) -> impl Future<Output = Result<Begin, DedupError>> + Send;

    /// Records `id` as `settled` for `ttl`, if `lease` still holds it;
    /// `false` when it did not (the lock had expired and was taken again).
    fn settle(
        &self,
        id: &str,
        lease: Lease,
        settled: Settled,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, DedupError>> + Send;

    /// Frees `id` if `lease` still holds it, so that the message can run
    /// again (it was handed back to the broker unsettled).
    fn release(
        &self,
        id: &str,
        lease: Lease,
    ) -> impl Future<Output = Result<(), DedupError>> + Send;
}

/// No deduplication: every delivery runs the handler. The default of a
/// [`Consumer`](super::Consumer) without
/// [`with_dedup`](super::Consumer::with_dedup), for handlers that are
/// idempotent by themselves.
///
/// ```
/// use resilience::consumer::{Begin, Dedup, NoDedup};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// assert!(matches!(NoDedup.begin("m", Duration::from_secs(1)).await, Ok(Begin::Fresh(_))));
/// assert!(matches!(NoDedup.begin("m", Duration::from_secs(1)).await, Ok(Begin::Fresh(_))));
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct NoDedup;

impl Dedup for NoDedup {
    async fn begin(&self, _: &str, _: Duration) -> Result<Begin, DedupError> {
        Ok(Begin::Fresh(Lease::from_token(0)))
    }
    async fn settle(&self, _: &str, _: Lease, _: Settled, _: Duration) -> Result<bool, DedupError> {
        Ok(true)
    }
    async fn release(&self, _: &str, _: Lease) -> Result<(), DedupError> {
        Ok(())
    }
}

/// A [`Dedup`] in this process's memory, on tokio's clock (so paused-clock
/// tests see its locks expire). Clones share the records. Its records are
/// those of the idempotency layer's `MemoryStore`: one implementation of
/// the lease discipline for both, and an expired record is dropped, not
/// kept for the life of the process.
///
/// It survives a lost connection to the broker, not a restart of the
/// process: use `RedisDedup` across replicas and restarts.
///
/// ```
/// use resilience::consumer::{Begin, Dedup, MemoryDedup};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), resilience::consumer::DedupError> {
/// let dedup = MemoryDedup::new();
/// let Begin::Fresh(_crashed) = dedup.begin("order-1", Duration::from_secs(30)).await? else { unreachable!() };
/// tokio::time::advance(Duration::from_secs(31)).await;
/// // The crashed holder's lock expired: the message runs again.
/// assert!(matches!(dedup.begin("order-1", Duration::from_secs(30)).await?, Begin::Fresh(_)));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MemoryDedup {
    records: Arc<Records<String, Lease, Settled>>,
}

impl Default for MemoryDedup {
    fn default() -> Self {
        // Unbounded: a full deduplicator would stop the consumer, and
        // its records expire (the lock ttl, then the settled ttl).
        Self {
            records: Arc::new(Records::new(usize::MAX)),
        }
    }
}

impl MemoryDedup {
    /// An empty deduplicator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Live records (locks and settled messages).
    ///
    /// ```
    /// use resilience::consumer::MemoryDedup;
    ///
    /// assert_eq!(MemoryDedup::new().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// `true` when there is no live record.
    ///
    /// ```
    /// use resilience::consumer::MemoryDedup;
    ///
    /// assert!(MemoryDedup::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Dedup for MemoryDedup {
    async fn begin(&self, id: &str, lock_ttl: Duration) -> Result<Begin, DedupError> {
        let lease = Lease::new();
        Ok(match self.records.begin(id, &lease, lock_ttl) {
            Ok(None) => Begin::Fresh(lease),
            Ok(Some(Record::Held(_))) => Begin::InFlight,
            Ok(Some(Record::Done(settled))) => Begin::Settled(settled),
            // Cannot happen with an unbounded map; said rather than assumed.
            Err(Full) => {
                return Err(DedupError::new(std::io::Error::other(
                    "the memory deduplicator is full",
                )));
            }
        })
    }

    async fn settle(
        &self,
        id: &str,
        lease: Lease,
        settled: Settled,
        ttl: Duration,
    ) -> Result<bool, DedupError> {
        Ok(self.records.complete(id, &lease, settled, ttl))
    }

    async fn release(&self, id: &str, lease: Lease) -> Result<(), DedupError> {
        self.records.release(id, &lease);
        Ok(())
    }
}

impl fmt::Display for Settled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
