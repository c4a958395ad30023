//! What the idempotency layer guards and how long it remembers.

use std::time::Duration;

use http::{HeaderName, Method, header};

use resilience_rules::duration::display;

use crate::error::ConfigError;

/// The settings of an [`IdempotencyLayer`](super::IdempotencyLayer),
/// validated by [`IdempotencyConfigBuilder::build`].
///
/// # Default
///
/// | setting | default | why |
/// |---|---|---|
/// | methods | `POST`, `PATCH` | the [non-idempotent](crate::guide#idempotency-first-retry-second) methods; `GET`, `HEAD`, `OPTIONS`, `PUT`, `DELETE` pass through |
/// | ttl | 24 h | how long a response is replayed, as the [guide](crate::guide#idempotency-first-retry-second) says |
/// | lock ttl | 10 s | how long a crashed holder blocks its key; a running request renews its lock every third of it |
/// | store timeout | 1 s | the longest wait on one store call; a store slower than that is down (`503`) |
/// | max request body | 2 MiB | the request is buffered to fingerprint it (axum's own default limit) |
/// | max stored body | 1 MiB | larger responses are delivered but not kept |
/// | stored headers | `content-type`, `content-encoding`, `content-language`, `content-location`, `location`, `etag`, `last-modified` | what a replay needs; never `set-cookie` |
/// | fingerprint headers | none | see [`with_fingerprint_headers`](IdempotencyConfigBuilder::with_fingerprint_headers) |
///
/// ```
/// use std::time::Duration;
/// use http::Method;
/// use resilience::idempotency::server::IdempotencyConfig;
///
/// let config = IdempotencyConfig::builder()
///     .with_methods([Method::POST])
///     .with_ttl(Duration::from_secs(3600))
///     .build()?;
/// assert_eq!(config.ttl(), Duration::from_secs(3600));
///
/// let err = IdempotencyConfig::builder()
///     .with_lock_ttl(Duration::from_secs(90_000))
///     .build()
///     .unwrap_err();
/// assert_eq!(err.field(), "lock_ttl");
/// # Ok::<(), resilience::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct IdempotencyConfig {
    pub(crate) methods: Vec<Method>,
    pub(crate) ttl: Duration,
    pub(crate) lock_ttl: Duration,
    pub(crate) store_timeout: Duration,
    pub(crate) max_request_body: usize,
    pub(crate) max_stored_body: usize,
    pub(crate) stored_headers: Vec<HeaderName>,
    pub(crate) fingerprint_headers: Vec<HeaderName>,
}

/// Builds an [`IdempotencyConfig`]; see its defaults.
#[derive(Debug, Clone)]
#[must_use]
pub struct IdempotencyConfigBuilder {
    config: IdempotencyConfig,
}

/// The longest ttl accepted: a key is a retry window, not an archive.
const MAX_TTL: Duration = Duration::from_secs(365 * 86_400);

/// The longest store timeout accepted: a store slower than that is down.
const MAX_STORE_TIMEOUT: Duration = Duration::from_secs(60);

/// The shortest `ttl`, `lock_ttl` and `store_timeout`: the timer's
/// resolution.
const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// Headers that describe one connection, never a stored response.
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    header::CONTENT_LENGTH,
];

impl IdempotencyConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> IdempotencyConfigBuilder {
        IdempotencyConfigBuilder {
            config: Self::default(),
        }
    }

    /// The methods that must carry an `Idempotency-Key`.
    pub fn methods(&self) -> &[Method] {
        &self.methods
    }

    /// How long a completed response is replayed.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How long an in-flight key stays locked if its request never ends.
    pub fn lock_ttl(&self) -> Duration {
        self.lock_ttl
    }

    /// The longest the layer waits on one call to its store (`begin`,
    /// `complete`, `release`) before it takes the store for down.
    pub fn store_timeout(&self) -> Duration {
        self.store_timeout
    }

    /// The largest request body accepted, in bytes.
    pub fn max_request_body(&self) -> usize {
        self.max_request_body
    }

    /// The largest response body stored, in bytes.
    pub fn max_stored_body(&self) -> usize {
        self.max_stored_body
    }

    /// The response headers kept for replay.
    pub fn stored_headers(&self) -> &[HeaderName] {
        &self.stored_headers
    }

    /// The request headers that are part of a request's fingerprint.
    pub fn fingerprint_headers(&self) -> &[HeaderName] {
        &self.fingerprint_headers
    }

    pub(crate) fn guards(&self, method: &Method) -> bool {
        self.methods.contains(method)
    }
}

