//! A sliding time window with no breaker around it, driven through time by
//! the breakers' tickers: the retry budget's deposits.
//!
//! Counting is a breaker's closed path: one plain store on the calling
//! thread's stripe, no clock read. The window's buckets are moved at their
//! boundaries by the ticker of the runtime the window was first used on
//! (or, outside any runtime, by the ticker thread), so that a count leaves
//! the window when its bucket does, however long nobody reads it.

use std::sync::Arc;
#[cfg(not(loom))]
use std::sync::Weak;
use std::time::Duration;

use tokio::time::Instant;

use super::sync::{AtomicU64, Ordering::*};
use super::ticked::Ticked;
use super::window::SlidingWindow;
use super::{BUCKETS, NO_TICKER, THREAD};
#[cfg(not(loom))]
use super::{thread_ticker, ticker};

/// Counts over the last `width` of time, in [`BUCKETS`] buckets.
#[derive(Debug)]
pub(crate) struct TimedWindow {
    /// Only the tickers' bits (`NO_TICKER`, `THREAD`, `PRECISE`) are used.
    word: AtomicU64,
    window: SlidingWindow,
    origin: Instant,
    bucket_width: u64,
}

impl TimedWindow {
    /// A window over the last `width`, driven by no ticker yet.
    pub(crate) fn new(width: Duration) -> Arc<TimedWindow> {
        Arc::new(TimedWindow {
            word: AtomicU64::new(NO_TICKER),
            window: SlidingWindow::new(),
            origin: Instant::now(),
            bucket_width: (width.as_nanos() / BUCKETS as u128).clamp(1, u64::MAX as u128) as u64,
        })
    }

    /// Counts one event: a plain store on this thread's stripe, and at the
    /// first call (or after the ticker's runtime shut down) a look for a
    /// ticker.
    #[inline]
    pub(crate) fn add(self: &Arc<Self>) {
        if self.word.load(Relaxed) & NO_TICKER != 0 {
            self.find_ticker();
        }
        self.window.add_success();
    }

    /// The events of the window at `now` (nanoseconds since the origin),
    /// the window moved there first.
    pub(crate) fn count_at(self: &Arc<Self>, now: u64) -> u64 {
        if self.word.load(Acquire) & THREAD != 0 {
            // Inside a runtime, whose clock may be paused: its ticker
            // takes over from the thread.
            self.find_ticker();
        }
        self.maintain(now);
        self.window.counts(self.window.totals()).calls
    }

    /// The width of a bucket, in nanoseconds.
    pub(crate) fn bucket_width(&self) -> u64 {
        self.bucket_width
    }

    /// Hands the window to the current runtime's ticker, or outside any
    /// runtime to the ticker thread.
    #[cold]
    #[cfg(not(loom))]
    fn find_ticker(self: &Arc<Self>) {
        let weak = Arc::downgrade(self) as Weak<dyn Ticked>;
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let before = self.word.fetch_and(!(NO_TICKER | THREAD), AcqRel);
                if before & (NO_TICKER | THREAD) != 0 {
                    ticker::register(&handle, weak);
                }
            }
            Err(_) => {
                if thread_ticker::running()
                    && thread_ticker::claim(&**self)
                    && !thread_ticker::register(weak)
                {
                    thread_ticker::unclaim(&**self);
                }
            }
        }
    }

    #[cfg(loom)]
    fn find_ticker(self: &Arc<Self>) {}
}

impl Ticked for TimedWindow {
    fn word(&self) -> &AtomicU64 {
        &self.word
    }

    fn origin(&self) -> Instant {
        self.origin
    }

    fn maintain(&self, now: u64) {
        let epoch = now / self.bucket_width;
        if epoch > self.window.epoch() {
            self.window.rotate(epoch, self.window.totals());
        }
    }

    fn next_event(&self, now: u64) -> u64 {
        (now / self.bucket_width + 1).saturating_mul(self.bucket_width)
    }
}
