//! How long to pause between attempts.

use std::time::Duration;

use rand::{Rng, RngCore};
use resilience_rules::limits::{MAX_JITTER, MAX_MULTIPLIER};
use resilience_rules::presets::{self, PresetJitter, RetryPreset};

use crate::clock::duration_nanos;
use crate::error::ConfigError;

/// The smallest jitter factor accepted: below 10 % clients that failed
/// together retry together (the guide's [retry](crate::guide#retry) table
/// and its [mistake 2](crate::guide#mistakes-the-library-refuses)).
pub const MIN_JITTER: f64 = resilience_rules::limits::MIN_JITTER;

/// How a pause is randomized.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Jitter {
    /// `delay · (1 ± factor)`, uniform: the [guide's](crate::guide#retry) formula. The default is
    /// `Symmetric(0.25)`, i.e. ±25 %.
    Symmetric(f64),
    /// `delay · (1 + [0, factor])`: only ever longer, as in the `db_tx`
    /// preset (`10 ms · attempt²` plus up to 25 %).
    Additive(f64),
    /// AWS "full jitter": uniform in `[0, delay]`. The least contention,
    /// at the price of sometimes retrying almost at once.
    Full,
    /// AWS "decorrelated jitter": `min(max_interval, uniform(initial,
    /// previous · 3))`. Grows by itself: a multiplier other than the
    /// default is refused by [`Backoff::validate`].
    Decorrelated,
}

/// How the un-randomized pause grows with the attempt number.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Growth {
    /// `initial · multiplier^n`.
    Exponential,
    /// `initial · (n + 1)²`, the `db_tx` preset's `10 ms · attempt²`.
    Quadratic,
}

/// The pause schedule: `delay(n) = min(max_interval, initial ·
/// multiplier^n)`, then randomized by [`Jitter`], the guide's
/// [formula](crate::guide#retry).
///
/// # Default
///
/// The [guide's](crate::guide#retry) HTTP defaults: `initial` 100 ms, `multiplier` 2.0,
/// `max_interval` 2 s, jitter ±25 % — pauses of about 100, 200, 400 ms.
///
/// # Example
///
/// ```
/// use resilience::retry::{Backoff, Jitter};
/// use rand::{SeedableRng, rngs::SmallRng};
/// use std::time::Duration;
///
/// let backoff = Backoff::new()
///     .with_initial(Duration::from_millis(50))
///     .with_max_interval(Duration::from_secs(1))
///     .with_jitter(Jitter::Full);
/// backoff.validate()?;
///
/// let pauses: Vec<Duration> = backoff.delays(SmallRng::seed_from_u64(7)).take(6).collect();
/// assert!(pauses.iter().all(|p| *p <= Duration::from_secs(1)));
/// # Ok::<(), resilience::ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq)]
pub struct Backoff {
    // Durations as nanoseconds: a `Duration` is 16 bytes, and every retry
    // chain carries its policy by value, so a smaller one is cheaper to
    // build and to move on the success path.
    initial: u64,
    multiplier: f64,
    max_interval: u64,
    growth: Growth,
    jitter: Jitter,
}

