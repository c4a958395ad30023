//! Striped counters and the windows built on them, moved through time by
//! tickers: what the circuit breaker counts calls with, and the retry
//! budget its deposits.
//!
//! - `owner`: which stripe of every window a thread writes;
//! - `window`: the sliding window of striped counters (and the count
//!   window of the last n calls);
//! - `timed`: a sliding time window with no breaker around it;
//! - `ticker`, `thread_ticker`: the task of each Tokio runtime, and the
//!   thread outside any runtime, that move anything [`Ticked`](ticked::Ticked)
//!   to its next bucket boundary;
//! - `sync`: `std::sync`, or `loom::sync` in the model test.
//!
//! A ticked thing keeps the tickers' three bits, below, in an atomic word
//! of its own (a breaker in its state word, beside its state).

pub(crate) mod owner;
pub(crate) mod sync;
#[cfg(not(loom))]
pub(crate) mod thread_ticker;
pub(crate) mod ticked;
#[cfg(not(loom))]
pub(crate) mod ticker;
pub(crate) mod timed;
pub(crate) mod window;

/// The number of buckets a window is made of.
pub(crate) const BUCKETS: usize = 10;

/// Set by a ticker just before a bucket boundary or the end of a cooldown:
/// calls read the clock.
pub(crate) const PRECISE: u64 = 0b1000;
/// No ticker drives the word's owner: calls read the clock, and the next
/// one looks for a ticker.
pub(crate) const NO_TICKER: u64 = 0b1_0000;
/// The ticker thread of callers without a runtime drives the word's owner.
pub(crate) const THREAD: u64 = 0b10_0000;
