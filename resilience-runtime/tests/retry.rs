//! The retry executor on tokio's paused clock, with seeded jitter.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::SmallRng;
use resilience_runtime::retry::{Classify, Event, GiveUp, HttpStatus, Policy, Verdict};
use resilience_runtime::{Error, deadline};
use tokio::time::Instant;

/// A client error as an application would write it.
#[derive(Debug, Clone, PartialEq)]
enum ClientError {
    Status(u16, Option<Duration>),
    Runtime(Error),
}

impl Classify for ClientError {
    fn classify(&self) -> Verdict {
        match self {
            ClientError::Status(code, retry_after) => {
                HttpStatus(*code).with_retry_after(*retry_after)
            }
            ClientError::Runtime(err) => err.classify(),
        }
    }
}

impl From<Error> for ClientError {
    fn from(err: Error) -> Self {
        ClientError::Runtime(err)
    }
}

/// A scripted dependency: answers the next status of its script on each call
/// (200 once the script is used up) and records when each call started.
/// A scripted answer: a status and its `Retry-After`, if any.
type Answer = (u16, Option<Duration>);

#[derive(Clone, Default)]
struct Script {
    statuses: Rc<RefCell<Vec<Answer>>>,
    calls: Rc<RefCell<Vec<Instant>>>,
}

impl Script {
    fn new(statuses: &[u16]) -> Self {
        let script = Self::default();
        script
            .statuses
            .borrow_mut()
            .extend(statuses.iter().rev().map(|s| (*s, None)));
        script
    }

    fn with_retry_after(status: u16, after: Duration) -> Self {
        let script = Self::default();
        script.statuses.borrow_mut().push((status, Some(after)));
        script
    }

    async fn call(&self) -> Result<u16, ClientError> {
        self.calls.borrow_mut().push(Instant::now());
        match self.statuses.borrow_mut().pop() {
            None | Some((200, _)) => Ok(200),
            Some((status, retry_after)) => Err(ClientError::Status(status, retry_after)),
        }
    }

    fn calls(&self) -> Vec<Duration> {
        let calls = self.calls.borrow();
        calls.iter().map(|at| *at - calls[0]).collect()
    }
}

type Log = Rc<RefCell<Vec<String>>>;

fn log_events(log: &Log) -> impl FnMut(&Event<'_, ClientError>) + use<> {
    let log = log.clone();
    move |event| {
        let line = match event {
            Event::Success { attempt } => format!("success {attempt}"),
            Event::Retry { attempt, error, .. } => format!("retry {attempt} {error:?}"),
            Event::GaveUp {
                attempt, reason, ..
            } => format!("gave up {attempt} {}", reason.as_str()),
            _ => format!("{event:?}"),
        };
        log.borrow_mut().push(line);
    }
}

