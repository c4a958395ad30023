use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::ConfigError;
use crate::striped::ticked::Ticked;
use crate::striped::timed::TimedWindow;

/// Buckets of a budget's window: deposits leave it a tenth of `ttl` at a
/// time.
const BUCKETS: usize = 10;

/// The settings of a [`Budget`], validated by [`build`](Self::build).
///
/// # Default
///
/// Finagle's: `ratio` 0.2, `min_per_second` 10, `ttl` 10 s.
///
/// ```
/// use std::time::Duration;
/// use resilience::retry::BudgetConfig;
///
/// let config = BudgetConfig::new().with_ratio(0.1).with_min_per_second(5);
/// assert!(config.build().is_ok());
/// let err = BudgetConfig::new().with_ratio(-1.0).build().unwrap_err();
/// assert_eq!(err.field(), "ratio");
/// let err = BudgetConfig::new().with_ttl(Duration::from_millis(10)).build().unwrap_err();
/// assert_eq!(err.field(), "ttl");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetConfig {
    ratio: f64,
    min_per_second: u32,
    ttl: Duration,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl BudgetConfig {
    /// The defaults: 20 % of the calls plus 10 retries per second, over
    /// the last 10 s.
    pub const fn new() -> Self {
        Self {
            ratio: 0.2,
            min_per_second: 10,
            ttl: Duration::from_secs(10),
        }
    }

    /// Retries allowed per call deposited, from 0 to 10 (Finagle's range:
    /// 0 % to 1000 %).
    pub const fn with_ratio(mut self, ratio: f64) -> Self {
        self.ratio = ratio;
        self
    }

    /// Retries allowed per second whatever the traffic.
    pub const fn with_min_per_second(mut self, min_per_second: u32) -> Self {
        self.min_per_second = min_per_second;
        self
    }

    /// How long a deposit counts, from 1 s to 60 s (Finagle's range).
    pub const fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The retries allowed per call.
    pub const fn ratio(&self) -> f64 {
        self.ratio
    }

    /// The retries allowed per second whatever the traffic.
    pub const fn min_per_second(&self) -> u32 {
        self.min_per_second
    }

    /// How long a deposit counts.
    pub const fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Checks every value; the error names the first one at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field: &'static str, value: String, reason: &'static str| {
            Err(ConfigError::new("retry budget", field, value, reason))
        };
        if !(self.ratio.is_finite() && (0.0..=10.0).contains(&self.ratio)) {
            return bad(
                "ratio",
                self.ratio.to_string(),
                "the share of calls that may be retried must be between 0 and 10 (0.2 allows one retry per five calls)",
            );
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&self.ttl) {
            return bad(
                "ttl",
                format!("{:?}", self.ttl),
                "deposits must count for between 1 s and 60 s (10 s by default)",
            );
        }
        if self.ratio == 0.0 && self.min_per_second == 0 {
            return bad(
                "min_per_second",
                "0".to_owned(),
                "with `ratio` 0 too the budget never allows a retry; use `max_attempts = 1` to disable retries, or allow some",
            );
        }
        if u64::from(self.min_per_second) * self.ttl.as_secs() > u64::from(u32::MAX) {
            return bad(
                "min_per_second",
                self.min_per_second.to_string(),
                "the floor of retries per second times `ttl` must fit in 32 bits",
            );
        }
        Ok(())
    }

    /// A budget named `name` with these settings, once validated.
    pub fn build(self) -> Result<Budget, ConfigError> {
        self.build_named("")
    }

    pub(crate) fn build_named(self, name: &'static str) -> Result<Budget, ConfigError> {
        self.validate().map_err(|err| {
            if name.is_empty() {
                err
            } else {
                err.with_subject(format!("retry budget `{name}`"))
            }
        })?;
        Ok(Budget {
            name,
            config: self,
            deposits: TimedWindow::new(self.ttl),
            ledger: Mutex::new(Ledger::default()),
        })
    }
}

/// A retry budget: the retries of every call site of one dependency, capped
/// at a share of its calls.
///
/// A breaker reacts after `min` failures; until then, 5 replicas × 3
/// attempts put 15× the load on a dependency that is already failing. A
/// budget caps that amplification from the first failure: every logical
/// call deposits, every retry withdraws, and a chain whose budget is empty
/// stops after the attempt it made, with that attempt's error
/// ([`GiveUp::BudgetEmpty`](super::GiveUp::BudgetEmpty)).
///
/// The design and the defaults are Finagle's `RetryBudget`: retries within
/// the last `ttl` (10 s) may be `ratio` (20 %) of the calls deposited in it,
/// plus a floor of `min_per_second` (10) retries per second, so that a
/// service with little traffic still retries. The others that have one
/// agree on the shape: gRPC's retry throttling (proposal A6: `maxTokens`
/// tokens, each failure takes one, each success gives back `tokenRatio`,
/// no retry while tokens ≤ `maxTokens / 2`), the AWS SDKs' retry quota
/// (500 tokens, 5 per retry, 10 per retried timeout, one back per success),
/// Envoy's retry budget (retries in flight ≤ `budget_percent` (20 %) of
/// the requests in flight, with `min_retry_concurrency` 3). Finagle's is
/// taken because its floor is per second, so a quiet service is not left
/// without retries, and its deposits expire, so a burst of successes long
/// ago does not pay for a storm now.
///
/// A deposit is on every call's path, so it is a plain load and store on a
/// counter only the calling thread writes (the stripes of a breaker's
/// window): no locked instruction, no shared cache line, no clock read.
/// The window's buckets move at their boundaries (every tenth of `ttl`)
/// by the ticker that moves the breakers, so a deposit leaves the window
/// `ttl` after it was made even when nothing was retried meanwhile: the
/// calls of an hour of healthy traffic do not pay for the retries of an
/// outage that starts after a quiet minute. The clock is read only when a
/// retry asks to withdraw, which is the failure path.
///
/// One is shared by every chain that names it.
///
/// A chain draws on one when its [`Policy`](super::Policy) carries it
/// ([`Policy::with_budget`](super::Policy::with_budget)); the attributes
/// take it by name from the registry (`budget = "user"`, by default the
/// name of the fn's circuit breaker). It is `'static` because every call
/// site keeps a reference to it: make it a `static`, leak it, or take it
/// from the [registry](crate::registry::Registry::budget).
///
/// ```
/// use resilience::retry::{Budget, BudgetConfig};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let budget: &'static Budget = Box::leak(Box::new(
///     BudgetConfig::new().with_ratio(0.5).with_min_per_second(0).build().unwrap(),
/// ));
/// for _ in 0..4 {
///     budget.deposit();
/// }
/// assert!(budget.withdraw());
/// assert!(budget.withdraw());
/// assert!(!budget.withdraw(), "2 retries for 4 calls at 50 %");
/// # }
/// ```
pub struct Budget {
    name: &'static str,
    config: BudgetConfig,
    /// The calls of the last `ttl`, moved on by the breakers' ticker.
    deposits: Arc<TimedWindow>,
    ledger: Mutex<Ledger>,
}

