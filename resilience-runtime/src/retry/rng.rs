//! The random source of jitter: the thread's own generator, or a test's
//! seeded one while its guard lives.

use rand::RngCore;

/// The default random source for jitter: the thread's generator (a
/// `SmallRng` seeded from the operating system once per thread: a pause
/// needs spreading, not secrecy), asked only when a pause is drawn, or the
/// seeded one of [`seed_jitter`] while its guard lives. Zero-sized, so a
/// chain carries no generator and a call whose first attempt succeeds
/// never touches one.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultRng;

thread_local! {
    static SEEDED: std::cell::RefCell<Option<rand::rngs::SmallRng>> =
        const { std::cell::RefCell::new(None) };
    static THREAD: std::cell::RefCell<Option<rand::rngs::SmallRng>> =
        const { std::cell::RefCell::new(None) };
}

/// Draws from the thread's own generator, never from a test's
/// [`seed_jitter`]: for jitter outside a chain and for tokens that must
/// differ between threads. Not for secrets: an idempotency key comes from
/// the operating system's generator.
pub(crate) fn thread_rng<T>(draw: impl FnOnce(&mut rand::rngs::SmallRng) -> T) -> T {
    THREAD.with_borrow_mut(|rng| draw(rng.get_or_insert_with(os_seeded)))
}

/// A generator seeded from the operating system or, should it fail (never
/// seen on a supported platform), from the clock and the thread's stack
/// address, which still spreads the pauses of different threads.
fn os_seeded() -> rand::rngs::SmallRng {
    use rand::SeedableRng;
    rand::rngs::SmallRng::try_from_os_rng().unwrap_or_else(|_| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as u64);
        let here = std::ptr::addr_of!(nanos) as usize as u64;
        rand::rngs::SmallRng::seed_from_u64(nanos ^ here.rotate_left(32))
    })
}

impl DefaultRng {
    fn with<T>(draw: impl FnOnce(&mut dyn RngCore) -> T) -> T {
        let mut draw = Some(draw);
        let seeded = SEEDED.with_borrow_mut(|seeded| {
            seeded
                .as_mut()
                .map(|rng| (draw.take().expect("drawn once"))(rng))
        });
        match seeded {
            Some(value) => value,
            None => thread_rng(|rng| (draw.take().expect("drawn once"))(rng)),
        }
    }
}

impl RngCore for DefaultRng {
    fn next_u32(&mut self) -> u32 {
        Self::with(|rng| rng.next_u32())
    }
    fn next_u64(&mut self) -> u64 {
        Self::with(|rng| rng.next_u64())
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        Self::with(|rng| rng.fill_bytes(dst))
    }
}

/// Makes the jitter of every retry chain, hedge, HTTP layer and consumer
/// polled on this thread draw from a generator seeded with `seed`, until
/// the guard is dropped: the pauses of a test become the same on every
/// run.
///
/// The seed covers the calling thread, which is every task of a
/// current-thread runtime (`#[tokio::test]`'s default); on a multi-thread
/// runtime, chains that run on its workers draw as usual. Guards nest: the
/// inner one's seed applies until it is dropped.
///
/// ```
/// use resilience::retry::{Policy, seed_jitter};
/// use std::time::Duration;
/// use tokio::time::Instant;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// async fn pauses() -> Vec<Duration> {
///     let mut at = Vec::new();
///     let _ = Policy::http()
///         .retry(|| {
///             at.push(Instant::now());
///             async { Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionReset)) }
///         })
///         .await;
///     at.windows(2).map(|w| w[1] - w[0]).collect()
/// }
/// let first = { let _seed = seed_jitter(7); pauses().await };
/// let again = { let _seed = seed_jitter(7); pauses().await };
/// assert_eq!(first, again);
/// # }
/// ```
pub fn seed_jitter(seed: u64) -> SeededJitter {
    use rand::SeedableRng;
    let previous =
        SEEDED.with_borrow_mut(|seeded| seeded.replace(rand::rngs::SmallRng::seed_from_u64(seed)));
    SeededJitter {
        previous,
        _not_send: std::marker::PhantomData,
    }
}

/// The guard of [`seed_jitter`]: while it lives, jitter on this thread is
/// drawn from the seeded generator.
#[must_use = "the seed applies only while the guard lives"]
#[derive(Debug)]
pub struct SeededJitter {
    previous: Option<rand::rngs::SmallRng>,
    /// The seed is the thread's: the guard stays on it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for SeededJitter {
    fn drop(&mut self) {
        let previous = self.previous.take();
        SEEDED.with_borrow_mut(|seeded| *seeded = previous);
    }
}