/// The durations as the config file writes them (`100ms`), not as the
/// nanoseconds kept.
impl std::fmt::Debug for Backoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backoff")
            .field("initial", &crate::clock::ShowNanos(self.initial))
            .field("multiplier", &self.multiplier)
            .field("max_interval", &crate::clock::ShowNanos(self.max_interval))
            .field("growth", &self.growth)
            .field("jitter", &self.jitter)
            .finish()
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Backoff {
    /// The [guide's](crate::guide#retry) HTTP schedule (see [# Default](Self#default)).
    pub const fn new() -> Self {
        Self::of(&presets::HTTP)
    }

    /// A preset's schedule: the one place its values become a `Backoff`.
    pub(crate) const fn of(preset: &RetryPreset) -> Self {
        Self {
            initial: duration_nanos(preset.initial),
            multiplier: preset.multiplier,
            max_interval: duration_nanos(preset.max_interval),
            growth: match preset.growth {
                presets::Growth::Exponential => Growth::Exponential,
                presets::Growth::Quadratic => Growth::Quadratic,
            },
            jitter: match preset.jitter {
                PresetJitter::Symmetric(amount) => Jitter::Symmetric(amount),
                PresetJitter::Additive(amount) => Jitter::Additive(amount),
            },
        }
    }

    /// The background-consumer schedule: 500 ms, ×2, capped at 30 s, ±25 %.
    pub const fn background() -> Self {
        Self::of(&presets::BACKGROUND)
    }

    /// The database-transaction schedule: `10 ms · attempt²` plus up to
    /// 25 % (10, 40, 90 ms …), capped at 1 s.
    pub const fn db_tx() -> Self {
        Self::of(&presets::DB_TX)
    }

    /// The first pause, before randomization.
    pub const fn with_initial(mut self, initial: Duration) -> Self {
        self.initial = duration_nanos(initial);
        self
    }

    /// The growth factor of [`Growth::Exponential`]; at least 1. With
    /// [`Growth::Quadratic`] or [`Jitter::Decorrelated`], which do not use
    /// it, [`validate`](Self::validate) refuses any but the default 2.0.
    pub const fn with_multiplier(mut self, multiplier: f64) -> Self {
        self.multiplier = multiplier;
        self
    }

    /// The cap on one pause, before randomization.
    pub const fn with_max_interval(mut self, max_interval: Duration) -> Self {
        self.max_interval = duration_nanos(max_interval);
        self
    }

    /// How the pause grows.
    pub const fn with_growth(mut self, growth: Growth) -> Self {
        self.growth = growth;
        self
    }

    /// How the pause is randomized; see [`Jitter`].
    pub const fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The first pause, before randomization.
    pub const fn initial(&self) -> Duration {
        Duration::from_nanos(self.initial)
    }

    /// The growth factor.
    pub const fn multiplier(&self) -> f64 {
        self.multiplier
    }

    /// The cap on one pause, before randomization.
    pub const fn max_interval(&self) -> Duration {
        Duration::from_nanos(self.max_interval)
    }

    /// How the pause grows.
    pub const fn growth(&self) -> Growth {
        self.growth
    }

    /// How the pause is randomized.
    pub const fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// The longest pause this schedule can produce.
    pub fn max_pause(&self) -> Duration {
        match self.jitter {
            Jitter::Symmetric(f) | Jitter::Additive(f) => self.max_interval().mul_f64(1.0 + f),
            Jitter::Full | Jitter::Decorrelated => self.max_interval(),
        }
    }

    /// Checks the rules on [retry](crate::guide#retry): a non-zero `initial` no larger than
    /// `max_interval`, a finite `multiplier` of at least 1 (and none other
    /// than the default where the schedule does not use it: quadratic
    /// growth, decorrelated jitter), and a jitter factor in `[0.1, 1]`.
    ///
    /// ```
    /// use resilience::retry::{Backoff, Jitter};
    ///
    /// let decorrelated = Backoff::new().with_jitter(Jitter::Decorrelated);
    /// assert!(decorrelated.validate().is_ok());
    /// let err = decorrelated.with_multiplier(3.0).validate().unwrap_err();
    /// assert!(err.to_string().contains("multiplier"), "{err}");
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        const WHAT: &str = "backoff";
        if self.initial == 0 {
            return Err(ConfigError::new(
                WHAT,
                "initial",
                "0s",
                "a zero first pause retries at once and hammers the dependency; use at least \"1ms\"",
            ));
        }
        if self.initial > self.max_interval {
            return Err(ConfigError::new(
                WHAT,
                "initial",
                format!("{:?}", self.initial()),
                format!(
                    "the first pause is longer than `max_interval = {:?}`; lower `initial` or raise `max_interval`",
                    self.max_interval()
                ),
            ));
        }
        if !self.multiplier.is_finite() || self.multiplier < 1.0 {
            return Err(ConfigError::new(
                WHAT,
                "multiplier",
                self.multiplier,
                "pauses must not shrink: use a finite multiplier of at least 1.0 (2.0 is the default)",
            ));
        }
        if self.multiplier > MAX_MULTIPLIER {
            return Err(ConfigError::new(
                WHAT,
                "multiplier",
                self.multiplier,
                format!(
                    "the limit is {MAX_MULTIPLIER}: a larger multiplier jumps from `initial` to the cap in a step or two, a fixed wait rather than a backoff (2.0 is the default)"
                ),
            ));
        }
        // A multiplier other than the default where nothing reads it is a
        // setting the user believes in and the schedule ignores.
        if self.multiplier != Backoff::new().multiplier {
            let ignored_by = match (self.growth, self.jitter) {
                (Growth::Quadratic, _) => Some(
                    "pauses that grow as `initial · (n + 1)²` (the `db_tx` schedule); remove it, or use `Growth::Exponential`",
                ),
                (_, Jitter::Decorrelated) => Some(
                    "decorrelated jitter, whose pauses grow by themselves, each up to three times the previous one; remove it, or use another jitter",
                ),
                (Growth::Exponential, _) => None,
            };
            if let Some(ignored_by) = ignored_by {
                return Err(ConfigError::new(
                    WHAT,
                    "multiplier",
                    self.multiplier,
                    format!("the multiplier has no effect with {ignored_by}"),
                ));
            }
        }
        if let Jitter::Symmetric(f) | Jitter::Additive(f) = self.jitter
            && !(MIN_JITTER..=MAX_JITTER).contains(&f)
        {
            return Err(ConfigError::new(
                WHAT,
                "jitter",
                f,
                format!(
                    "jitter must be between {MIN_JITTER:?} and {MAX_JITTER:?}: below 10 % clients that failed together retry together (thundering herd); 0.25 is the default"
                ),
            ));
        }
        Ok(())
    }

    /// The pause after the `retry`-th failure (0-based), given the previous
    /// pause (only [`Jitter::Decorrelated`] uses it).
    pub fn delay<R: RngCore + ?Sized>(
        &self,
        retry: u32,
        previous: Duration,
        rng: &mut R,
    ) -> Duration {
        let cap = self.max_interval().as_secs_f64();
        let initial = self.initial().as_secs_f64();
        let base = || {
            let base = match self.growth {
                Growth::Exponential => {
                    initial
                        * self
                            .multiplier
                            .powi(i32::try_from(retry).unwrap_or(i32::MAX))
                }
                Growth::Quadratic => initial * f64::from(retry.saturating_add(1)).powi(2),
            };
            // powi overflows to +inf (or NaN for a bad multiplier): both mean "capped".
            if base.is_finite() { base.min(cap) } else { cap }
        };
        let secs = match self.jitter {
            Jitter::Symmetric(f) => base() * (1.0 + uniform(rng, -f, f)),
            Jitter::Additive(f) => base() * (1.0 + uniform(rng, 0.0, f)),
            Jitter::Full => uniform(rng, 0.0, base()),
            Jitter::Decorrelated => {
                let low = initial.min(cap);
                let high = (previous.as_secs_f64().max(initial) * 3.0).min(cap);
                uniform(rng, low, high)
            }
        };
        secs_to_duration(secs)
    }

    /// The endless sequence of randomized pauses; a [`Policy`](super::Policy)
    /// decides how many of them are used.
    pub fn delays<R: RngCore>(self, rng: R) -> Delays<R> {
        Delays {
            backoff: self,
            retry: 0,
            previous: Duration::ZERO,
            rng,
        }
    }
}