/// The withdrawals of the last `ttl`, in the deposits' buckets.
#[derive(Debug, Default)]
struct Ledger {
    epoch: u64,
    withdrawals: [u64; BUCKETS],
}

impl Budget {
    /// The name it was registered under (empty for one built by hand).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Its settings.
    pub fn config(&self) -> &BudgetConfig {
        &self.config
    }

    /// One logical call: the success path, a plain store on this thread's
    /// counter.
    #[inline(always)]
    pub fn deposit(&self) {
        self.deposits.add();
    }

    /// One retry (or hedge), if the budget allows it: `false` when it is
    /// empty, and nothing is taken.
    pub fn withdraw(&self) -> bool {
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        if self.settle(&mut ledger) >= 1 {
            let slot = ledger.epoch as usize % BUCKETS;
            ledger.withdrawals[slot] += 1;
            true
        } else {
            false
        }
    }

    /// The retries it would allow now, for health endpoints and tests.
    pub fn balance(&self) -> u64 {
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        self.settle(&mut ledger)
    }

    /// Moves both windows to now and returns the retries allowed.
    fn settle(&self, ledger: &mut Ledger) -> u64 {
        let now = self.deposits.now();
        let deposits = self.deposits.count_at(now);
        let epoch = now / self.deposits.bucket_width();
        if epoch > ledger.epoch {
            let first = (ledger.epoch + 1).max(epoch.saturating_sub(BUCKETS as u64 - 1));
            for k in first..=epoch {
                ledger.withdrawals[k as usize % BUCKETS] = 0;
            }
            ledger.epoch = epoch;
        }
        let withdrawals: u64 = ledger.withdrawals.iter().sum();
        let floor = f64::from(self.config.min_per_second) * self.config.ttl.as_secs_f64();
        // Whole retries only: 0.2 × 4 calls allows none yet.
        let allowed = (floor + self.config.ratio * deposits as f64) as u64;
        allowed.saturating_sub(withdrawals)
    }
}

/// One budget is equal only to itself: a policy compares its budget by
/// identity.
impl PartialEq for Budget {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Budget")
            .field("name", &self.name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leak(config: BudgetConfig) -> &'static Budget {
        Box::leak(Box::new(config.build().unwrap()))
    }

    #[tokio::test(start_paused = true)]
    async fn the_floor_allows_min_per_second_times_ttl_without_traffic() {
        let budget = leak(BudgetConfig::new());
        let allowed = (0..1000).take_while(|_| budget.withdraw()).count();
        assert_eq!(allowed, 100);
    }

    #[tokio::test(start_paused = true)]
    async fn deposits_expire_after_ttl() {
        let budget = leak(BudgetConfig::new().with_min_per_second(0));
        for _ in 0..100 {
            budget.deposit();
        }
        assert!(
            budget.withdraw(),
            "the deposits are sorted in at the first withdrawal"
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        let later = (0..100).take_while(|_| budget.withdraw()).count();
        assert_eq!(later, 19, "20 % of 100 calls, one taken already");
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(!budget.withdraw(), "the calls of 11 s ago no longer count");
        assert_eq!(budget.balance(), 0);
        // The retries of 5 s ago expire too.
        tokio::time::advance(Duration::from_secs(5)).await;
        budget.deposit();
        budget.deposit();
        budget.deposit();
        budget.deposit();
        budget.deposit();
        assert_eq!(budget.balance(), 1);
        assert!(budget.withdraw());
    }

    #[test]
    fn every_value_is_checked_and_named() {
        for (config, field) in [
            (BudgetConfig::new().with_ratio(f64::NAN), "ratio"),
            (BudgetConfig::new().with_ratio(11.0), "ratio"),
            (BudgetConfig::new().with_ttl(Duration::from_secs(61)), "ttl"),
            (
                BudgetConfig::new().with_ratio(0.0).with_min_per_second(0),
                "min_per_second",
            ),
            (
                BudgetConfig::new().with_min_per_second(u32::MAX),
                "min_per_second",
            ),
        ] {
            let err = config.build_named("user").unwrap_err();
            assert_eq!(err.field(), field, "{config:?}");
            assert!(err.to_string().contains("`user`"), "{err}");
        }
    }
}
