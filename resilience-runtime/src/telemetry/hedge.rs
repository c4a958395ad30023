//! A hedged call counted in `http_client_hedges_total`: the public face of
//! the retry core's hedging, which reports each hedge through a hook.

use std::future::Future;

use super::{HEDGES_TOTAL, Labels, emit};
use crate::retry::{Classify, FromRuntimeError, Hedge, Policy};

impl Policy {
    /// Runs `op` hedged by `hedge` under this policy's `max_elapsed` and
    /// retry budget; see the [rules](crate::retry::Hedge) for the
    /// rules. The policy's attempt count, backoff and per-attempt timeout
    /// do not apply: the hedge's `max` and `delay` take their place.
    ///
    /// Each attempt after the first is counted in
    /// [`http_client_hedges_total`](HEDGES_TOTAL), labelled with
    /// [`Labels::of`] the hedge's name.
    pub async fn hedge<F, Fut, T, E>(&self, hedge: Hedge, op: F) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify + FromRuntimeError,
    {
        let counted = || emit::increment(HEDGES_TOTAL, Labels::of(hedge.name()), &[]);
        self.hedge_with(hedge, op, counted).await
    }
}
