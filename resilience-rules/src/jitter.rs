//! The jitter vocabulary, the same in `#[retry(jitter = …)]` and in a
//! config file's `jitter = …`:
//!
//! | value | meaning |
//! |---|---|
//! | `0.3` | the amount of the site's own kind: ±30 % for a proportional jitter (the default), up to +30 % for an additive one (`db_tx`) |
//! | `"symmetric"`, `"symmetric 0.3"` | `delay · (1 ± 0.3)`; 0.25 when no amount is written |
//! | `"additive"`, `"additive 0.3"` | `delay · (1 + [0, 0.3])`, only ever longer; 0.25 when no amount is written |
//! | `"full"` | uniform in `[0, delay]` (AWS "full jitter") |
//! | `"decorrelated"` | `min(max_interval, uniform(initial, previous · 3))` (AWS "decorrelated jitter") |
//!
//! An amount is between [`MIN_JITTER`] and [`MAX_JITTER`]; a jitter of
//! none (`0`, `"none"`) is refused. A bare number never changes a site's
//! kind, and has nothing to set on `"full"` or `"decorrelated"`.
//!
//! ```
//! use resilience_rules::jitter::{self, Kind, JitterError};
//!
//! assert_eq!(jitter::parse("full"), Ok((Kind::Full, None)));
//! assert_eq!(jitter::parse("additive 0.3"), Ok((Kind::Additive, Some(0.3))));
//! assert_eq!(jitter::parse("ful"), Err(JitterError::Unknown { near: Some("full") }));
//! assert_eq!(jitter::check_amount(0.05), Err(JitterError::BelowMin));
//! assert_eq!(jitter::amount_of(Kind::Additive, 0.3), Ok((Kind::Additive, Some(0.3))));
//! assert_eq!(jitter::amount_of(Kind::Full, 0.3), Err(JitterError::NoAmount(Kind::Full)));
//! ```

use crate::limits::{MAX_JITTER, MIN_JITTER};
use crate::suggest::did_you_mean;

/// The amount of a proportional or additive jitter written without one.
pub const DEFAULT_AMOUNT: f64 = 0.25;

/// The kinds of jitter, by the names both the attribute and the file use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `delay · (1 ± amount)`.
    Symmetric,
    /// `delay · (1 + [0, amount])`.
    Additive,
    /// Uniform in `[0, delay]`.
    Full,
    /// `min(max_interval, uniform(initial, previous · 3))`.
    Decorrelated,
}

impl Kind {
    /// Every kind, by its name.
    pub const ALL: &[(&str, Kind)] = &[
        ("symmetric", Kind::Symmetric),
        ("additive", Kind::Additive),
        ("full", Kind::Full),
        ("decorrelated", Kind::Decorrelated),
    ];

    /// The kind's name, as written in the attribute and the file.
    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, kind)| *kind == self)
            .map_or("?", |(name, _)| name)
    }

    /// Whether the kind takes an amount (`"symmetric 0.3"`).
    pub fn has_amount(self) -> bool {
        matches!(self, Kind::Symmetric | Kind::Additive)
    }
}

/// What is wrong with a jitter value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum JitterError {
    /// An amount below [`MIN_JITTER`].
    BelowMin,
    /// An amount above [`MAX_JITTER`], or not a finite number.
    AboveMax,
    /// `"none"`, `"off"`, `"0"`: retry without jitter.
    Disabled,
    /// A name that is no kind, with the nearest one.
    Unknown {
        /// The kind it is a near miss of.
        near: Option<&'static str>,
    },
    /// An amount given to a kind that has none (`"full 0.3"`, or a bare
    /// number over a `"full"` site).
    NoAmount(Kind),
    /// `"symmetric x"`: the amount is not a number.
    NotANumber,
}

/// Checks an amount: between [`MIN_JITTER`] and [`MAX_JITTER`].
pub fn check_amount(amount: f64) -> Result<(), JitterError> {
    if amount.is_nan() || amount > MAX_JITTER {
        Err(JitterError::AboveMax)
    } else if amount < MIN_JITTER {
        Err(JitterError::BelowMin)
    } else {
        Ok(())
    }
}

/// Reads a jitter written as a string: a kind, then for `symmetric` and
/// `additive` an optional amount (checked), separated by a space.
pub fn parse(text: &str) -> Result<(Kind, Option<f64>), JitterError> {
    let mut words = text.split_whitespace();
    let name = words.next().unwrap_or("");
    let amount = words.next();
    if words.next().is_some() {
        return Err(JitterError::Unknown { near: None });
    }
    let lower = name.to_ascii_lowercase();
    if ["none", "off", "no", "false", "0", "0.0"].contains(&lower.as_str()) {
        return Err(JitterError::Disabled);
    }
    let Some(&(_, kind)) = Kind::ALL.iter().find(|(n, _)| *n == lower) else {
        return Err(JitterError::Unknown {
            near: did_you_mean(name, Kind::ALL.iter().map(|(n, _)| *n)),
        });
    };
    match amount {
        None => Ok((kind, None)),
        Some(_) if !kind.has_amount() => Err(JitterError::NoAmount(kind)),
        Some(amount) => {
            let amount: f64 = amount.parse().map_err(|_| JitterError::NotANumber)?;
            check_amount(amount)?;
            Ok((kind, Some(amount)))
        }
    }
}

/// A bare number over a site whose jitter is `kind`: the same kind with
/// that amount (checked); an error for a kind without one.
pub fn amount_of(kind: Kind, amount: f64) -> Result<(Kind, Option<f64>), JitterError> {
    if !kind.has_amount() {
        return Err(JitterError::NoAmount(kind));
    }
    check_amount(amount)?;
    Ok((kind, Some(amount)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling() {
        assert_eq!(parse("symmetric"), Ok((Kind::Symmetric, None)));
        assert_eq!(parse("Symmetric 0.5"), Ok((Kind::Symmetric, Some(0.5))));
        assert_eq!(parse("decorrelated"), Ok((Kind::Decorrelated, None)));
        assert_eq!(parse("none"), Err(JitterError::Disabled));
        assert_eq!(parse("additive 0.01"), Err(JitterError::BelowMin));
        assert_eq!(parse("additive 2"), Err(JitterError::AboveMax));
        assert_eq!(parse("additive lots"), Err(JitterError::NotANumber));
        assert_eq!(parse("full 0.3"), Err(JitterError::NoAmount(Kind::Full)));
        assert_eq!(parse(""), Err(JitterError::Unknown { near: None }));
        assert_eq!(check_amount(f64::NAN), Err(JitterError::AboveMax));
        for (name, kind) in Kind::ALL {
            assert_eq!(kind.as_str(), *name);
        }
    }
}
