//! A breaker shared by the replicas of a service through Redis, off the
//! call path.
//!
//! The call path is the local breaker's, unchanged: it never reads this
//! module's state but for the probe limit of a half-open breaker (a cold
//! path). A background task per shared breaker ([`sync`]) exchanges the
//! window's counts and the state with the fleet every sync interval, and
//! moves the local breaker to the fleet's state.
//!
//! What the local breaker reads from here:
//!
//! - [`Link::probe_limit`]: while Redis answers, a half-open breaker admits
//!   only the probes whose fleet-wide tokens this replica holds (the fleet
//!   sends `half_open` probes in all); while it does not, its own
//!   `half_open`.
//! - [`Link::wake`]: each local transition wakes the task, so that a local
//!   trip is published at once rather than at the next sync.

pub(super) mod script;

use std::time::Duration;

use tokio::sync::Notify;

use super::Fleet;
use super::config::Sharing;
use super::sync::{AtomicBool, AtomicU64, Ordering::*};
use crate::telemetry::Labels;

/// What a shared breaker and its sync task share.
pub(crate) struct Link {
    pub(crate) sharing: Sharing,
    /// Redis answered the last sync.
    pub(super) joined: AtomicBool,
    /// `half-open generation << 32 | probes`: how many probes the fleet
    /// granted this replica, for the half-open period of that generation.
    pub(super) grant: AtomicU64,
    /// A sync task runs for this breaker.
    pub(super) syncing: AtomicBool,
    pub(super) wake: Notify,
    /// The Redis keys' common prefix, `resilience:breaker:{service/name}`.
    pub(super) prefix: String,
}

impl Link {
    pub(crate) fn new(sharing: Sharing, labels: Labels) -> Link {
        crate::breaker::report::breaker_shared_fallback(labels, true);
        Link {
            sharing,
            joined: AtomicBool::new(false),
            grant: AtomicU64::new(0),
            syncing: AtomicBool::new(false),
            wake: Notify::new(),
            // The braces are a Redis Cluster hash tag: every key of one
            // breaker lands on the same shard, as its Lua script needs.
            prefix: format!(
                "resilience:breaker:{{{}/{}}}",
                labels.service(),
                labels.target()
            ),
        }
    }

    /// How many probes the half-open period of `generation` may have in
    /// flight or succeeded: the fleet's grant while joined, `half_open`
    /// while deciding alone.
    pub(crate) fn probe_limit(&self, generation: u32, half_open: u32) -> u32 {
        if !self.joined.load(Acquire) {
            return half_open;
        }
        let grant = self.grant.load(Acquire);
        if (grant >> 32) as u32 == generation {
            (grant as u32).min(half_open)
        } else {
            0
        }
    }

    /// A local transition: the task publishes it now.
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    pub(crate) fn fleet(&self) -> Fleet {
        if self.joined.load(Acquire) {
            Fleet::Joined
        } else {
            Fleet::Local
        }
    }

    pub(super) fn set_grant(&self, generation: u32, probes: u32) {
        self.grant
            .store((u64::from(generation) << 32) | u64::from(probes), Release);
    }

    pub(super) fn interval(&self) -> Duration {
        self.sharing.sync_interval()
    }
}