impl Default for IdempotencyConfig {
    fn default() -> Self {
        Self {
            methods: vec![Method::POST, Method::PATCH],
            ttl: Duration::from_secs(24 * 3600),
            lock_ttl: Duration::from_secs(10),
            store_timeout: Duration::from_secs(1),
            max_request_body: 2 << 20,
            max_stored_body: 1 << 20,
            stored_headers: vec![
                header::CONTENT_TYPE,
                header::CONTENT_ENCODING,
                header::CONTENT_LANGUAGE,
                header::CONTENT_LOCATION,
                header::LOCATION,
                header::ETAG,
                header::LAST_MODIFIED,
            ],
            fingerprint_headers: Vec::new(),
        }
    }
}

impl IdempotencyConfigBuilder {
    /// The methods that must carry a key; all others pass through untouched.
    pub fn with_methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.config.methods = methods.into_iter().collect();
        self
    }

    /// How long a completed response is replayed (at most 365 days).
    pub const fn with_ttl(mut self, ttl: Duration) -> Self {
        self.config.ttl = ttl;
        self
    }

    /// How long an in-flight key stays locked after its holder stops
    /// renewing it (a crashed process); at most the ttl.
    ///
    /// While a request runs, the layer renews its lock every third of the
    /// lock ttl, so a handler may take longer than the lock ttl and keep
    /// its key, and the lock survives one failed renewal. A request that
    /// ends or is dropped frees or completes its key at once; only a
    /// holder that dies without a word (the process killed, the host
    /// gone) leaves its key locked, for one lock ttl at most, during which
    /// retries with that key get `409`.
    pub const fn with_lock_ttl(mut self, lock_ttl: Duration) -> Self {
        self.config.lock_ttl = lock_ttl;
        self
    }

    /// The longest the layer waits on one store call (between 1 ms and
    /// 60 s, and below a third of the lock ttl, so that a renewal ends
    /// before the next one is due).
    ///
    /// A `begin` that takes longer is answered `503
    /// idempotency_store_unavailable` without running the handler; a
    /// `complete` that takes longer does not hold the handler's response
    /// back: it is delivered, and the layer keeps trying to complete the
    /// key in the background until the lock ttl runs out. Keep it above
    /// the store's own slowest healthy answer (a few milliseconds for a
    /// nearby Redis) and well below the clients' request timeout.
    pub const fn with_store_timeout(mut self, store_timeout: Duration) -> Self {
        self.config.store_timeout = store_timeout;
        self
    }

    /// The largest request body accepted (larger ones get `413`).
    pub const fn with_max_request_body(mut self, bytes: usize) -> Self {
        self.config.max_request_body = bytes;
        self
    }

    /// The largest response body stored (see
    /// [`Completion::TooLarge`](super::Completion::TooLarge)).
    pub const fn with_max_stored_body(mut self, bytes: usize) -> Self {
        self.config.max_stored_body = bytes;
        self
    }

    /// Replaces the set of response headers kept for replay.
    pub fn with_stored_headers(mut self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        self.config.stored_headers = names.into_iter().collect();
        self
    }

    /// Request headers whose values join the method, path and body in a
    /// request's [`Fingerprint`](super::Fingerprint).
    ///
    /// A key presented again with another value in one of these headers
    /// is refused with `422`, as one presented with another body. This is
    /// not what keeps callers apart: keys are already scoped to their
    /// caller by the layer's [`Scope`](super::Scope).
    pub fn with_fingerprint_headers(mut self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        self.config.fingerprint_headers = names.into_iter().collect();
        self
    }

    /// Checks the settings.
    pub fn build(self) -> Result<IdempotencyConfig, ConfigError> {
        let c = self.config;
        let fail = |field: &'static str, value: String, reason: String| {
            Err(ConfigError::new("idempotency layer", field, value, reason))
        };
        if c.methods.is_empty() {
            return fail(
                "methods",
                "[]".into(),
                "list at least one method to guard, e.g. POST".into(),
            );
        }
        if let Some((i, dup)) = c
            .methods
            .iter()
            .enumerate()
            .find(|(i, m)| c.methods[..*i].contains(m))
        {
            return fail(
                "methods",
                format!("{:?}", c.methods),
                format!("`{dup}` is listed twice (position {i})"),
            );
        }
        for (field, ttl) in [("ttl", c.ttl), ("lock_ttl", c.lock_ttl)] {
            if ttl < MIN_TIMEOUT || ttl > MAX_TTL {
                return fail(
                    field,
                    format!("{ttl:?}"),
                    format!(
                        "must be between {} and {} days",
                        display(MIN_TIMEOUT),
                        MAX_TTL.as_secs() / 86_400
                    ),
                );
            }
        }
        if c.lock_ttl > c.ttl {
            return fail(
                "lock_ttl",
                format!("{:?}", c.lock_ttl),
                format!(
                    "must not exceed the ttl ({:?}): a lock outliving its response",
                    c.ttl
                ),
            );
        }
        if c.store_timeout < MIN_TIMEOUT || c.store_timeout > MAX_STORE_TIMEOUT {
            return fail(
                "store_timeout",
                format!("{:?}", c.store_timeout),
                format!(
                    "must be between {} and {}",
                    display(MIN_TIMEOUT),
                    display(MAX_STORE_TIMEOUT)
                ),
            );
        }
        if c.store_timeout >= c.lock_ttl / 3 {
            return fail(
                "store_timeout",
                format!("{:?}", c.store_timeout),
                format!(
                    "must be below a third of the lock ttl ({:?}): the lock is renewed every third of it, and a renewal must end before the next is due",
                    c.lock_ttl
                ),
            );
        }
        for (field, bytes) in [
            ("max_request_body", c.max_request_body),
            ("max_stored_body", c.max_stored_body),
        ] {
            if bytes == 0 {
                return fail(field, "0".into(), "must be at least 1 byte".into());
            }
        }
        if let Some(bad) = c.stored_headers.iter().find(|h| HOP_BY_HOP.contains(h)) {
            return fail(
                "stored_headers",
                bad.to_string(),
                "describes the connection, not the response; the replay sets it itself".into(),
            );
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_the_spec() {
        let config = IdempotencyConfig::builder().build().unwrap();
        assert_eq!(config.methods(), [Method::POST, Method::PATCH]);
        assert_eq!(config.ttl(), Duration::from_secs(86_400));
        assert_eq!(config.store_timeout(), Duration::from_secs(1));
        for safe in [
            Method::GET,
            Method::HEAD,
            Method::OPTIONS,
            Method::PUT,
            Method::DELETE,
        ] {
            assert!(!config.guards(&safe), "{safe}");
        }
    }

    #[test]
    fn bad_settings_name_field_and_value() {
        let cases = [
            (
                IdempotencyConfig::builder().with_methods([]),
                "methods",
                "[]",
            ),
            (
                IdempotencyConfig::builder().with_methods([Method::POST, Method::POST]),
                "methods",
                "[POST, POST]",
            ),
            (
                IdempotencyConfig::builder().with_ttl(Duration::ZERO),
                "ttl",
                "0ns",
            ),
            (
                IdempotencyConfig::builder().with_ttl(MAX_TTL + Duration::from_secs(1)),
                "ttl",
                "31536001s",
            ),
            (
                IdempotencyConfig::builder().with_lock_ttl(Duration::from_secs(86_401)),
                "lock_ttl",
                "86401s",
            ),
            (
                IdempotencyConfig::builder().with_store_timeout(Duration::ZERO),
                "store_timeout",
                "0ns",
            ),
            (
                IdempotencyConfig::builder().with_store_timeout(Duration::from_secs(61)),
                "store_timeout",
                "61s",
            ),
            (
                IdempotencyConfig::builder()
                    .with_lock_ttl(Duration::from_secs(2))
                    .with_store_timeout(Duration::from_secs(2)),
                "store_timeout",
                "2s",
            ),
            (
                IdempotencyConfig::builder().with_max_stored_body(0),
                "max_stored_body",
                "0",
            ),
            (
                IdempotencyConfig::builder().with_max_request_body(0),
                "max_request_body",
                "0",
            ),
            (
                IdempotencyConfig::builder().with_stored_headers([header::TRANSFER_ENCODING]),
                "stored_headers",
                "transfer-encoding",
            ),
        ];
        for (builder, field, value) in cases {
            let err = builder.build().unwrap_err();
            assert_eq!((err.field(), err.value()), (field, value), "{err}");
            assert!(err.to_string().starts_with("invalid idempotency layer"));
        }
    }
}
