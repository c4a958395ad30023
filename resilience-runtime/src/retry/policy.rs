//! A validated retry policy: backoff plus the bounds of the whole chain.

use std::num::NonZeroU64;
use std::time::Duration;

use resilience_rules::duration::display;
use resilience_rules::limits::MAX_ATTEMPTS;
use resilience_rules::presets;

use super::backoff::{Backoff, Jitter};
use super::budget::Budget;
use crate::clock::duration_nanos;
use crate::error::ConfigError;

/// What a retry chain may do: how many attempts, how long in all, how long
/// one attempt, and how to pause between them.
///
/// A `Policy` is always valid: it comes from a preset or from
/// [`PolicyBuilder::build`], which checks every rule of the guide ([retry](crate::guide#retry), [deadlines](crate::guide#deadlines-and-budgets)).
/// Every chain is bounded twice, by attempts and by elapsed time.
///
/// # Default
///
/// [`Policy::http`]: 3 attempts, pauses of 100 ms ×2 capped at 2 s with
/// ±25 % jitter, at most 5 s for the whole chain, no per-attempt timeout.
///
/// # Example
///
/// ```
/// use resilience::retry::Policy;
/// use std::time::Duration;
///
/// let policy = Policy::builder()
///     .with_max_attempts(4)
///     .with_attempt_timeout(Duration::from_millis(800))
///     .build()?;
/// assert_eq!(policy.max_attempts(), 4);
/// assert_eq!(policy.max_elapsed(), Duration::from_secs(5));
/// # Ok::<(), resilience::ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq)]
pub struct Policy {
    backoff: Backoff,
    max_attempts: u32,
    // In nanoseconds, as in `Backoff`: every chain carries its policy.
    max_elapsed: u64,
    attempt_timeout: Option<NonZeroU64>,
    // In nanoseconds: the longest pause a server's `Retry-After` may ask for.
    max_retry_after: u64,
    /// The retry budget it draws on, shared with the other chains to the
    /// same dependency.
    budget: Option<&'static Budget>,
}

/// The durations as the config file writes them (`5s`), not as the
/// nanoseconds kept: [`Registry::sites`](crate::registry::Registry::sites)
/// lists a policy with it.
impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("backoff", &self.backoff)
            .field("max_attempts", &self.max_attempts)
            .field("max_elapsed", &crate::clock::ShowNanos(self.max_elapsed))
            .field(
                "attempt_timeout",
                &self
                    .attempt_timeout
                    .map(|t| crate::clock::ShowNanos(t.get())),
            )
            .field(
                "max_retry_after",
                &crate::clock::ShowNanos(self.max_retry_after),
            )
            .field("budget", &self.budget)
            .finish()
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self::http()
    }
}

impl Policy {
    /// Calls to another service over HTTP: 3 attempts, 100 ms ×2 up to
    /// 2 s, ±25 %, 5 s in all.
    pub const fn http() -> Self {
        // Evaluated at compile time even where called at run time.
        const POLICY: Policy = PolicyBuilder::http().build_unchecked();
        POLICY
    }

    /// Background consumers (queues, jobs) that have no caller waiting:
    /// 5 retries after the first attempt (6 attempts), 500 ms ×2 up to
    /// 30 s, ±25 %, 2 min in all. Hand what is still failing afterwards to
    /// a dead-letter queue from the notify hook's
    /// [`GiveUp::Exhausted`](super::GiveUp::Exhausted) event.
    pub const fn background() -> Self {
        // Evaluated at compile time even where called at run time.
        const POLICY: Policy = PolicyBuilder::background().build_unchecked();
        POLICY
    }

    /// Retrying a whole database transaction on `40001`/`40P01`: 3
    /// attempts, `10 ms · attempt²` plus up to 25 %, 5 s in all. Wrap the
    /// transaction, never a call inside one ([mistake 4](crate::guide#mistakes-the-library-refuses)).
    pub const fn db_tx() -> Self {
        // Evaluated at compile time even where called at run time.
        const POLICY: Policy = PolicyBuilder::db_tx().build_unchecked();
        POLICY
    }

    /// A builder starting from [`Policy::http`].
    pub const fn builder() -> PolicyBuilder {
        PolicyBuilder::http()
    }

    /// A builder starting from this policy, to override some of it.
    pub const fn to_builder(&self) -> PolicyBuilder {
        PolicyBuilder {
            backoff: self.backoff,
            max_attempts: self.max_attempts,
            max_elapsed: self.max_elapsed(),
            attempt_timeout: self.attempt_timeout(),
            max_retry_after: self.max_retry_after(),
        }
    }

    /// The pause schedule.
    pub const fn backoff(&self) -> &Backoff {
        &self.backoff
    }

