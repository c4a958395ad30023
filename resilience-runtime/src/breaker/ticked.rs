//! How the tickers drive a breaker: what a [`Ticked`] breaker does at its
//! events, and when its next one is due.

use tokio::time::Instant;

use super::Inner;
use super::config::Window;
use super::state::Word;
use crate::striped::sync::{AtomicU64, Ordering::*};
use crate::striped::ticker::{EARLY, Ticked};

impl Ticked for Inner {
    fn word(&self) -> &AtomicU64 {
        &self.state
    }
    fn origin(&self) -> Instant {
        self.common.origin
    }
    fn maintain(&self, now: u64) {
        Inner::maintain(self, now);
    }
    fn next_event(&self, now: u64) -> u64 {
        self.next_breaker_event(now)
    }
}

impl Inner {
    /// When the ticker must next wake: the next bucket boundary, the end of
    /// the cooldown, and in any case before a cooldown that starts now
    /// could end.
    fn next_breaker_event(&self, now: u64) -> u64 {
        let cooldown = crate::clock::duration_nanos(self.common.config.cooldown());
        let mut next = now.saturating_add((cooldown / 2).max(EARLY));
        if let Window::Time(_) = self.common.config.window() {
            next = next
                .min((now / self.common.bucket_width + 1).saturating_mul(self.common.bucket_width));
        }
        let word = Word(self.state.load(Acquire));
        if word.cooling_down() {
            let until = self.open_until.load(Acquire);
            if until > now {
                next = next.min(until);
            }
        }
        next.max(now + 1)
    }
}
