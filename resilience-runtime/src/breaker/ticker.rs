//! The task that moves a breaker through time, so that calls do not have
//! to read the clock.
//!
//! It wakes at each bucket boundary of a time window and at the end of each
//! cooldown. A millisecond before each of those instants it raises
//! `PRECISE`, which sends calls down the slow path where they read the
//! clock: under tokio's paused clock, a test that sleeps exactly to the end
//! of the cooldown may be woken before the ticker, and must still see the
//! breaker half-open.

use std::sync::Weak;
use std::time::Duration;

use tokio::time::sleep_until;

use super::Inner;
use super::config::Window;
use super::state::{NO_TICKER, OPEN, PRECISE, Word};
use super::sync::Ordering::*;

const EARLY: u64 = 1_000_000;

pub(super) async fn run(breaker: Weak<Inner>) {
    let _guard = Guard(breaker.clone());
    loop {
        let (early, at) = {
            let Some(inner) = breaker.upgrade() else {
                return;
            };
            let now = inner.now();
            inner.maintain(now);
            let next = inner.next_event(now);
            let at = |nanos: u64| inner.origin + Duration::from_nanos(nanos);
            (at(next.saturating_sub(EARLY).max(now)), at(next))
        };
        sleep_until(early).await;
        match breaker.upgrade() {
            Some(inner) => inner.state.fetch_or(PRECISE, AcqRel),
            None => return,
        };
        sleep_until(at).await;
        let Some(inner) = breaker.upgrade() else {
            return;
        };
        inner.maintain(inner.now());
        inner.state.fetch_and(!PRECISE, AcqRel);
    }
}

impl Inner {
    /// When the ticker must next wake: the next bucket boundary, the end of
    /// the cooldown, and in any case before a cooldown that starts now
    /// could end.
    fn next_event(&self, now: u64) -> u64 {
        let cooldown = super::duration_nanos(self.config.cooldown());
        let mut next = now.saturating_add((cooldown / 2).max(EARLY));
        if let Window::Time(_) = self.config.window() {
            next = next.min((now / self.bucket_width + 1).saturating_mul(self.bucket_width));
        }
        let word = Word(self.state.load(Acquire));
        if word.kind() == OPEN && !word.forced() {
            let until = self.open_until.load(Acquire);
            if until > now {
                next = next.min(until);
            }
        }
        next.max(now + 1)
    }
}

/// Marks the breaker as driven by no ticker when the task ends, including
/// when its runtime shuts down and drops it: the next call starts another.
struct Guard(Weak<Inner>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            inner.state.fetch_or(NO_TICKER, AcqRel);
            inner.state.fetch_and(!PRECISE, AcqRel);
        }
    }
}