    /// Attempts in all, the first one included (at least 1).
    pub const fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The cap on the whole chain: attempts and pauses together.
    pub const fn max_elapsed(&self) -> Duration {
        Duration::from_nanos(self.max_elapsed)
    }

    /// The longest pause a server's `Retry-After` (a
    /// [`Verdict::RetryAfter`](super::Verdict::RetryAfter)) may ask for.
    /// A longer hint is honoured, not cut: the chain gives up at once
    /// ([`GiveUp::RetryAfterTooLong`](super::GiveUp::RetryAfterTooLong))
    /// and the caller gets the error that carries the hint, to come back
    /// when the server said. A pause that would not end before what is
    /// left of [`max_elapsed`](Self::max_elapsed) gives up the same way.
    /// 60 s unless set with [`PolicyBuilder::with_max_retry_after`].
    ///
    /// ```
    /// use resilience::retry::Policy;
    /// use std::time::Duration;
    ///
    /// assert_eq!(Policy::http().max_retry_after(), Duration::from_secs(60));
    /// ```
    pub const fn max_retry_after(&self) -> Duration {
        Duration::from_nanos(self.max_retry_after)
    }

    /// The cap on one attempt, if any. The caller's deadline shortens it
    /// further when less time is left.
    pub const fn attempt_timeout(&self) -> Option<Duration> {
        match self.attempt_timeout {
            Some(nanos) => Some(Duration::from_nanos(nanos.get())),
            None => None,
        }
    }

    /// This policy for a hedged call of `max` attempts in all: the hedge's
    /// delay takes the place of the per-attempt timeout.
    pub(crate) const fn hedged(mut self, max: u32) -> Self {
        self.max_attempts = max;
        self.attempt_timeout = None;
        self
    }

    /// The same policy, whose retries draw on `budget`: a retry the budget
    /// cannot pay for is not made, and the chain ends with the error of
    /// the attempt it made ([`GiveUp::BudgetEmpty`](super::GiveUp::BudgetEmpty)).
    /// Every chain under it deposits once per call. [`to_builder`](Self::to_builder)
    /// leaves the budget out.
    ///
    /// ```
    /// use resilience::retry::{Budget, BudgetConfig, Policy};
    ///
    /// static USER: std::sync::LazyLock<Budget> =
    ///     std::sync::LazyLock::new(|| BudgetConfig::new().build().unwrap());
    /// let policy = Policy::http().with_budget(&USER);
    /// assert!(policy.budget().is_some());
    /// assert_eq!(policy.to_builder().build().unwrap(), Policy::http());
    /// ```
    pub const fn with_budget(mut self, budget: &'static Budget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// The retry budget its chains draw on, if any.
    #[inline(always)]
    pub const fn budget(&self) -> Option<&'static Budget> {
        self.budget
    }

    /// Whether attempts run under a timeout of their own, without building
    /// the `Duration`: the first question of every attempt.
    #[inline]
    pub(crate) const fn has_attempt_timeout(&self) -> bool {
        self.attempt_timeout.is_some()
    }
}

/// Builds a [`Policy`]; every value is checked by [`build`](Self::build).
#[derive(Debug, Clone, Copy, PartialEq)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct PolicyBuilder {
    backoff: Backoff,
    max_attempts: u32,
    max_elapsed: Duration,
    attempt_timeout: Option<Duration>,
    max_retry_after: Duration,
}

/// The default of [`PolicyBuilder::with_max_retry_after`].
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

impl Default for PolicyBuilder {
    fn default() -> Self {
        Self::http()
    }
}

impl PolicyBuilder {
    /// The values of [`Policy::http`].
    pub const fn http() -> Self {
        Self {
            backoff: Backoff::of(&presets::HTTP),
            max_attempts: presets::HTTP.max_attempts,
            max_elapsed: presets::HTTP.max_elapsed,
            attempt_timeout: None,
            max_retry_after: MAX_RETRY_AFTER,
        }
    }

    /// The values of [`Policy::background`].
    pub const fn background() -> Self {
        Self {
            backoff: Backoff::of(&presets::BACKGROUND),
            max_attempts: presets::BACKGROUND.max_attempts,
            max_elapsed: presets::BACKGROUND.max_elapsed,
            attempt_timeout: None,
            max_retry_after: MAX_RETRY_AFTER,
        }
    }

    /// The values of [`Policy::db_tx`].
    pub const fn db_tx() -> Self {
        Self {
            backoff: Backoff::of(&presets::DB_TX),
            max_attempts: presets::DB_TX.max_attempts,
            max_elapsed: presets::DB_TX.max_elapsed,
            attempt_timeout: None,
            max_retry_after: MAX_RETRY_AFTER,
        }
    }