// `random_range` panics on an empty or non-finite range; an unvalidated
// backoff must degrade to "no jitter", not abort the caller.
fn uniform<R: RngCore + ?Sized>(rng: &mut R, low: f64, high: f64) -> f64 {
    if low.is_finite() && high.is_finite() && high > low {
        rng.random_range(low..=high)
    } else {
        low
    }
}

fn secs_to_duration(secs: f64) -> Duration {
    Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(Duration::MAX)
}

/// The randomized pauses of a [`Backoff`], as an iterator.
#[derive(Debug, Clone)]
pub struct Delays<R> {
    backoff: Backoff,
    retry: u32,
    previous: Duration,
    rng: R,
}

impl<R: RngCore> Iterator for Delays<R> {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.backoff.delay(self.retry, self.previous, &mut self.rng);
        self.retry = self.retry.saturating_add(1);
        self.previous = delay;
        Some(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn spec_schedule_stays_within_jitter_of_100_200_400() {
        for seed in 0..200 {
            let pauses: Vec<_> = Backoff::new()
                .delays(SmallRng::seed_from_u64(seed))
                .take(6)
                .collect();
            for (pause, base) in pauses.iter().zip([100, 200, 400, 800, 1600, 2000]) {
                let base = ms(base);
                assert!(
                    *pause >= base.mul_f64(0.75) && *pause <= base.mul_f64(1.25),
                    "seed {seed}: {pause:?} vs {base:?}"
                );
            }
        }
    }

    #[test]
    fn db_tx_is_quadratic_and_only_longer() {
        for seed in 0..200 {
            let pauses: Vec<_> = Backoff::db_tx()
                .delays(SmallRng::seed_from_u64(seed))
                .take(3)
                .collect();
            for (pause, base) in pauses.iter().zip([10, 40, 90]) {
                let base = ms(base);
                assert!(
                    *pause >= base && *pause <= base.mul_f64(1.25),
                    "{pause:?} vs {base:?}"
                );
            }
        }
    }

    #[test]
    fn full_and_decorrelated_stay_under_the_cap() {
        let cap = ms(500);
        for jitter in [Jitter::Full, Jitter::Decorrelated] {
            let b = Backoff::new().with_max_interval(cap).with_jitter(jitter);
            b.validate().unwrap();
            let pauses: Vec<_> = b.delays(SmallRng::seed_from_u64(1)).take(50).collect();
            assert!(pauses.iter().all(|p| *p <= cap), "{jitter:?}: {pauses:?}");
            // Randomized for real: not all equal.
            assert!(pauses.windows(2).any(|w| w[0] != w[1]), "{jitter:?}");
        }
        let decorrelated: Vec<_> = Backoff::new()
            .with_jitter(Jitter::Decorrelated)
            .delays(SmallRng::seed_from_u64(3))
            .take(50)
            .collect();
        assert!(
            decorrelated.iter().all(|p| *p >= ms(100)),
            "{decorrelated:?}"
        );
    }

    #[test]
    fn huge_attempt_numbers_saturate_at_the_cap() {
        let b = Backoff::new().with_jitter(Jitter::Symmetric(0.1));
        let d = b.delay(u32::MAX, Duration::ZERO, &mut SmallRng::seed_from_u64(0));
        assert!(d >= ms(1800) && d <= ms(2200), "{d:?}");
    }

    #[test]
    fn validation_names_field_and_value() {
        let cases = [
            (Backoff::new().with_initial(Duration::ZERO), "initial"),
            (Backoff::new().with_initial(ms(3000)), "initial"),
            (Backoff::new().with_multiplier(0.5), "multiplier"),
            (Backoff::new().with_multiplier(f64::NAN), "multiplier"),
            (Backoff::new().with_multiplier(f64::INFINITY), "multiplier"),
            (
                Backoff::new().with_jitter(Jitter::Symmetric(0.05)),
                "jitter",
            ),
            (Backoff::new().with_jitter(Jitter::Symmetric(1.5)), "jitter"),
            (
                Backoff::new().with_jitter(Jitter::Additive(f64::NAN)),
                "jitter",
            ),
            (
                Backoff::new().with_jitter(Jitter::Symmetric(-0.25)),
                "jitter",
            ),
        ];
        for (backoff, field) in cases {
            let err = backoff.validate().unwrap_err();
            assert_eq!(err.field(), field, "{err}");
        }
        let err = Backoff::new()
            .with_jitter(Jitter::Symmetric(0.05))
            .validate()
            .unwrap_err();
        assert_eq!(err.value(), "0.05");
        assert!(err.reason().contains("thundering herd"), "{err}");
        for ok in [
            Backoff::new(),
            Backoff::background(),
            Backoff::db_tx(),
            Backoff::new().with_jitter(Jitter::Symmetric(0.1)),
            Backoff::new().with_jitter(Jitter::Decorrelated),
            Backoff::new()
                .with_jitter(Jitter::Full)
                .with_multiplier(3.0),
        ] {
            ok.validate().unwrap();
        }
    }

    /// A setting the schedule never reads is refused, not ignored: the
    /// multiplier under decorrelated jitter (AWS's formula grows from the
    /// previous pause, `uniform(initial, previous · 3)`) and under the
    /// quadratic growth of `db_tx` (`initial · attempt²`).
    #[test]
    fn a_multiplier_nothing_reads_is_refused() {
        let cases = [
            Backoff::new()
                .with_jitter(Jitter::Decorrelated)
                .with_multiplier(3.0),
            Backoff::db_tx().with_multiplier(1.5),
        ];
        for backoff in cases {
            let err = backoff.validate().unwrap_err();
            assert_eq!(err.field(), "multiplier", "{err}");
            assert!(err.reason().contains("no effect"), "{err}");
        }
        // 3.0 with decorrelated jitter would otherwise pause exactly as 2.0:
        // the pauses do not depend on it.
        let pauses = |multiplier| {
            use rand::{SeedableRng, rngs::SmallRng};
            Backoff::new()
                .with_jitter(Jitter::Decorrelated)
                .with_multiplier(multiplier)
                .delays(SmallRng::seed_from_u64(7))
                .take(5)
                .collect::<Vec<_>>()
        };
        assert_eq!(pauses(2.0), pauses(3.0));
    }
}
