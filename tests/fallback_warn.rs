//! A stale answer is logged at WARN (`resilience::guide`: fallbacks), by
//! the `fallback =` fn's site and by `LastGood::or_stale`. Alone in its
//! binary: tracing caches a callsite's interest process-wide, so a test
//! thread without a subscriber hitting the same callsites first could hide
//! the events from this one.

mod macros_common;

use macros_common::{ClientError, Events, Script};
use resilience::circuit_breaker;
use resilience::fallback::{LastGood, MaybeStale};

struct Rates {
    script: Script,
    last_good: LastGood<&'static str, u32>,
}

impl Rates {
    #[circuit_breaker(name = "warn-rates", min = 2, ratio = 0.5, fallback = Self::stale_rate)]
    async fn rate(&self, pair: &'static str) -> Result<MaybeStale<u32>, ClientError> {
        self.script.send().await?;
        Ok(self.last_good.fresh(pair, 108))
    }

    async fn stale_rate(
        &self,
        pair: &'static str,
        error: ClientError,
    ) -> Result<MaybeStale<u32>, ClientError> {
        self.last_good.stale(&pair).ok_or(error)
    }
}

#[tokio::test(start_paused = true)]
async fn every_stale_answer_is_logged_at_warn() {
    let warnings = Events::at(tracing::Level::WARN);
    let _subscriber = tracing::subscriber::set_default(warnings.clone());
    let rates = Rates {
        script: Script::new(&[200, 503]),
        last_good: LastGood::new("warn-rates"),
    };

    assert!(!rates.rate("EURUSD").await.unwrap().is_stale());
    // The 503, then a rejection by the open breaker: both stale.
    assert!(rates.rate("EURUSD").await.unwrap().is_stale());
    assert!(rates.rate("EURUSD").await.unwrap().is_stale());
    assert_eq!(
        warnings.count(&[
            "answered by a fallback",
            "target=\"warn-rates\"",
            "kind=\"stale\""
        ]),
        2,
        "{:#?}",
        warnings.lines()
    );

    // By hand: `or_stale` logs its stale answer too.
    let by_hand: LastGood<u8, &str> = LastGood::new("warn-by-hand");
    let _ = by_hand.or_stale(1, Ok::<_, ClientError>("v1"));
    let answer = by_hand.or_stale(1, Err(ClientError::Status(502))).unwrap();
    assert!(answer.is_stale());
    assert_eq!(
        warnings.count(&[
            "answered by a fallback",
            "target=\"warn-by-hand\"",
            "kind=\"stale\""
        ]),
        1,
        "{:#?}",
        warnings.lines()
    );
}