    /// Attempts in all, the first one included.
    pub const fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// The cap on the whole chain.
    pub const fn with_max_elapsed(mut self, max_elapsed: Duration) -> Self {
        self.max_elapsed = max_elapsed;
        self
    }

    /// The longest pause a server's `Retry-After` may ask for (60 s by
    /// default). A longer hint, a busy server's `Retry-After: 90` or a
    /// hostile one's `Retry-After: 18446744073709551615`, is never cut
    /// short: the chain gives up at once with the error that carries it
    /// (the guide: never retry earlier than the server asked).
    /// `Duration::ZERO` gives up on every hint but `Retry-After: 0`.
    ///
    /// ```
    /// use resilience::retry::Policy;
    /// use std::time::Duration;
    ///
    /// let policy = Policy::builder()
    ///     .with_max_retry_after(Duration::from_secs(10))
    ///     .build()?;
    /// assert_eq!(policy.max_retry_after(), Duration::from_secs(10));
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub const fn with_max_retry_after(mut self, max_retry_after: Duration) -> Self {
        self.max_retry_after = max_retry_after;
        self
    }

    /// The cap on one attempt; must be shorter than `max_elapsed`.
    pub const fn with_attempt_timeout(mut self, attempt_timeout: Duration) -> Self {
        self.attempt_timeout = Some(attempt_timeout);
        self
    }

    /// The whole pause schedule.
    pub const fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The first pause; see [`Backoff::with_initial`].
    pub const fn with_initial(mut self, initial: Duration) -> Self {
        self.backoff = self.backoff.with_initial(initial);
        self
    }

    /// The growth factor; see [`Backoff::with_multiplier`].
    pub const fn with_multiplier(mut self, multiplier: f64) -> Self {
        self.backoff = self.backoff.with_multiplier(multiplier);
        self
    }

    /// The cap on one pause; see [`Backoff::with_max_interval`].
    pub const fn with_max_interval(mut self, max_interval: Duration) -> Self {
        self.backoff = self.backoff.with_max_interval(max_interval);
        self
    }

