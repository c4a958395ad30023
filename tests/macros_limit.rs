//! `#[retry(limit = "…", priority = "…")]`: each attempt takes a slot of
//! the registry's load limiter of that name (an adaptive limit at Netflix's
//! Vegas defaults when none is configured: a limit of 20), so the calls
//! past it are shed with `Error::Overloaded`, and not retried.
//! `#[circuit_breaker(limit = "…", priority = "…")]` does the same for a fn
//! without a `#[retry]`: its one call takes the slot, inside the breaker,
//! which counts a shed call for nothing.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use resilience::{Error, circuit_breaker, retry};

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

static LEDGER_CALLS: AtomicU32 = AtomicU32::new(0);

// No `#[retry]`: the breaker's one call takes the slot. A breaker that
// counted shed calls as failures would open at once (2 calls, half
// failed).
#[circuit_breaker(name = "ledger", min = 2, ratio = 0.5, limit = "ledger")]
async fn get_balance() -> Result<u32, Error> {
    LEDGER_CALLS.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(7)
}

#[circuit_breaker(
    name = "ledger-critical",
    limit = "ledger-critical",
    priority = "critical"
)]
async fn get_balance_critical() -> Result<u32, Error> {
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(7)
}

#[circuit_breaker(name = "prices", limit = "prices", fallback = cached_price)]
async fn get_price() -> Result<u32, Error> {
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(7)
}

/// The price last seen: the fallback of a call the limit shed.
async fn cached_price(error: Error) -> Result<u32, Error> {
    match error {
        Error::Overloaded(_) => Ok(1),
        other => Err(other),
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
                assert!(
                    ["inventory", "ledger"]
                        .iter()
                        .any(|name| o.limiter().starts_with(name)),
                    "{o:?}"
                );
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

static ENTERED_SCOPED: AtomicU32 = AtomicU32::new(0);

#[retry(limit = "inventory-scoped", initial = "10ms")]
async fn get_stock_scoped() -> Result<u32, Error> {
    ENTERED_SCOPED.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(7)
}

/// One fn, declared at the default priority, its calls arriving at once:
/// the default calls stop at 18 of the 20 slots, and the calls its caller
/// sends as critical (`limit::with_priority`) take the last 2.
#[tokio::test(start_paused = true)]
async fn a_call_can_be_sent_as_critical_without_a_second_fn() {
    use resilience::limit::{Priority, with_priority};

    let default: Vec<_> = (0..25).map(|_| tokio::spawn(get_stock_scoped())).collect();
    let critical: Vec<_> = (0..25)
        .map(|_| tokio::spawn(with_priority(Priority::Critical, get_stock_scoped())))
        .collect();
    let count = |tasks: Vec<tokio::task::JoinHandle<Result<u32, Error>>>| async move {
        let mut ok = 0;
        for task in tasks {
            ok += usize::from(task.await.unwrap().is_ok());
        }
        ok
    };
    assert_eq!(count(default).await, 18);
    assert_eq!(count(critical).await, 2);
    assert_eq!(ENTERED_SCOPED.load(Ordering::SeqCst), 20);
}

#[tokio::test(start_paused = true)]
async fn each_attempt_takes_and_frees_a_slot() {
    assert_eq!(get_flaky().await.unwrap(), 1);
    assert_eq!(ATTEMPTS.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_breaker_alone_takes_a_slot_per_call_and_counts_a_shed_call_for_nothing() {
    // 60 calls at once: 18 slots at default priority, 42 shed (70 %).
    assert_eq!(burst(60, get_balance).await, (18, 42));
    assert_eq!(
        LEDGER_CALLS.load(Ordering::SeqCst),
        18,
        "a shed call never runs"
    );
    // Not the dependency's failure: the breaker (min 2, ratio 0.5) is
    // still closed, and the next call goes through.
    assert_eq!(get_balance().await, Ok(7));
    assert_eq!(LEDGER_CALLS.load(Ordering::SeqCst), 19);
    // Critical calls may fill all 20.
    assert_eq!(burst(25, get_balance_critical).await, (20, 5));
}

#[tokio::test(start_paused = true)]
async fn the_fallback_answers_a_call_the_limit_shed() {
    let tasks: Vec<_> = (0..25).map(|_| tokio::spawn(get_price())).collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap().unwrap());
    }
    assert_eq!(answers.iter().filter(|a| **a == 7).count(), 18);
    assert_eq!(answers.iter().filter(|a| **a == 1).count(), 7);
}
