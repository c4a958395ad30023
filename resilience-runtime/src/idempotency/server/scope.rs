//! Whose key it is: the caller scope that keeps one client's keys apart from another's.

use std::fmt;
use std::sync::Arc;

use http::HeaderName;
use http::request::Parts;
use sha2::{Digest, Sha256};

use crate::idempotency::IdempotencyKey;

/// Whose `Idempotency-Key` a request carries: the caller the
/// [`IdempotencyLayer`](super::IdempotencyLayer) scopes each key to.
///
/// A key is unique per client (the IETF `Idempotency-Key` draft; Stripe
/// scopes keys per account), not per server. The layer stores a key under
/// its caller's scope, so that a client sending another caller's key, with
/// the same path and body, runs the handler for itself instead of being
/// replayed the other caller's response.
///
/// The scope's value is never stored as it is: the layer keeps the first
/// 128 bits of its SHA-256, in hex, in front of the key
/// (`<32 hex digits>:<key>`), so that a credential used as a scope (an
/// `Authorization` header) never reaches the store or the logs.
///
/// # A request without a scope
///
/// A guarded request whose scope is missing (the header absent or empty,
/// the function answering `None`) gets `400 missing_idempotency_scope`
/// and its handler does not run. It is not passed through: that would run
/// a non-idempotent handler without the layer's protection, and a retry
/// would apply it twice. In practice it means the layer sits outside the
/// authentication that sets the principal (add it after, so that it runs
/// inside), or a client that did not authenticate, which the handler would
/// refuse anyway.
///
/// ```
/// use axum::{Extension, Router, routing::post};
/// use http::header::AUTHORIZATION;
/// use resilience::idempotency::server::{IdempotencyLayer, MemoryStore, Scope};
///
/// // The caller's credential, hashed: each token has keys of its own.
/// let by_token = IdempotencyLayer::new(MemoryStore::default(), Scope::header(AUTHORIZATION));
///
/// // The principal an authentication layer put in the request's extensions.
/// #[derive(Clone)]
/// struct Account(String);
/// let by_account = IdempotencyLayer::new(
///     MemoryStore::default(),
///     Scope::from_fn(|request| request.extensions.get::<Account>().map(|a| a.0.clone())),
/// );
///
/// let app: Router = Router::new()
///     .route("/payments", post(|| async { "paid" }))
///     .layer(by_account)
///     // Layers added later run first: the account is known inside.
///     .layer(Extension(Account("acct_1".into())));
/// # drop((by_token, app));
/// ```
#[derive(Clone)]
pub struct Scope(Kind);

/// What [`Scope::from_fn`] keeps: the application's function, its answer as bytes.
type ScopeFn = Arc<dyn Fn(&Parts) -> Option<Vec<u8>> + Send + Sync>;

#[derive(Clone)]
enum Kind {
    Header(HeaderName),
    Fn(ScopeFn),
    Unscoped,
}

/// Why a guarded request has no scope: said to the client and logged.
#[derive(Debug)]
pub(crate) struct MissingScope(pub(crate) String);

impl Scope {
    /// Keys scoped by the value of the request header `name`, e.g.
    /// `AUTHORIZATION` or an API key header; all its values, if it is
    /// sent more than once.
    ///
    /// Name a header whose value is the same on a request and on its
    /// retries: a bearer token refreshed between two attempts makes the
    /// retry a new caller, whose request runs again. When a token can
    /// change under one caller, scope by the principal it authenticates
    /// with [`from_fn`](Self::from_fn) instead, as for a low-entropy
    /// credential (HTTP Basic's password), whose unsalted hash could be
    /// guessed from the store.
    ///
    /// ```
    /// use http::HeaderName;
    /// use resilience::idempotency::server::{IdempotencyLayer, MemoryStore, Scope};
    ///
    /// let layer = IdempotencyLayer::new(
    ///     MemoryStore::default(),
    ///     Scope::header(HeaderName::from_static("x-api-key")),
    /// );
    /// # drop(layer);
    /// ```
    pub fn header(name: HeaderName) -> Self {
        Self(Kind::Header(name))
    }

    /// Keys scoped by what `scope` answers for a request (its method, URI,
    /// headers and extensions): typically the authenticated principal an
    /// authentication layer put in the extensions, e.g. an account or
    /// tenant id. `None` means the caller is unknown: the request gets
    /// `400 missing_idempotency_scope`.
    ///
    /// ```
    /// use resilience::idempotency::server::{IdempotencyLayer, MemoryStore, Scope};
    ///
    /// #[derive(Clone)]
    /// struct Tenant(u64);
    ///
    /// let layer = IdempotencyLayer::new(
    ///     MemoryStore::default(),
    ///     Scope::from_fn(|request| request.extensions.get::<Tenant>().map(|t| t.0.to_be_bytes())),
    /// );
    /// # drop(layer);
    /// ```
    pub fn from_fn<F, V>(scope: F) -> Self
    where
        F: Fn(&Parts) -> Option<V> + Send + Sync + 'static,
        V: AsRef<[u8]>,
    {
        Self(Kind::Fn(Arc::new(move |parts: &Parts| {
            scope(parts).map(|value| value.as_ref().to_vec())
        })))
    }