    /// The randomization; see [`Jitter`].
    pub const fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.backoff = self.backoff.with_jitter(jitter);
        self
    }

    /// The randomization set so far: a config file's bare `jitter = 0.3`
    /// keeps its kind.
    #[cfg(feature = "config-file")]
    pub(crate) const fn jitter(&self) -> Jitter {
        self.backoff.jitter()
    }

    /// Checks every rule and returns the policy, or the first broken rule
    /// naming the field and its value.
    pub fn build(self) -> Result<Policy, ConfigError> {
        self.validate()
            .map(|()| self.build_unchecked())
            .map_err(|err| err.with_subject("retry policy"))
    }

    fn validate(&self) -> Result<(), ConfigError> {
        const WHAT: &str = "retry policy";
        if self.max_attempts == 0 {
            return Err(ConfigError::new(
                WHAT,
                "max_attempts",
                0,
                "at least one attempt is needed; use 1 to disable retries",
            ));
        }
        if self.max_attempts > MAX_ATTEMPTS {
            return Err(ConfigError::new(
                WHAT,
                "max_attempts",
                self.max_attempts,
                format!(
                    "the limit is {MAX_ATTEMPTS} attempts: each is another request to a failing dependency; to retry for longer, raise `max_elapsed`; the default is {}",
                    presets::HTTP.max_attempts
                ),
            ));
        }
        if self.max_elapsed.is_zero() {
            return Err(ConfigError::new(
                WHAT,
                "max_elapsed",
                "0s",
                format!(
                    "every retry chain needs a time bound (zero means \"unbounded\" in some libraries, so it is refused here); the default is \"{}\"",
                    display(presets::HTTP.max_elapsed)
                ),
            ));
        }
        if let Some(timeout) = self.attempt_timeout {
            if timeout.is_zero() {
                return Err(ConfigError::new(
                    WHAT,
                    "attempt_timeout",
                    "0s",
                    "an attempt needs some time to run",
                ));
            }
            if timeout >= self.max_elapsed {
                return Err(ConfigError::new(
                    WHAT,
                    "attempt_timeout",
                    format!("{timeout:?}"),
                    format!(
                        "not shorter than `max_elapsed = {:?}`: a timed-out first attempt uses all of `max_elapsed` and the second attempt can never run; make the attempt timeout a fraction of `max_elapsed`",
                        self.max_elapsed
                    ),
                ));
            }
        }
        self.backoff.validate()
    }

    // For the presets and the attributes' sites, whose values were checked
    // already (at compile time for the attributes); never public, since it
    // bypasses every rule `build` enforces.
    pub(crate) const fn build_unchecked(self) -> Policy {
        let attempt_timeout = match self.attempt_timeout {
            // Checked by `build`; a zero timeout left unchecked is the
            // shortest one there is, never "none".
            Some(timeout) => match NonZeroU64::new(duration_nanos(timeout)) {
                Some(timeout) => Some(timeout),
                None => Some(NonZeroU64::MIN),
            },
            None => None,
        };
        Policy {
            backoff: self.backoff,
            max_attempts: self.max_attempts,
            max_elapsed: duration_nanos(self.max_elapsed),
            attempt_timeout,
            max_retry_after: duration_nanos(self.max_retry_after),
            budget: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The guide's numbers, written out: a preset that drifted from them
    /// fails here, whatever the builder says.
    #[test]
    fn presets_are_valid_and_match_the_spec() {
        use crate::retry::Growth;
        type Row = (u32, u64, f64, u64, Jitter, Growth, u64);
        let shape = |p: Policy| -> Row {
            let b = p.backoff();
            (
                p.max_attempts(),
                b.initial().as_millis() as u64,
                b.multiplier(),
                b.max_interval().as_millis() as u64,
                b.jitter(),
                b.growth(),
                p.max_elapsed().as_millis() as u64,
            )
        };
        // attempts, initial ms, ×, max interval ms, jitter, growth, budget ms
        let http: Row = (
            3,
            100,
            2.0,
            2_000,
            Jitter::Symmetric(0.25),
            Growth::Exponential,
            5_000,
        );
        let background: Row = (
            6,
            500,
            2.0,
            30_000,
            Jitter::Symmetric(0.25),
            Growth::Exponential,
            120_000,
        );
        let db_tx: Row = (
            3,
            10,
            2.0,
            1_000,
            Jitter::Additive(0.25),
            Growth::Quadratic,
            5_000,
        );
        assert_eq!(shape(Policy::http()), http);
        assert_eq!(shape(Policy::background()), background);
        assert_eq!(shape(Policy::db_tx()), db_tx);
        for policy in [Policy::http(), Policy::background(), Policy::db_tx()] {
            policy.to_builder().build().unwrap();
        }
        // The schedules they give: 100 → 200 → 400 ms … within the jitter.
        use rand::SeedableRng;
        let within = |p: Policy, bases: &[u64], low: f64, high: f64| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(7);
            for _ in 0..200 {
                for (n, base) in bases.iter().enumerate() {
                    let pause = p.backoff().delay(n as u32, Duration::ZERO, &mut rng);
                    let ms = pause.as_secs_f64() * 1e3;
                    let (lo, hi) = (*base as f64 * low, *base as f64 * high);
                    assert!(
                        lo - 1e-6 <= ms && ms <= hi + 1e-6,
                        "pause {n}: {ms} ms not in {lo}..={hi}"
                    );
                }
            }
        };
        within(
            Policy::http(),
            &[100, 200, 400, 800, 1_600, 2_000],
            0.75,
            1.25,
        );
        within(
            Policy::background(),
            &[500, 1_000, 2_000, 4_000, 8_000],
            0.75,
            1.25,
        );
        within(Policy::db_tx(), &[10, 40, 90], 1.0, 1.25);
    }

    #[test]
    fn unbounded_or_contradictory_policies_are_refused() {
        let cases = [
            (Policy::builder().with_max_attempts(0), "max_attempts", "0"),
            (
                Policy::builder().with_max_elapsed(Duration::ZERO),
                "max_elapsed",
                "0s",
            ),
            (
                Policy::builder().with_attempt_timeout(Duration::ZERO),
                "attempt_timeout",
                "0s",
            ),
            (
                Policy::builder().with_attempt_timeout(Duration::from_secs(5)),
                "attempt_timeout",
                "5s",
            ),
            (
                Policy::builder().with_jitter(Jitter::Symmetric(0.0)),
                "jitter",
                "0",
            ),
            (
                Policy::builder().with_initial(Duration::from_secs(3)),
                "initial",
                "3s",
            ),
            (Policy::builder().with_multiplier(0.9), "multiplier", "0.9"),
        ];
        for (builder, field, value) in cases {
            let err = builder.build().unwrap_err();
            assert_eq!((err.field(), err.value()), (field, value), "{err}");
            assert_eq!(err.subject(), "retry policy");
        }
        let err = Policy::builder()
            .with_attempt_timeout(Duration::from_secs(5))
            .build()
            .unwrap_err();
        assert!(
            err.to_string().contains("second attempt can never run"),
            "{err}"
        );
    }
}
