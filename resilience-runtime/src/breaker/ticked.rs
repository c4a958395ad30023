//! How the tickers drive a breaker: what a [`Ticked`] breaker does at its
//! events, and when its next one is due.

use tokio::time::Instant;

use super::Machine;
use super::config::Window;
use super::state::StateWord;
use crate::striped::sync::{AtomicU64, Ordering::*};
use crate::striped::ticker::{EARLY, Ticked};

impl Ticked for Machine {
    fn word(&self) -> &AtomicU64 {
        &self.state
    }
    fn origin(&self) -> Instant {
        self.setup.origin
    }
    fn maintain(&self, now: u64) {
        Machine::maintain(self, now);
    }
    fn next_event(&self, now: u64) -> u64 {
        self.next_breaker_event(now)
    }
}

impl Machine {
    /// When the ticker must next wake: the next bucket boundary, the end of
    /// the cooldown, and in any case before a cooldown that starts now
    /// could end.
    fn next_breaker_event(&self, now: u64) -> u64 {
        let cooldown = crate::clock::duration_nanos(self.setup.config.cooldown());
        let mut next = now.saturating_add((cooldown / 2).max(EARLY));
        if let Window::Time(_) = self.setup.config.window() {
            next = next
                .min((now / self.setup.bucket_width + 1).saturating_mul(self.setup.bucket_width));
        }
        let word = StateWord(self.state.load(Acquire));
        if word.cooling_down() {
            let until = self.open_until.load(Acquire);
            if until > now {
                next = next.min(until);
            }
        }
        next.max(now + 1)
    }
}
