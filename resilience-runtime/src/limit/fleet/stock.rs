//! What a replica holds of the fleet's quota, decided in memory: the
//! leases it was granted (each spent at an even pace over one lease period
//! and void after its life), or, while Redis does not answer, a local GCRA
//! at the replica's share of the quota.

use std::collections::VecDeque;
use std::time::Duration;

use super::super::{Priority, Rate};
use crate::clock::duration_nanos;

/// The timings of a fleet limit, all drawn from its burst's span `D`
/// (`burst` calls at the quota's rate): a lease lives `0.6 D`, the next
/// one is asked for `0.55 D` after the last (its request times out after
/// the `0.05 D` in between), and Redis banks at most `0.4 D` of quota.
#[derive(Debug, Clone, Copy)]
pub(super) struct Plan {
    /// The fleet's interval between two calls, in nanoseconds.
    pub(super) interval: u64,
    pub(super) rate: Rate,
    pub(super) burst: u32,
    /// How long a lease's tokens may be spent after it was asked for.
    pub(super) life: u64,
    /// How often a replica leases.
    pub(super) period: u64,
    /// How long a lease request may take before Redis counts as down.
    pub(super) timeout: u64,
    /// Redis' tolerance: how far ahead of its clock the bucket's arrival
    /// time may run, `D − life`.
    pub(super) bank: u64,
}

/// The shortest burst span a fleet limit takes.
pub(super) const MIN_SPAN: Duration = Duration::from_millis(100);

impl Plan {
    pub(super) fn new(rate: Rate, burst: u32) -> Plan {
        let interval = duration_nanos(rate.interval()).max(1);
        let span = interval.saturating_mul(u64::from(burst));
        let life = span / 10 * 6;
        let timeout = life / 12;
        Plan {
            interval,
            rate,
            burst,
            life,
            period: life - timeout,
            timeout,
            bank: span - life,
        }
    }

    /// The span of the burst at the quota's rate.
    pub(super) fn span(&self) -> Duration {
        Duration::from_nanos(self.interval.saturating_mul(u64::from(self.burst)))
    }

    /// One replica's share of the quota per second, among `replicas`.
    pub(super) fn share_per_sec(&self, replicas: u32) -> f64 {
        1e9 / self.interval as f64 / f64::from(replicas.max(1))
    }

    /// How many tokens to ask for, `elapsed` nanoseconds after the last
    /// lease, having been offered `offered` calls and admitted `admitted`
    /// meanwhile: a lease period's worth of the recent rate, plus a
    /// tenth. The rate is the demand, but no more than the replica's share
    /// of the quota among `replicas` when the last lease came short (the
    /// fleet wants more than the quota: each asks for its share, so the
    /// first to lease does not take what the others need), and otherwise
    /// no more than 1.25 times what it admitted or its share, whichever is
    /// larger (a replica grows into a quota the others leave unused within
    /// a few periods, without draining Redis' bank in one lease).
    pub(super) fn ask(
        &self,
        elapsed: u64,
        offered: u64,
        admitted: u64,
        replicas: u32,
        short: bool,
    ) -> u32 {
        if offered == 0 {
            return 0;
        }
        let secs = elapsed.max(self.period) as f64 / 1e9;
        let demand = offered as f64 / secs;
        let admitted = admitted as f64 / secs;
        let share = self.share_per_sec(replicas);
        let rate = if short {
            demand.min(share)
        } else {
            demand.min((1.25 * admitted).max(share))
        };
        // Less a hair, so that an exact count is not rounded up by the float.
        let ask = (rate * self.period as f64 / 1e9 * 1.1 - 1e-6).ceil();
        (ask as u32).clamp(1, self.burst)
    }
}

/// A priority's tolerance on a GCRA of `interval` and `burst`, as
/// [`RateLimit`](super::super::RateLimit) keeps them.
fn tolerances(interval: u64, burst: u32) -> [u64; 3] {
    Priority::ALL.map(|p| u64::from(p.share(burst).max(1) - 1).saturating_mul(interval))
}

/// One GCRA word with its interval and tolerances.
#[derive(Debug, Clone, Copy)]
struct Pace {
    tat: u64,
    interval: u64,
    tolerance: [u64; 3],
}

impl Pace {
    /// The instant a call of `priority` would be admitted at, if it may
    /// wait `wait` beyond what its tolerance admits: `Ok(at)`, or
    /// `Err(how long until it would be admitted at once)`.
    fn place(&self, now: u64, priority: Priority, wait: u64) -> Result<u64, u64> {
        let tolerance = self.tolerance[priority.index()];
        let place = self.tat.max(now);
        let ahead = place - now;
        if ahead > tolerance.saturating_add(wait) {
            return Err(ahead - tolerance);
        }
        Ok(place.saturating_sub(tolerance).max(now))
    }

    fn take(&mut self, now: u64) {
        self.tat = self.tat.max(now) + self.interval;
    }
}

/// Tokens granted by one lease.
#[derive(Debug, Clone, Copy)]
struct Lease {
    pace: Pace,
    left: u32,
    /// Void from this instant: its request's start plus the lease's life.
    expires: u64,
}

