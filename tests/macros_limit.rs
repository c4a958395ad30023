//! `#[retry(limit = "…", priority = "…")]`: each attempt takes a slot of
//! the registry's load limiter of that name (an adaptive limit at Netflix's
//! Vegas defaults when none is configured: a limit of 20), so the calls
//! past it are shed with `Error::Overloaded`, and not retried.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use resilience::{Error, retry};

static ENTERED: AtomicU32 = AtomicU32::new(0);

#[retry(limit = "inventory", initial = "10ms")]
async fn get_stock() -> Result<u32, Error> {
    ENTERED.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(7)
}

static ENTERED_CRITICAL: AtomicU32 = AtomicU32::new(0);

#[retry(limit = "inventory-critical", priority = "critical")]
async fn get_stock_critical() -> Result<u32, Error> {
    ENTERED_CRITICAL.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(7)
}

static ATTEMPTS: AtomicU32 = AtomicU32::new(0);

#[retry(limit = "flaky", initial = "10ms")]
async fn get_flaky() -> Result<u32, std::io::Error> {
    // The network call it stands for.
    tokio::task::yield_now().await;
    match ATTEMPTS.fetch_add(1, Ordering::SeqCst) {
        0 => Err(std::io::ErrorKind::ConnectionReset.into()),
        _ => Ok(1),
    }
}

async fn burst<F, Fut>(calls: usize, call: F) -> (usize, usize)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<u32, Error>> + Send + 'static,
{
    let tasks: Vec<_> = (0..calls).map(|_| tokio::spawn(call())).collect();
    let (mut ok, mut shed) = (0, 0);
    for task in tasks {
        match task.await.unwrap() {
            Ok(7) => ok += 1,
            Err(Error::Overloaded(o)) => {
                assert!(o.limiter().starts_with("inventory"));
                shed += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    (ok, shed)
}

#[tokio::test(start_paused = true)]
async fn calls_past_the_limit_are_shed_and_not_retried() {
    // Default priority: ⌈0.9 × 20⌉ = 18 slots of the limit of 20.
    assert_eq!(burst(25, get_stock).await, (18, 7));
    assert_eq!(
        ENTERED.load(Ordering::SeqCst),
        18,
        "a shed attempt is not retried"
    );
    // Critical calls may fill all 20.
    assert_eq!(burst(25, get_stock_critical).await, (20, 5));
    assert_eq!(ENTERED_CRITICAL.load(Ordering::SeqCst), 20);
}

#[tokio::test(start_paused = true)]
async fn each_attempt_takes_and_frees_a_slot() {
    assert_eq!(get_flaky().await.unwrap(), 1);
    assert_eq!(ATTEMPTS.load(Ordering::SeqCst), 2);
}
