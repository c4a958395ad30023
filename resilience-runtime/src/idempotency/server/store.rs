//! The storage contract behind [`IdempotencyLayer`](super::IdempotencyLayer).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Method, StatusCode, Uri};
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::idempotency::IdempotencyKey;

/// What makes two requests "the same request": a SHA-256 of the method,
/// the path with its query, the body, and the values of the configured
/// [fingerprint headers](super::IdempotencyConfigBuilder::with_fingerprint_headers).
///
/// A key presented again with a different fingerprint is a client bug (a
/// key reused for another call), answered with `422`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// The fingerprint of a request.
    ///
    /// ```
    /// use http::{Method, Uri};
    /// use resilience::idempotency::server::Fingerprint;
    ///
    /// let uri = Uri::from_static("/payments?dry_run=0");
    /// let a = Fingerprint::of(&Method::POST, &uri, b"{\"amount\":100}");
    /// assert_eq!(a, Fingerprint::of(&Method::POST, &uri, b"{\"amount\":100}"));
    /// assert_ne!(a, Fingerprint::of(&Method::POST, &uri, b"{\"amount\":101}"));
    /// assert_ne!(a, Fingerprint::of(&Method::PATCH, &uri, b"{\"amount\":100}"));
    /// ```
    pub fn of(method: &Method, uri: &Uri, body: &[u8]) -> Self {
        Self::of_request(method, uri, &HeaderMap::new(), &[], body)
    }

    /// The fingerprint of a request, including the values of the headers
    /// named in `names` (absent and empty are told apart).
    ///
    /// ```
    /// use http::{HeaderMap, Method, Uri, header::AUTHORIZATION};
    /// use resilience::idempotency::server::Fingerprint;
    ///
    /// let (post, uri) = (Method::POST, Uri::from_static("/payments"));
    /// let mut alice = HeaderMap::new();
    /// alice.insert(AUTHORIZATION, "Bearer alice".parse().unwrap());
    /// let mut bob = HeaderMap::new();
    /// bob.insert(AUTHORIZATION, "Bearer bob".parse().unwrap());
    /// let of = |headers: &HeaderMap| Fingerprint::of_request(&post, &uri, headers, &[AUTHORIZATION], b"{}");
    /// assert_ne!(of(&alice), of(&bob));
    /// assert_eq!(of(&HeaderMap::new()), Fingerprint::of(&post, &uri, b"{}"));
    /// ```
    pub fn of_request(
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        names: &[HeaderName],
        body: &[u8],
    ) -> Self {
        let target = uri.path_and_query().map_or("/", |p| p.as_str());
        let mut hash = Sha256::new();
        // Length prefixes keep ("POST", "/ab") apart from ("POS", "T/ab").
        let mut part = |bytes: &[u8]| {
            hash.update((bytes.len() as u64).to_be_bytes());
            hash.update(bytes);
        };
        part(method.as_str().as_bytes());
        part(target.as_bytes());
        part(body);
        for name in names {
            for value in headers.get_all(name) {
                part(name.as_str().as_bytes());
                part(value.as_bytes());
            }
        }
        Self(hash.finalize().into())
    }

    /// A fingerprint read back from a store.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 32 bytes, as a store writes them.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Fingerprint(")?;
        for byte in &self.0[..8] {
            write!(f, "{byte:02x}")?;
        }
        f.write_str("…)")
    }
}

/// The proof that one request holds a key while its handler runs: a random
/// token plus the request's [`Fingerprint`].
///
/// A store must record the whole lease and complete or release the key
/// only for the same lease, so that a request whose lock expired cannot
/// overwrite the work of the request that took the key after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLease {
    token: u128,
    fingerprint: Fingerprint,
}

impl KeyLease {
    /// A new lease with a random 128-bit token.
    pub fn new(fingerprint: Fingerprint) -> Self {
        let mut token = [0u8; 16];
        crate::retry::thread_rng(|rng| rng.fill_bytes(&mut token));
        Self::from_parts(u128::from_be_bytes(token), fingerprint)
    }

    /// A lease read back from a store.
    pub const fn from_parts(token: u128, fingerprint: Fingerprint) -> Self {
        Self { token, fingerprint }
    }