/// A replica's stock: its leases, oldest first, and the local GCRA while
/// it decides alone.
#[derive(Debug)]
pub(super) struct Stock {
    leases: VecDeque<Lease>,
    alone: Option<Pace>,
    /// Calls the local GCRA admitted since the last lease request.
    alone_admitted: u32,
    /// When the next lease is expected, for a refused call's retry-after.
    pub(super) next_lease: u64,
}

/// A refused call: how long until one of its priority would be admitted,
/// as far as the stock knows, and whether the stock held nothing at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Refused {
    pub(super) after: u64,
    pub(super) empty: bool,
}

impl Stock {
    pub(super) fn new() -> Stock {
        Stock {
            leases: VecDeque::new(),
            alone: None,
            alone_admitted: 0,
            next_lease: 0,
        }
    }

    /// A lease request leaves: the calls admitted alone since the last
    /// one, for [`lease`](Self::lease) to count against the answer.
    pub(super) fn requested(&mut self) -> u32 {
        std::mem::take(&mut self.alone_admitted)
    }

    /// A lease of `granted` tokens asked for at `asked` and received at
    /// `now`: spent at an even pace over one lease period, a quarter of
    /// it at once at most, until `asked + life`. Ends deciding alone.
    ///
    /// The first lease after deciding alone counts what the replica
    /// admitted alone in the lease period before it (`alone_before`, and
    /// any since the request left) as taken from it, up to that quarter.
    /// A lease after a lease may spend its quarter at once because the
    /// lease before ran out that much ahead of the period's end, spent at
    /// its own start; the local GCRA left no such gap, having paced calls
    /// evenly right up to the answer, so the quarter would come on top of
    /// them, and every replica coming back in the same second would
    /// admit it twice.
    pub(super) fn lease(
        &mut self,
        plan: &Plan,
        granted: u32,
        asked: u64,
        now: u64,
        alone_before: u32,
    ) {
        let was_alone = self.alone.take().is_some();
        let alone = alone_before.saturating_add(std::mem::take(&mut self.alone_admitted));
        self.next_lease = asked + plan.period;
        if granted == 0 {
            return;
        }
        let interval = (plan.period / u64::from(granted)).max(1);
        let quarter = granted.div_ceil(4);
        let spent = if was_alone { alone.min(quarter) } else { 0 };
        self.leases.push_back(Lease {
            pace: Pace {
                tat: now + u64::from(spent) * interval,
                interval,
                tolerance: tolerances(interval, quarter),
            },
            left: granted - spent,
            expires: asked + plan.life,
        });
        // At most the leases still alive; older ones are void.
        self.leases.retain(|lease| lease.expires > now);
    }

    /// Redis did not answer at `now`: the replica decides alone at its
    /// share of the quota among `replicas`, from when its leases stop
    /// (their pace runs out or they expire), with no saved-up burst (the
    /// leases' tokens were that burst) but the critical calls' reserve.
    pub(super) fn alone(&mut self, plan: &Plan, replicas: u32, now: u64) {
        if self.alone.is_some() {
            return;
        }
        let replicas = replicas.max(1);
        let interval = plan.interval.saturating_mul(u64::from(replicas));
        let burst = (plan.burst / replicas).max(1);
        let start = self
            .leases
            .iter()
            .filter(|lease| lease.left > 0)
            .map(|lease| {
                lease
                    .expires
                    .min(lease.pace.tat.max(now) + u64::from(lease.left) * lease.pace.interval)
            })
            .fold(now, u64::max);
        let tolerance = tolerances(interval, burst);
        self.alone = Some(Pace {
            tat: start + tolerance[Priority::Default.index()],
            interval,
            tolerance,
        });
    }

    /// Whether the replica decides alone.
    #[cfg(test)]
    pub(super) fn is_alone(&self) -> bool {
        self.alone.is_some()
    }

    /// Admits a call of `priority` at `now`, or at most `wait` later: the
    /// instant it is admitted at; or how long until it would be.
    pub(super) fn take(&mut self, now: u64, priority: Priority, wait: u64) -> Result<u64, Refused> {
        self.leases
            .retain(|lease| lease.left > 0 && lease.expires > now);
        let mut soonest = u64::MAX;
        for lease in &mut self.leases {
            match lease.pace.place(now, priority, wait) {
                Ok(at) if at < lease.expires => {
                    lease.pace.take(now);
                    lease.left -= 1;
                    return Ok(at);
                }
                Ok(_) => {}
                Err(after) if now + after < lease.expires => soonest = soonest.min(after),
                Err(_) => {}
            }
        }
        if let Some(alone) = &mut self.alone {
            match alone.place(now, priority, wait) {
                Ok(at) => {
                    alone.take(now);
                    self.alone_admitted = self.alone_admitted.saturating_add(1);
                    return Ok(at);
                }
                Err(after) => soonest = soonest.min(after),
            }
        }
        if soonest == u64::MAX {
            soonest = self.next_lease.saturating_sub(now).max(1);
        }
        Err(Refused {
            after: soonest,
            empty: self.leases.is_empty() && self.alone.is_none(),
        })
    }

    /// Tokens held in live leases at `now`.
    #[cfg(test)]
    pub(super) fn held(&self, now: u64) -> u32 {
        self.leases
            .iter()
            .filter(|lease| lease.expires > now)
            .map(|lease| lease.left)
            .sum()
    }
}