#[tokio::test(start_paused = true)]
async fn recovers_after_502_502_with_exactly_three_attempts_inside_spec_bounds() {
    for seed in 0..50 {
        let script = Script::new(&[502, 502, 200]);
        let log = Log::default();
        let status = Policy::http()
            .retry(|| {
                let script = script.clone();
                async move { script.call().await }
            })
            .notify(log_events(&log))
            .with_rng(SmallRng::seed_from_u64(seed))
            .await;
        assert_eq!(status, Ok(200));
        let calls = script.calls();
        assert_eq!(calls.len(), 3, "seed {seed}");
        // 100 ms and 200 ms, each ±25 %.
        let first = calls[1];
        let second = calls[2] - calls[1];
        assert!(
            first >= Duration::from_millis(75) && first <= Duration::from_millis(125),
            "{first:?}"
        );
        assert!(
            second >= Duration::from_millis(150) && second <= Duration::from_millis(250),
            "{second:?}"
        );
        assert_eq!(
            *log.borrow(),
            [
                "retry 1 Status(502, None)",
                "retry 2 Status(502, None)",
                "success 3"
            ]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_400_is_tried_once() {
    let script = Script::new(&[400]);
    let log = Log::default();
    let result = Policy::http()
        .retry(|| script.clone().call_owned())
        .notify(log_events(&log))
        .await;
    assert_eq!(result, Err(ClientError::Status(400, None)));
    assert_eq!(script.calls().len(), 1);
    assert_eq!(*log.borrow(), ["gave up 1 permanent"]);
}

impl Script {
    async fn call_owned(self) -> Result<u16, ClientError> {
        self.call().await
    }
}

#[tokio::test(start_paused = true)]
async fn exhaustion_returns_the_last_error_after_max_attempts() {
    let script = Script::new(&[503, 502, 504, 200]);
    let log = Log::default();
    let result = Policy::http()
        .retry(|| script.clone().call_owned())
        .notify(log_events(&log))
        .await;
    assert_eq!(result, Err(ClientError::Status(504, None)));
    assert_eq!(script.calls().len(), 3);
    assert_eq!(log.borrow().last().unwrap(), "gave up 3 exhausted");
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_waits_at_least_that_long() {
    let script = Script::with_retry_after(429, Duration::from_secs(1));
    let result = Policy::http().retry(|| script.clone().call_owned()).await;
    assert_eq!(result, Ok(200));
    let calls = script.calls();
    assert_eq!(calls.len(), 2);
    assert!(calls[1] >= Duration::from_secs(1), "{:?}", calls[1]);
    // max(backoff, Retry-After): the 100 ms backoff does not add to it.
    assert!(calls[1] < Duration::from_millis(1100), "{:?}", calls[1]);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_beyond_the_budget_gives_up_at_once() {
    let script = Script::with_retry_after(503, Duration::from_secs(60));
    let log = Log::default();
    let start = Instant::now();
    let result = Policy::http()
        .retry(|| script.clone().call_owned())
        .notify(log_events(&log))
        .await;
    assert_eq!(
        result,
        Err(ClientError::Status(503, Some(Duration::from_secs(60))))
    );
    assert_eq!(start.elapsed(), Duration::ZERO, "must not sleep uselessly");
    assert_eq!(*log.borrow(), ["gave up 1 elapsed"]);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_shorter_than_the_schedule_stops_early_with_a_deadline_error() {
    let script = Script::new(&[502; 10]);
    let log = Log::default();
    let policy = Policy::builder().with_max_attempts(10).build().unwrap();
    let start = Instant::now();
    let result = deadline::with_timeout(Duration::from_millis(250), async {
        policy
            .retry(|| script.clone().call_owned())
            .notify(log_events(&log))
            .with_rng(SmallRng::seed_from_u64(1))
            .await
    })
    .await;
    assert_eq!(
        result,
        Err(ClientError::Runtime(Error::deadline_exceeded(2)))
    );
    // Pauses of ~100 and ~200 ms: the second pause would cross the deadline.
    assert_eq!(script.calls().len(), 2);
    assert!(
        start.elapsed() < Duration::from_millis(250),
        "never sleeps past the deadline"
    );
    assert_eq!(log.borrow().last().unwrap(), "gave up 2 deadline");
}

#[tokio::test(start_paused = true)]
async fn a_passed_deadline_starts_no_attempt() {
    let script = Script::new(&[]);
    let result = deadline::with_timeout(Duration::from_millis(10), async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Policy::http().retry(|| script.clone().call_owned()).await
    })
    .await;
    assert_eq!(
        result,
        Err(ClientError::Runtime(Error::deadline_exceeded(0)))
    );
    assert!(script.calls().is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_deadline_cuts_the_attempt_in_flight() {
    let start = Instant::now();
    let result: Result<(), ClientError> =
        deadline::with_timeout(Duration::from_millis(300), async {
            Policy::http()
                .retry(|| async {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    Ok(())
                })
                .await
        })
        .await;
    assert_eq!(
        result,
        Err(ClientError::Runtime(Error::deadline_exceeded(1)))
    );
    assert_eq!(start.elapsed(), Duration::from_millis(300));
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_attempt_is_retried_in_a_fresh_slot() {
    let attempts = Rc::new(RefCell::new(0));
    let policy = Policy::builder()
        .with_attempt_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let start = Instant::now();
    let result: Result<u32, ClientError> = policy
        .retry(|| {
            let attempts = attempts.clone();
            async move {
                *attempts.borrow_mut() += 1;
                let n = *attempts.borrow();
                if n == 1 {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
                Ok(n)
            }
        })
        .with_rng(SmallRng::seed_from_u64(3))
        .await;
    assert_eq!(result, Ok(2));
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(575) && elapsed <= Duration::from_millis(625),
        "{elapsed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_attempt_timeout_is_capped_by_the_time_left_before_the_deadline() {
    let policy = Policy::builder()
        .with_attempt_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let start = Instant::now();
    let result: Result<(), ClientError> =
        deadline::with_timeout(Duration::from_millis(700), async {
            policy
                .retry(|| async {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Ok(())
                })
                .await
        })
        .await;
    assert_eq!(
        result,
        Err(ClientError::Runtime(Error::deadline_exceeded(1)))
    );
    assert_eq!(start.elapsed(), Duration::from_millis(700));
}

#[tokio::test(start_paused = true)]
async fn max_elapsed_bounds_slow_attempts_too() {
    let calls = Rc::new(RefCell::new(0));
    let policy = Policy::builder().with_max_attempts(100).build().unwrap();
    let log = Log::default();
    let start = Instant::now();
    let result: Result<(), ClientError> = policy
        .retry(|| {
            let calls = calls.clone();
            async move {
                *calls.borrow_mut() += 1;
                tokio::time::sleep(Duration::from_secs(2)).await;
                Err(ClientError::Status(503, None))
            }
        })
        .notify(log_events(&log))
        .await;
    assert_eq!(
        result,
        Err(ClientError::Runtime(Error::max_elapsed_exceeded(
            Duration::from_secs(5),
            3
        )))
    );
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    // 0–2 s, pause, 2.1–4.1 s, pause, then the third attempt is cut at 5 s.
    assert_eq!(*calls.borrow(), 3);
    assert_eq!(log.borrow().last().unwrap(), "gave up 3 elapsed");
}

#[tokio::test(start_paused = true)]
async fn dropping_the_chain_mid_pause_stops_every_later_attempt() {
    let script = Script::new(&[502, 502, 502]);
    let chain = Policy::http().retry(|| script.clone().call_owned());
    let cut = tokio::time::timeout(Duration::from_millis(50), chain).await;
    assert!(cut.is_err(), "the chain was still pausing");
    assert_eq!(script.calls().len(), 1);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        script.calls().len(),
        1,
        "no attempt after the chain was dropped"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_site_predicate_overrides_the_classifier() {
    let script = Script::new(&[404, 404, 200]);
    // "404 means not replicated yet" at this one call site.
    let result = Policy::http()
        .retry(|| script.clone().call_owned())
        .when(|err: &ClientError| matches!(err, ClientError::Status(404, _)))
        .await;
    assert_eq!(result, Ok(200));
    assert_eq!(script.calls().len(), 3);

    let script = Script::new(&[502]);
    let result = Policy::http()
        .retry(|| script.clone().call_owned())
        .when(|_: &ClientError| Verdict::Permanent)
        .await;
    assert_eq!(result, Err(ClientError::Status(502, None)));
    assert_eq!(script.calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn give_up_reasons_are_reported_once_per_chain() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let seen2 = seen.clone();
    let script = Script::new(&[502, 502, 502]);
    let _ = Policy::http()
        .retry(|| script.clone().call_owned())
        .notify(move |event: &Event<'_, ClientError>| {
            if let Event::GaveUp {
                reason, attempt, ..
            } = event
            {
                seen2.borrow_mut().push((*attempt, *reason));
            }
        })
        .await;
    assert_eq!(*seen.borrow(), [(3, GiveUp::Exhausted)]);
}