    /// No scope: every caller shares one space of keys.
    ///
    /// **Warning**: any client that learns or guesses another caller's key
    /// and sends it with the same method, path and body (and the same
    /// [fingerprint headers](super::IdempotencyConfigBuilder::with_fingerprint_headers))
    /// is replayed that caller's stored response, e.g. their payment
    /// receipt, and a client reusing another caller's key for a different
    /// request gets `422` or `409` instead of its own answer. Use it only
    /// when the layer has a single caller (one trusted service calling
    /// another), or when the keys are themselves unguessable and bound to
    /// the caller by the application.
    ///
    /// ```
    /// use resilience::idempotency::server::{IdempotencyLayer, MemoryStore, Scope};
    ///
    /// // One internal caller: the ledger service.
    /// let layer = IdempotencyLayer::new(MemoryStore::default(), Scope::unscoped());
    /// # drop(layer);
    /// ```
    pub fn unscoped() -> Self {
        Self(Kind::Unscoped)
    }

    /// Whether this is the [`unscoped`](Self::unscoped) opt-out.
    pub fn is_unscoped(&self) -> bool {
        matches!(self.0, Kind::Unscoped)
    }

    /// The key the store keeps for `key` sent by the caller of `request`:
    /// `<32 hex digits of the scope's SHA-256>:<key>`, or `key` itself
    /// when unscoped.
    pub(crate) fn stored_key(
        &self,
        request: &Parts,
        key: &IdempotencyKey,
    ) -> Result<IdempotencyKey, MissingScope> {
        let mut hash = Sha256::new();
        match &self.0 {
            Kind::Unscoped => return Ok(key.clone()),
            Kind::Header(name) => {
                let mut any = false;
                for value in request.headers.get_all(name) {
                    any |= !value.is_empty();
                    // Length prefixes keep ("ab", "c") apart from ("a", "bc").
                    hash.update((value.len() as u64).to_be_bytes());
                    hash.update(value.as_bytes());
                }
                if !any {
                    return Err(MissingScope(format!(
                        "this server scopes Idempotency-Key to its caller, identified by the `{name}` header, which is missing or empty"
                    )));
                }
            }
            Kind::Fn(scope) => match scope(request) {
                Some(value) => hash.update(value),
                None => {
                    return Err(MissingScope(
                        "this server scopes Idempotency-Key to its caller and could not tell who the caller is; authenticate the request".into(),
                    ));
                }
            },
        }
        let digest = hash.finalize();
        let mut text = String::with_capacity(33 + key.as_str().len());
        for byte in &digest[..16] {
            text.push(char::from(HEX[usize::from(byte >> 4)]));
            text.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        text.push(':');
        text.push_str(key.as_str());
        // Visible ASCII throughout, up to 33 + 255 characters: stores take
        // it as the key's text (see the store contract).
        Ok(IdempotencyKey(text.into()))
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::Header(name) => f.debug_tuple("Scope::header").field(name).finish(),
            Kind::Fn(_) => f.write_str("Scope::from_fn(..)"),
            Kind::Unscoped => f.write_str("Scope::unscoped()"),
        }
    }
}

#[cfg(test)]
mod tests {
    use http::Request;
    use http::header::AUTHORIZATION;

    use super::*;

    fn parts(authorization: &[&str]) -> Parts {
        let mut request = Request::post("/payments");
        for value in authorization {
            request = request.header(AUTHORIZATION, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    fn key() -> IdempotencyKey {
        IdempotencyKey::from_string("order-42").unwrap()
    }

    #[test]
    fn a_header_scope_keeps_callers_apart_and_never_stores_the_credential() {
        let scope = Scope::header(AUTHORIZATION);
        let alice = scope.stored_key(&parts(&["Bearer alice"]), &key()).unwrap();
        let bob = scope.stored_key(&parts(&["Bearer bob"]), &key()).unwrap();
        assert_ne!(alice, bob);
        assert_eq!(
            alice,
            scope.stored_key(&parts(&["Bearer alice"]), &key()).unwrap()
        );
        assert!(!alice.as_str().contains("alice"), "{}", alice.as_str());
        assert_eq!(alice.as_str().len(), 33 + "order-42".len());
        assert!(alice.as_str().ends_with(":order-42"));
        assert_ne!(
            scope
                .stored_key(&parts(&["Bearer a", "lice"]), &key())
                .unwrap(),
            scope
                .stored_key(&parts(&["Bearer al", "ice"]), &key())
                .unwrap()
        );
    }

    #[test]
    fn a_missing_or_empty_scope_is_refused_naming_the_header() {
        let scope = Scope::header(AUTHORIZATION);
        for missing in [&[][..], &[""]] {
            let err = scope.stored_key(&parts(missing), &key()).unwrap_err();
            assert!(err.0.contains("`authorization` header"), "{}", err.0);
        }
        let scope = Scope::from_fn(|_| None::<&str>);
        assert!(scope.stored_key(&parts(&[]), &key()).is_err());
    }

    #[test]
    fn unscoped_keeps_the_key_as_sent() {
        let scope = Scope::unscoped();
        assert!(scope.is_unscoped());
        assert_eq!(scope.stored_key(&parts(&[]), &key()).unwrap(), key());
    }

    #[test]
    fn a_fn_scope_hashes_its_answer() {
        let scope = Scope::from_fn(|parts| parts.headers.get("x-tenant").cloned());
        let of = |tenant: &'static str| {
            let mut request = parts(&[]);
            request.headers.insert("x-tenant", tenant.parse().unwrap());
            scope.stored_key(&request, &key()).unwrap()
        };
        assert_eq!(of("t1"), of("t1"));
        assert_ne!(of("t1"), of("t2"));
        assert!(of("t1").as_str().ends_with(":order-42"));
        assert!(!of("t1").as_str().contains("t1"));
    }
}
