//! What the tickers drive through time: a breaker, or a time window with
//! no breaker around it. Its own file, so that the tickers and what they
//! drive depend on it rather than on each other.

use tokio::time::Instant;

use super::sync::AtomicU64;

/// What the tickers drive through time.
// Under loom no ticker is built: only `maintain` and `origin` are used.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) trait Ticked: Send + Sync {
    /// The word whose `PRECISE`, `NO_TICKER` and `THREAD` bits the tickers
    /// own (see [the module](super)).
    fn word(&self) -> &AtomicU64;
    /// The instant its nanoseconds count from.
    fn origin(&self) -> Instant;
    /// Nanoseconds on tokio's clock since `origin`.
    fn now(&self) -> u64 {
        crate::clock::duration_nanos(Instant::now().saturating_duration_since(self.origin()))
    }
    /// Does what is due by `now`.
    fn maintain(&self, now: u64);
    /// When it next needs the ticker, in nanoseconds since `origin`.
    fn next_event(&self, now: u64) -> u64;
}
