//! Idempotency keys: the one thing that makes a retried POST safe.
//!
//! A POST retried after a timeout may run twice on the server: the first
//! attempt may have succeeded after all. The fix (the guide's rules on [idempotency](crate::guide#idempotency-first-retry-second)) is a key sent in
//! the `Idempotency-Key` header, the same on every attempt of one logical
//! call, so that the server can store the first response and replay it.
//!
//! This module holds the client's side, [`IdempotencyKey`]; with the
//! `idempotency-server` feature, the `server` module holds the server's side, a
//! tower layer that stores and replays responses.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use rand::RngCore;

use crate::error::ConfigError;

#[cfg(feature = "idempotency-server")]
pub mod server;

/// The header that carries an [`IdempotencyKey`].
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

/// The header a server sets on a replayed response.
pub const IDEMPOTENCY_REPLAY_HEADER: &str = "X-Idempotency-Replay";

/// The longest key accepted from a caller.
pub const MAX_KEY_LEN: usize = 255;

/// A key that identifies one logical call across all of its attempts.
///
/// Cloning is cheap (a reference count), so a retried fn can take it by
/// value: every attempt sees the same key.
///
/// ```
/// use resilience::IdempotencyKey;
///
/// let key = IdempotencyKey::new();
/// assert_eq!(key.as_str().len(), 36);          // 128 random bits, UUID v4 text
/// assert_eq!(key.clone(), key);                // same key on every attempt
///
/// let order = IdempotencyKey::from_string("order-42-payment")?;
/// assert_eq!(order.as_str(), "order-42-payment");
/// assert!(IdempotencyKey::from_string("two words").is_err());
/// # Ok::<(), resilience::ConfigError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(Arc<str>);

impl IdempotencyKey {
    /// A fresh random key: 128 bits (122 random, as a version-4 UUID) from
    /// the thread's cryptographically secure generator.
    pub fn new() -> Self {
        let mut bytes = [0u8; 16];
        rand::rng().fill_bytes(&mut bytes);
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        let mut text = String::with_capacity(36);
        for (i, byte) in bytes.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                text.push('-');
            }
            text.push(char::from(HEX[usize::from(byte >> 4)]));
            text.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        Self(text.into())
    }

    /// A key chosen by the caller, e.g. derived from an order id so that
    /// even a restarted client sends the same key. It must be 1 to 255
    /// visible ASCII characters, since it travels in an HTTP header.
    pub fn from_string(key: impl AsRef<str>) -> Result<Self, ConfigError> {
        let key = key.as_ref();
        if key.is_empty() {
            return Err(ConfigError::new(
                "idempotency key",
                "key",
                "\"\"",
                format!("a key has 1 to {MAX_KEY_LEN} visible ASCII characters"),
            ));
        }
        // The characters first: a non-ASCII key is refused for what it is,
        // not as "too long" because its UTF-8 bytes outnumber its characters.
        if let Some(bad) = key.chars().find(|c| !c.is_ascii_graphic()) {
            return Err(ConfigError::new(
                "idempotency key",
                "key",
                shown(key),
                format!(
                    "{bad:?} cannot travel in an HTTP header; use visible ASCII only (no spaces)"
                ),
            ));
        }
        if key.len() > MAX_KEY_LEN {
            return Err(ConfigError::new(
                "idempotency key",
                "key",
                shown(key),
                format!(
                    "the key is {} bytes long; a key has 1 to {MAX_KEY_LEN} visible ASCII characters (one byte each)",
                    key.len()
                ),
            ));
        }
        Ok(Self(key.into()))
    }

    /// The key as sent in the header.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The `(name, value)` pair of the header, for any HTTP client:
    /// `request.header(name, value)`.
    pub fn header(&self) -> (&'static str, &str) {
        (IDEMPOTENCY_KEY_HEADER, self.as_str())
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The most of a refused key that an error repeats: a 10 KB header is not
/// echoed back in full (into a 400 body or a log line).
pub(crate) const SHOWN_KEY_CHARS: usize = 64;

/// `key` quoted for an error message, cut to [`SHOWN_KEY_CHARS`] characters
/// with its full length in bytes when longer.
pub(crate) fn shown(key: &str) -> String {
    match key.char_indices().nth(SHOWN_KEY_CHARS) {
        None => format!("{key:?}"),
        Some((end, _)) => format!("{:?}… ({} bytes)", &key[..end], key.len()),
    }
}

impl Default for IdempotencyKey {
    fn default() -> Self {
        Self::new()
    }
}

impl FromStr for IdempotencyKey {
    type Err = ConfigError;

    fn from_str(key: &str) -> Result<Self, ConfigError> {
        Self::from_string(key)
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("IdempotencyKey").field(&&*self.0).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_keys_are_uuid_v4_and_distinct() {
        let keys: Vec<_> = (0..1000).map(|_| IdempotencyKey::new()).collect();
        for key in &keys {
            let s = key.as_str();
            assert_eq!(s.len(), 36);
            assert_eq!(&s[14..15], "4", "{s}");
            assert!(matches!(&s[19..20], "8" | "9" | "a" | "b"), "{s}");
            assert!(s.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
        }
        let unique: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(unique.len(), keys.len());
    }

    #[test]
    fn caller_keys_are_checked() {
        assert!(IdempotencyKey::from_string("a").is_ok());
        assert!(IdempotencyKey::from_string("x".repeat(255)).is_ok());
        for bad in ["", "has space", "tab\t", "line\n", "é", &"x".repeat(256)] {
            let err = IdempotencyKey::from_string(bad).unwrap_err();
            assert_eq!(err.field(), "key", "{bad:?}");
        }
        // Found by fuzzing: 200 "é" are 200 characters but 400 bytes, and
        // were refused as "too long"; they are refused as not ASCII.
        let err = IdempotencyKey::from_string("é".repeat(200)).unwrap_err();
        assert!(err.to_string().contains("visible ASCII only"), "{err}");
        let err = IdempotencyKey::from_string("x".repeat(300)).unwrap_err();
        assert!(err.to_string().contains("300 bytes"), "{err}");
        assert!(err.value().len() < 100, "{}", err.value());
        let err = "two words".parse::<IdempotencyKey>().unwrap_err();
        assert!(err.to_string().contains("\"two words\""), "{err}");
        assert_eq!(
            IdempotencyKey::from_string("k-1").unwrap().header(),
            ("Idempotency-Key", "k-1")
        );
    }
}