    /// The random token.
    pub const fn token(&self) -> u128 {
        self.token
    }

    /// The fingerprint of the request holding the key.
    pub const fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }
}

/// A response kept for replay: status, the selected headers, the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl StoredResponse {
    /// A response to store.
    pub fn new(status: StatusCode, headers: HeaderMap, body: Bytes) -> Self {
        Self {
            status,
            headers,
            body,
        }
    }

    /// Keeps `status`, `body` and those of `headers` named in `keep`.
    pub(crate) fn capture(
        status: StatusCode,
        headers: &HeaderMap,
        keep: &[HeaderName],
        body: Bytes,
    ) -> Self {
        let mut kept = HeaderMap::new();
        for name in keep {
            for value in headers.get_all(name) {
                kept.append(name.clone(), value.clone());
            }
        }
        Self::new(status, kept, body)
    }

    /// The status code.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stored headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }
}

/// How a request that held a key ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// The response, replayed to every later request with the same key.
    Response(StoredResponse),
    /// The handler answered `status`, but its body was larger than the
    /// configured limit of `limit` bytes, so it was not kept. Later requests
    /// with the key are told so (`409 idempotency_response_not_stored`)
    /// rather than running the handler a second time.
    TooLarge {
        /// The status the handler answered.
        status: StatusCode,
        /// The body limit in force, in bytes.
        limit: u64,
    },
    /// The handler answered `status`, a success or a business error, but
    /// its body failed midway: its work is done, its response lost. Later
    /// requests with the key are told so (`409
    /// idempotency_response_not_stored`) rather than running the handler a
    /// second time.
    BodyFailed {
        /// The status the handler answered.
        status: StatusCode,
    },
}

/// What a store holds for a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A request holding the key is still running.
    InFlight {
        /// The fingerprint of the running request.
        fingerprint: Fingerprint,
    },
    /// A request holding the key completed.
    Completed {
        /// The fingerprint of the completed request.
        fingerprint: Fingerprint,
        /// How it ended.
        outcome: Completion,
    },
}

impl Entry {
    /// The fingerprint of the request that took the key.
    pub fn fingerprint(&self) -> Fingerprint {
        match self {
            Entry::InFlight { fingerprint } | Entry::Completed { fingerprint, .. } => *fingerprint,
        }
    }
}

/// The answer of [`IdempotencyStore::begin`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key was free: the lease is recorded and the handler may run.
    Started,
    /// The key is taken; the handler must not run.
    Existing(Entry),
}

