//! What a fleet limit and its lease task share.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::super::Priority;
use super::super::rate::Clock;
use super::super::report::{self, Report};
use super::stock::{Plan, Refused, Stock};
use crate::error::Overloaded;
use crate::telemetry::{
    Labels, RATE_LIMIT_LEASE_TOKENS, RATE_LIMIT_REDIS_ROUND_TRIPS_TOTAL,
    RATE_LIMIT_SHARED_FALLBACK, emit,
};

pub(super) struct Link {
    pub(super) stock: Mutex<Stock>,
    pub(super) plan: Plan,
    pub(super) clock: Clock,
    pub(super) report: Report,
    pub(super) url: &'static str,
    /// The Redis keys' common prefix, `resilience:rate:{service/name}`.
    pub(super) prefix: String,
    /// Names this replica among the fleet's.
    pub(super) id: String,
    /// Calls asked for and admitted since the last lease.
    pub(super) offered: AtomicU64,
    pub(super) admitted: AtomicU64,
    /// Replicas announced at the last answer (1 before it).
    pub(super) replicas: AtomicU32,
    pub(super) leasing: AtomicBool,
    pub(super) round_trips: AtomicU64,
    pub(super) last_lease: AtomicU32,
    /// A lease task runs.
    pub(super) running: AtomicBool,
    /// A call found no stock: lease now rather than at the next period.
    pub(super) wake: Arc<Notify>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("prefix", &self.prefix)
            .field("plan", &self.plan)
            .finish_non_exhaustive()
    }
}

impl Link {
    pub(super) fn new(plan: Plan, url: &'static str, labels: Labels, report: Report) -> Link {
        emit::gauge(RATE_LIMIT_SHARED_FALLBACK, labels, 1.0);
        Link {
            stock: Mutex::new(Stock::new()),
            plan,
            clock: Clock::new(),
            report,
            url,
            // The braces are a Redis Cluster hash tag: every key of one
            // limit lands on the same shard, as its Lua script needs.
            prefix: format!(
                "resilience:rate:{{{}/{}}}",
                labels.service(),
                labels.target()
            ),
            id: format!("{:016x}", crate::retry::thread_rng(rand::RngCore::next_u64)),
            offered: AtomicU64::new(0),
            admitted: AtomicU64::new(0),
            replicas: AtomicU32::new(1),
            leasing: AtomicBool::new(false),
            round_trips: AtomicU64::new(0),
            last_lease: AtomicU32::new(0),
            running: AtomicBool::new(false),
            wake: Arc::new(Notify::new()),
        }
    }

    fn labels(&self) -> Labels {
        self.report.labels()
    }

    /// Admits a call of `priority` now, or up to `wait` nanoseconds later:
    /// the instant it is admitted at.
    pub(super) fn take(&self, now: u64, priority: Priority, wait: u64) -> Result<u64, Overloaded> {
        self.offered.fetch_add(1, Relaxed);
        let taken = match self.stock.lock() {
            Ok(mut stock) => stock.take(now, priority, wait),
            Err(poisoned) => poisoned.into_inner().take(now, priority, wait),
        };
        match taken {
            Ok(at) => {
                self.admitted.fetch_add(1, Relaxed);
                Ok(at)
            }
            Err(refused) => Err(self.refuse(priority, refused)),
        }
    }

    #[cold]
    fn refuse(&self, priority: Priority, refused: Refused) -> Overloaded {
        if refused.empty {
            // Nothing held (an idle replica asked for nothing): the task
            // leases now, not at its next period.
            self.wake.notify_one();
        }
        self.report
            .shed(priority, 0)
            .with_retry_after(std::time::Duration::from_nanos(refused.after))
    }

    pub(super) fn with_stock<T>(&self, f: impl FnOnce(&mut Stock) -> T) -> T {
        match self.stock.lock() {
            Ok(mut stock) => f(&mut stock),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// A lease answered: `granted` tokens asked for at `asked`, among
    /// `replicas`, the request having left when the replica had admitted
    /// `alone_before` calls alone since the one before.
    pub(super) fn leased(&self, granted: u32, replicas: u32, asked: u64, alone_before: u32) {
        let now = self.clock.now();
        self.with_stock(|stock| stock.lease(&self.plan, granted, asked, now, alone_before));
        self.replicas.store(replicas.max(1), Relaxed);
        self.last_lease.store(granted, Relaxed);
        emit::gauge(RATE_LIMIT_LEASE_TOKENS, self.labels(), f64::from(granted));
        if !self.leasing.swap(true, AcqRel) {
            emit::gauge(RATE_LIMIT_SHARED_FALLBACK, self.labels(), 0.0);
        }
    }

    /// Redis did not answer: the replica falls back to its share.
    pub(super) fn alone(&self) {
        let now = self.clock.now();
        let replicas = self.replicas.load(Relaxed);
        self.with_stock(|stock| stock.alone(&self.plan, replicas, now));
        if self.leasing.swap(false, AcqRel) {
            emit::gauge(RATE_LIMIT_SHARED_FALLBACK, self.labels(), 1.0);
        }
    }

    pub(super) fn round_trip(&self) {
        self.round_trips.fetch_add(1, Relaxed);
        emit::increment_unscoped(RATE_LIMIT_REDIS_ROUND_TRIPS_TOTAL, self.labels(), &[]);
    }

    /// The report of an admitted call.
    pub(super) fn admitted_report(&self) {
        report::rate_admitted(&self.report);
    }
}
