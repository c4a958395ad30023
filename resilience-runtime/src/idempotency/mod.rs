//! Idempotency keys: the one thing that makes a retried POST safe.
//!
//! A POST retried after a timeout may run twice on the server: the first
//! attempt may have succeeded after all. The fix is a key sent in the
//! `Idempotency-Key` header, the same on every attempt of one logical
//! call, so that the server can store the first response and replay it
//! (the guide's
//! [idempotency first, retry second](crate::guide#idempotency-first-retry-second)).
//!
//! This module holds the client's side, [`IdempotencyKey`]; with the
//! `idempotency-server` feature, the `server` module holds the server's side, a
//! tower layer that stores and replays responses.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use rand::RngCore;

use crate::error::ConfigError;

pub(crate) mod records;
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
///
/// # Storing a key
///
/// With the `serde` feature, a key is `Serialize` and `Deserialize` as its
/// text, so it can travel with an outbox row or a queued job and be sent
/// again later, by another process, as the same key. Reading one back
/// checks it as [`from_string`](Self::from_string) does: a stored key that
/// is not one is an error naming the value, never a panic.
///
#[cfg_attr(feature = "serde", doc = "```")]
#[cfg_attr(not(feature = "serde"), doc = "```ignore")]
/// use resilience::IdempotencyKey;
///
/// let key = IdempotencyKey::from_string("order-42-payment")?;
/// let row = serde_json::to_string(&key)?;
/// assert_eq!(row, r#""order-42-payment""#);
/// assert_eq!(serde_json::from_str::<IdempotencyKey>(&row)?, key);
///
/// let err = serde_json::from_str::<IdempotencyKey>(r#""two words""#).unwrap_err();
/// assert!(err.to_string().contains(r#""two words""#), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(Arc<str>);

impl IdempotencyKey {
    /// A fresh random key: 128 bits (122 random, as a version-4 UUID) from
    /// the operating system's generator, so that no one can guess another
    /// caller's key.
    pub fn new() -> Self {
        use rand::TryRngCore;
        let mut bytes = [0u8; 16];
        if rand::rngs::OsRng.try_fill_bytes(&mut bytes).is_err() {
            // Never seen on a supported platform: the thread's generator,
            // itself seeded from the OS when it could be.
            crate::retry::thread_rng(|rng| rng.fill_bytes(&mut bytes));
        }
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

    /// The key itself, without the quotes it travels in.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The header's value: the key as a Structured Field String (RFC 8941
    /// §3.3.3), in double quotes, as the IETF draft defines the field
    /// (`Idempotency-Key = sf-string`); a `"` or `\` in the key is escaped.
    ///
    /// ```
    /// use resilience::IdempotencyKey;
    ///
    /// let key = IdempotencyKey::from_string("8e03978e-40d5-43e8-bc93-6894a57f9324")?;
    /// assert_eq!(key.header_value(), r#""8e03978e-40d5-43e8-bc93-6894a57f9324""#);
    /// assert_eq!(IdempotencyKey::from_string(r#"a"b\c"#)?.header_value(), r#""a\"b\\c""#);
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn header_value(&self) -> String {
        let mut value = String::with_capacity(self.0.len() + 2);
        value.push('"');
        for c in self.0.chars() {
            if matches!(c, '"' | '\\') {
                value.push('\\');
            }
            value.push(c);
        }
        value.push('"');
        value
    }

    /// The `(name, value)` pair of the header, for any HTTP client:
    /// `request.header(name, value)`; the value is
    /// [`header_value`](Self::header_value), the quoted form.
    pub fn header(&self) -> (&'static str, String) {
        (IDEMPOTENCY_KEY_HEADER, self.header_value())
    }

    /// The key a request's `Idempotency-Key` header carries: the draft's
    /// form, a Structured Field String (`"…"`, with `\"` and `\\` escaped),
    /// or, as clients wrote it before the draft, the bare key. Both give
    /// the same key, so `"k-1"` and `k-1` are one key. The key inside must
    /// then be what [`from_string`](Self::from_string) accepts (this
    /// server's published format: 1 to 255 visible ASCII characters).
    ///
    /// ```
    /// use resilience::IdempotencyKey;
    ///
    /// let quoted = IdempotencyKey::from_header(r#""8e03978e-40d5-43e8-bc93-6894a57f9324""#)?;
    /// let bare = IdempotencyKey::from_header("8e03978e-40d5-43e8-bc93-6894a57f9324")?;
    /// assert_eq!(quoted, bare);
    /// assert_eq!(quoted.as_str(), "8e03978e-40d5-43e8-bc93-6894a57f9324");
    /// let err = IdempotencyKey::from_header(r#""unterminated"#).unwrap_err();
    /// assert!(err.to_string().contains("closing"), "{err}");
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn from_header(value: &str) -> Result<Self, ConfigError> {
        let Some(quoted) = value.strip_prefix('"') else {
            return Self::from_string(value);
        };
        let invalid = |reason: &str| {
            ConfigError::new(
                "idempotency key",
                "Idempotency-Key",
                shown(value),
                format!(
                    "{reason}; the value is a Structured Field String (RFC 8941 §3.3.3): the key in double quotes, `\\\"` and `\\\\` escaped"
                ),
            )
        };
        let mut key = String::with_capacity(quoted.len());
        let mut chars = quoted.chars();
        loop {
            match chars.next() {
                None => return Err(invalid("the closing `\"` is missing")),
                Some('"') => break,
                Some('\\') => match chars.next() {
                    Some(c @ ('"' | '\\')) => key.push(c),
                    Some(c) => {
                        return Err(invalid(&format!(
                            "`\\{c}` is not an escape; only `\\\"` and `\\\\` are"
                        )));
                    }
                    None => return Err(invalid("the closing `\"` is missing")),
                },
                Some(c) => key.push(c),
            }
        }
        let rest = chars.as_str();
        if !rest.is_empty() {
            return Err(invalid(&format!(
                "{} follows the closing `\"`; the value is one string",
                shown(rest)
            )));
        }
        Self::from_string(key)
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

/// The key as its text (the `serde` feature).
#[cfg(feature = "serde")]
impl serde::Serialize for IdempotencyKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The key from its text, checked as [`IdempotencyKey::from_string`]
/// checks it (the `serde` feature).
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for IdempotencyKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Key;

        impl serde::de::Visitor<'_> for Key {
            type Value = IdempotencyKey;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "an idempotency key: a string of 1 to {MAX_KEY_LEN} visible ASCII characters"
                )
            }

            fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<IdempotencyKey, E> {
                IdempotencyKey::from_string(key).map_err(E::custom)
            }
        }

        deserializer.deserialize_str(Key)
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
            ("Idempotency-Key", "\"k-1\"".to_owned())
        );
    }

    #[test]
    fn the_header_value_is_a_structured_field_string_and_reads_back() {
        for key in ["k-1", "a\"b", "back\\slash", "\"", "\\"] {
            let key = IdempotencyKey::from_string(key).unwrap();
            let value = key.header_value();
            assert!(value.starts_with('"') && value.ends_with('"'), "{value}");
            assert_eq!(IdempotencyKey::from_header(&value).unwrap(), key, "{value}");
        }
        for bad in [
            "\"",
            "\"abc",
            "\"a\\x\"",
            "\"a\"b",
            "\"a\";p=1",
            "\"two words\"",
            "\"\"",
        ] {
            let err = IdempotencyKey::from_header(bad).unwrap_err();
            assert!(err.value().contains("\""), "{bad:?}: {err}");
        }
    }

    #[cfg(feature = "serde")]
    #[test]
    fn a_key_round_trips_through_serde_as_its_text() {
        for key in [
            IdempotencyKey::new(),
            IdempotencyKey::from_string("order-42-payment").unwrap(),
            IdempotencyKey::from_string(r#"a"b\c"#).unwrap(),
            IdempotencyKey::from_string("x".repeat(MAX_KEY_LEN)).unwrap(),
        ] {
            let text = serde_json::to_string(&key).unwrap();
            assert_eq!(text, serde_json::to_string(key.as_str()).unwrap());
            assert_eq!(serde_json::from_str::<IdempotencyKey>(&text).unwrap(), key);
        }
        // Inside a stored row, as an outbox keeps it.
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct Job {
            key: IdempotencyKey,
            cents: u64,
        }
        let job = Job {
            key: IdempotencyKey::new(),
            cents: 4200,
        };
        let row = serde_json::to_string(&job).unwrap();
        assert_eq!(serde_json::from_str::<Job>(&row).unwrap(), job);
    }

    #[cfg(feature = "serde")]
    #[test]
    fn a_stored_key_that_is_not_one_is_refused_with_its_value() {
        for (bad, shown) in [
            (r#""""#, r#""""#),
            (r#""two words""#, r#""two words""#),
            (r#""été""#, r#""été""#),
        ] {
            let err = serde_json::from_str::<IdempotencyKey>(bad).unwrap_err();
            let text = err.to_string();
            assert!(text.contains("idempotency key"), "{bad}: {text}");
            assert!(text.contains(shown), "{bad}: {text}");
        }
        let long = serde_json::to_string(&"x".repeat(MAX_KEY_LEN + 1)).unwrap();
        let err = serde_json::from_str::<IdempotencyKey>(&long).unwrap_err();
        assert!(err.to_string().contains("256 bytes"), "{err}");
        // Not a string at all: serde's own error, saying what was expected.
        let err = serde_json::from_str::<IdempotencyKey>("42").unwrap_err();
        assert!(err.to_string().contains("an idempotency key"), "{err}");
    }
}