/// A store could not do its job. The layer answers `503` and never runs
/// the handler unprotected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A bounded store is full of live keys.
    #[error(
        "the idempotency store is full ({capacity} live keys); raise its capacity or shorten the ttl"
    )]
    Full {
        /// The store's capacity.
        capacity: usize,
    },
    /// The value stored under a key cannot be decoded.
    #[error("the idempotency record stored for key `{key}` is corrupt: {reason}")]
    Corrupt {
        /// The key, as the store names it.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The backend (network, server) failed.
    #[error("the idempotency store failed: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Where the idempotency layer keeps keys and responses.
///
/// # Contract
///
/// For one key, a store holds at most one [`Entry`] at a time and goes
/// through: nothing → [`Entry::InFlight`] (`begin`) → [`Entry::Completed`]
/// (`complete`) or nothing (`release`), entries vanishing when their time
/// to live runs out. Each method must be atomic with respect to the
/// others, **across every process sharing the store**: two concurrent
/// `begin`s for a free key must see exactly one [`Claim::Started`]. That
/// is what guarantees that a handler runs once per key.
///
/// - [`begin`](Self::begin): if the key is free (never seen, or expired),
///   record `lease` as in flight for `lock_ttl` and answer
///   [`Claim::Started`]; otherwise answer the entry found, unchanged.
/// - [`complete`](Self::complete): if the key is still in flight under
///   this very `lease`, replace it with the completed `outcome` for `ttl`
///   and answer `true`; otherwise change nothing and answer `false` (the
///   lock expired and the key was freed or taken by another request).
/// - [`renew`](Self::renew): if the key is still in flight under this
///   `lease`, make its lock expire `lock_ttl` from now and answer `true`;
///   otherwise change nothing and answer `false`.
/// - [`release`](Self::release): if the key is still in flight under this
///   `lease`, remove it and answer `true`; otherwise change nothing and
///   answer `false`.
///
/// `lock_ttl` bounds how long a crashed server can block a key: a running
/// request renews its lock every third of it. Stores
/// return [`StoreError`] rather than panicking. The layer bounds every call
/// by its [store timeout](super::IdempotencyConfig::store_timeout) and may
/// drop a call's future midway; it repeats `complete` and `release` for
/// the same lease when a call failed, so both must be safe to repeat (the
/// compare-with-lease rule above makes them so). The key is the client's
/// text scoped to its caller, `<32 hex digits>:<client's key>` (see
/// [`Scope`](super::Scope); the client's key alone when the layer is
/// [unscoped](super::Scope::unscoped)): visible ASCII, up to 288
/// characters. A store namespaces it as it sees fit (the Redis store
/// writes `idem:<key>`).
///
/// [`MemoryStore`](super::MemoryStore) is the reference implementation.
pub trait IdempotencyStore: Send + Sync + 'static {
    /// A short name for the store, for logs and for the layer's `503`
    /// (`the idempotency store `redis` failed on `begin` …`): say which
    /// kind of store, never where it lives (the answer goes to clients).
    ///
    /// The default is the type's name without its module path.
    ///
    /// ```
    /// use resilience::idempotency::server::{IdempotencyStore, MemoryStore};
    ///
    /// assert_eq!(MemoryStore::default().name(), "memory");
    /// ```
    fn name(&self) -> &str {
        short_type_name(std::any::type_name::<Self>())
    }

    /// Takes the key for `lease` if it is free, or reports who holds it.
    fn begin(
        &self,
        key: &IdempotencyKey,
        lease: &KeyLease,
        lock_ttl: Duration,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send;

    /// Records how the request holding `lease` ended, for `ttl`.
    fn complete(
        &self,
        key: &IdempotencyKey,
        lease: &KeyLease,
        outcome: &Completion,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Extends the lock of the key held by `lease` to `lock_ttl` from now,
    /// and says whether `lease` still held it.
    ///
    /// The layer calls it every third of the lock ttl while its request
    /// runs, so that a short lock (a crashed holder blocks its key for at
    /// most one lock ttl) does not expire under a slow handler. `false`
    /// means the lock had already expired or the key was completed: the
    /// store must not take the key back for `lease` then.
    fn renew(
        &self,
        key: &IdempotencyKey,
        lease: &KeyLease,
        lock_ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Frees the key held by `lease`, so that a retry may run the handler.
    fn release(
        &self,
        key: &IdempotencyKey,
        lease: &KeyLease,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// `a::b::Store<c::D>` → `Store<c::D>`: the path before the type's own
/// name goes, its generic arguments stay.
fn short_type_name(full: &'static str) -> &'static str {
    let own = full.find('<').unwrap_or(full.len());
    full[..own].rfind("::").map_or(full, |at| &full[at + 2..])
}

impl<T: IdempotencyStore> IdempotencyStore for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn begin(
        &self,
        key: &IdempotencyKey,
        lease: &KeyLease,
        lock_ttl: Duration,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send {
        (**self).begin(key, lease, lock_ttl)
    }

    fn complete(
        &self,
        key: &IdempotencyKey,
        lease: &KeyLease,
        outcome: &Completion,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).complete(key, lease, outcome, ttl)
    }

    fn renew(
        &self,
        key: &IdempotencyKey,
        lease: &KeyLease,
        lock_ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).renew(key, lease, lock_ttl)
    }

    fn release(
        &self,
        key: &IdempotencyKey,
        lease: &KeyLease,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).release(key, lease)
    }
}

#[cfg(test)]
mod tests {
    use super::short_type_name;

    #[test]
    fn short_type_names_drop_the_module_path() {
        assert_eq!(short_type_name("a::b::Store"), "Store");
        assert_eq!(short_type_name("a::Wrap<b::c::D>"), "Wrap<b::c::D>");
        assert_eq!(short_type_name("Plain"), "Plain");
    }
}
