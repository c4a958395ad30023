//! The metrics of each scenario, read back from `metrics-util`'s debugging
//! recorder installed for the test's thread only.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

use super::*;
use crate::breaker::report::{breaker_created, breaker_rejected, breaker_transition};
use crate::retry::{Classify, HttpStatus, Policy, Reason, Verdict};
use crate::{DependencyDown, Error, deadline};

const USER: Labels = Labels::new("checkout", "user");

/// A test's error: an HTTP status or the runtime's own error.
#[derive(Debug)]
enum Failed {
    Status(u16),
    Runtime(Error),
}

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Failed::Runtime(error)
    }
}

impl Classify for Failed {
    fn classify(&self) -> Verdict {
        match self {
            Failed::Status(code) => HttpStatus(*code).classify(),
            Failed::Runtime(error) => error.classify(),
        }
    }
    fn reason(&self) -> Option<Reason> {
        match self {
            Failed::Status(code) => HttpStatus(*code).reason(),
            Failed::Runtime(error) => error.reason(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Counter(u64),
    Gauge(f64),
    Histogram(Vec<f64>),
}

/// Every series as `name{label="value",…}` (labels sorted) → its value
/// since the previous read.
fn read(snapshotter: &Snapshotter) -> BTreeMap<String, Value> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<_> = key
                .labels()
                .map(|l| format!("{}=\"{}\"", l.key(), l.value()))
                .collect();
            labels.sort();
            let value = match value {
                DebugValue::Counter(n) => Value::Counter(n),
                DebugValue::Gauge(v) => Value::Gauge(v.into_inner()),
                DebugValue::Histogram(vs) => {
                    Value::Histogram(vs.into_iter().map(|v| v.into_inner()).collect())
                }
            };
            (format!("{}{{{}}}", key.name(), labels.join(",")), value)
        })
        .collect()
}

fn series(entries: &[(&str, Value)]) -> BTreeMap<String, Value> {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// Runs one observed call whose attempts answer `statuses` in turn (200 is
/// a success), returning its result.
async fn call(statuses: &[u16]) -> Result<u16, Failed> {
    let mut statuses = statuses.iter().copied();
    observe(
        USER,
        Policy::http()
            .retry(move || {
                let status = statuses.next().unwrap_or(200);
                async move {
                    match status {
                        200 => Ok(status),
                        failed => Err(Failed::Status(failed)),
                    }
                }
            })
            .notify_with(RetryMetrics::new(USER)),
    )
    .await
}

fn retries(attempt: &str, result: &str) -> String {
    format!(
        "http_client_retries_total{{attempt=\"{attempt}\",result=\"{result}\",service=\"checkout\",target=\"user\"}}"
    )
}

fn errors(reason: &str) -> String {
    format!("dependency_errors_total{{reason=\"{reason}\",service=\"checkout\",target=\"user\"}}")
}

fn duration(status: &str) -> String {
    format!(
        "http_client_request_duration_seconds{{service=\"checkout\",status=\"{status}\",target=\"user\"}}"
    )
}

/// The duration of the only sample of the histogram for `status`.
fn single_duration(read: &BTreeMap<String, Value>, status: &str) -> f64 {
    match read.get(&duration(status)) {
        Some(Value::Histogram(values)) if values.len() == 1 => values[0],
        other => panic!("expected one duration for {status}, got {other:?} in {read:#?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn two_502_then_200_is_two_retries_and_a_success() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    assert!(recorder_installed());

    assert_eq!(call(&[502, 502, 200]).await.unwrap(), 200);

    let mut read = read(&snapshotter);
    let elapsed = single_duration(&read, "ok");
    // Two pauses, 100 ms and 200 ms ±25 %, on the paused clock.
    assert!((0.225..=0.375).contains(&elapsed), "{elapsed}");
    read.remove(&duration("ok"));
    assert_eq!(
        read,
        series(&[
            (&retries("1", "retry"), Value::Counter(1)),
            (&retries("2", "retry"), Value::Counter(1)),
            (&retries("3", "success"), Value::Counter(1)),
            (&errors("5xx"), Value::Counter(2)),
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn three_502_is_exhausted_at_the_third_attempt() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    assert!(matches!(
        call(&[502, 503, 504]).await,
        Err(Failed::Status(504))
    ));

    let mut read = read(&snapshotter);
    single_duration(&read, "5xx");
    read.remove(&duration("5xx"));
    assert_eq!(
        read,
        series(&[
            (&retries("1", "retry"), Value::Counter(1)),
            (&retries("2", "retry"), Value::Counter(1)),
            (&retries("3", "exhausted"), Value::Counter(1)),
            (&errors("5xx"), Value::Counter(3)),
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_is_no_retry_and_no_dependency_error() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    assert!(matches!(call(&[503, 404]).await, Err(Failed::Status(404))));

    let mut read = read(&snapshotter);
    single_duration(&read, "error");
    read.remove(&duration("error"));
    assert_eq!(
        read,
        series(&[
            (&retries("1", "retry"), Value::Counter(1)),
            (&errors("5xx"), Value::Counter(1)),
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn a_permanent_server_error_is_still_the_dependencys_fault() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    assert!(matches!(call(&[501]).await, Err(Failed::Status(501))));

    let mut read = read(&snapshotter);
    single_duration(&read, "5xx");
    read.remove(&duration("5xx"));
    assert_eq!(read, series(&[(&errors("5xx"), Value::Counter(1))]));
}

#[tokio::test(start_paused = true)]
async fn a_deadline_passed_before_the_first_attempt_exhausts_attempt_one() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let result = deadline::with_timeout(Duration::ZERO, call(&[200])).await;
    assert!(matches!(
        result,
        Err(Failed::Runtime(Error::DeadlineExceeded { .. }))
    ));

    let mut read = read(&snapshotter);
    assert_eq!(single_duration(&read, "timeout"), 0.0);
    read.remove(&duration("timeout"));
    // The dependency was never called: no dependency error.
    assert_eq!(
        read,
        series(&[(&retries("1", "exhausted"), Value::Counter(1))])
    );
}

#[tokio::test(start_paused = true)]
async fn a_deadline_that_cuts_the_pause_short_exhausts_the_failed_attempt() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    // The first pause (≥ 75 ms) does not fit in 50 ms.
    let result = deadline::with_timeout(Duration::from_millis(50), call(&[502, 200])).await;
    assert!(matches!(
        result,
        Err(Failed::Runtime(Error::DeadlineExceeded { .. }))
    ));

    let mut read = read(&snapshotter);
    single_duration(&read, "timeout");
    read.remove(&duration("timeout"));
    assert_eq!(
        read,
        series(&[
            (&retries("1", "exhausted"), Value::Counter(1)),
            (&errors("5xx"), Value::Counter(1)),
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_call_is_cancelled_with_its_wall_time() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let slow = observe(USER, async {
        tokio::time::sleep(Duration::from_secs(10)).await;
        Ok::<_, Failed>(())
    });
    let outcome = tokio::time::timeout(Duration::from_millis(1500), slow).await;
    assert!(outcome.is_err());

    let read = read(&snapshotter);
    assert_eq!(
        read,
        series(&[(&duration("cancelled"), Value::Histogram(vec![1.5]))])
    );
}

#[test]
fn a_call_never_polled_records_nothing() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    drop(observe(USER, async { Ok::<_, Failed>(()) }));
    assert_eq!(read(&snapshotter), BTreeMap::new());
}

#[test]
fn without_a_recorder_nothing_is_recorded_and_nothing_breaks() {
    assert!(!recorder_installed());
    let mut cx = Context::from_waker(Waker::noop());
    let mut fut = pin!(observe(USER, async { Ok::<_, Failed>(7) }));
    assert!(matches!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(7))));
}

#[test]
fn the_no_op_recorder_is_zero_sized() {
    // `recorder_installed` tells the facade's no-op recorder apart by size.
    assert_eq!(size_of::<metrics::NoopRecorder>(), 0);
    assert!(size_of::<DebuggingRecorder>() > 0);
    assert!(size_of::<metrics_exporter_prometheus::PrometheusRecorder>() > 0);
}

#[test]
fn breaker_transitions_set_the_gauge_and_count_trips() {
    use crate::breaker::State::*;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let state = "circuit_breaker_state{service=\"checkout\",target=\"user\"}";
    let trips = "circuit_breaker_trips_total{service=\"checkout\",target=\"user\"}";

    breaker_created(USER, Closed);
    assert_eq!(read(&snapshotter), series(&[(state, Value::Gauge(0.0))]));

    breaker_transition(USER, Closed, Open, false);
    assert_eq!(
        read(&snapshotter),
        series(&[(state, Value::Gauge(2.0)), (trips, Value::Counter(1))])
    );

    // A failed probe reopens the breaker: not a new trip.
    breaker_transition(USER, Open, HalfOpen, false);
    breaker_transition(USER, HalfOpen, Open, false);
    assert_eq!(
        read(&snapshotter),
        series(&[(state, Value::Gauge(2.0)), (trips, Value::Counter(0))])
    );

    breaker_transition(USER, Open, HalfOpen, false);
    assert_eq!(read(&snapshotter)[state], Value::Gauge(1.0));
    breaker_transition(USER, HalfOpen, Closed, false);
    assert_eq!(read(&snapshotter)[state], Value::Gauge(0.0));

    // An operator's `force_open` is not a trip.
    breaker_transition(USER, Closed, Open, true);
    assert_eq!(
        read(&snapshotter),
        series(&[(state, Value::Gauge(2.0)), (trips, Value::Counter(0))])
    );
}

#[tokio::test(start_paused = true)]
async fn a_family_reports_under_its_name_whatever_its_keys() {
    use crate::breaker::{BreakerConfig, BreakerFamily, FamilyConfig};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let state = "circuit_breaker_state{service=\"checkout\",target=\"user\"}";
    let trips = "circuit_breaker_trips_total{service=\"checkout\",target=\"user\"}";
    let config = FamilyConfig::new().with_breaker(BreakerConfig::new().with_min_requests(1));
    let family = BreakerFamily::new_in("checkout", "user", config).unwrap();
    assert_eq!(read(&snapshotter), series(&[(state, Value::Gauge(0.0))]));

    // 500 hosts, each tripped and then rejecting one call: still three
    // series, none naming a host.
    for host in 0..500 {
        let breaker = family.get(&format!("10.0.{}.{}", host / 256, host % 256));
        breaker.try_acquire().unwrap().failure();
        assert!(breaker.try_acquire().is_err());
    }
    assert_eq!(
        read(&snapshotter),
        series(&[
            (state, Value::Gauge(2.0)),
            (trips, Value::Counter(500)),
            (&errors("circuit_open"), Value::Counter(500)),
        ])
    );

    // The gauge is the worst member: open while one of them is.
    for host in 1..500 {
        family
            .find(&format!("10.0.{}.{}", host / 256, host % 256))
            .unwrap()
            .reset();
    }
    assert_eq!(read(&snapshotter)[state], Value::Gauge(2.0));
    family.find("10.0.0.0").unwrap().reset();
    assert_eq!(read(&snapshotter)[state], Value::Gauge(0.0));
}

#[test]
fn a_rejected_call_is_one_circuit_open_error() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    breaker_rejected(USER);
    assert_eq!(
        read(&snapshotter),
        series(&[(&errors("circuit_open"), Value::Counter(1))])
    );
}

#[tokio::test(start_paused = true)]
async fn retry_metrics_leave_rejections_to_the_breaker() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let result = Policy::http()
        .retry(|| async {
            Err::<(), _>(Failed::Runtime(DependencyDown::new("user", "open").into()))
        })
        .notify_with(RetryMetrics::new(USER))
        .await;
    assert!(result.is_err());
    assert_eq!(read(&snapshotter), BTreeMap::new());
}

#[test]
fn fallbacks_are_counted_by_kind() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    fallback(USER, Fallback::Stale);
    fallback(USER, Fallback::Stale);
    fallback(USER, Fallback::FailFast);
    assert_eq!(
        read(&snapshotter),
        series(&[
            (
                "http_client_fallbacks_total{kind=\"fail_fast\",service=\"checkout\",target=\"user\"}",
                Value::Counter(1)
            ),
            (
                "http_client_fallbacks_total{kind=\"stale\",service=\"checkout\",target=\"user\"}",
                Value::Counter(2)
            ),
        ])
    );
}

#[test]
fn describe_gives_units_and_help() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    describe();
    breaker_rejected(USER);
    let snapshot = snapshotter.snapshot().into_vec();
    let (_, unit, help, _) = &snapshot[0];
    assert_eq!(*unit, Some(metrics::Unit::Count));
    assert!(help.as_deref().is_some_and(|h| h.contains("reason")));
}

/// `describe` describes exactly the metrics of [`METRICS`], each once.
#[test]
fn describe_covers_every_metric_of_the_list() {
    use std::sync::Mutex;

    use metrics::{
        Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    /// Keeps the names described; registers nothing.
    #[derive(Default)]
    struct Described(Mutex<Vec<String>>);

    impl Described {
        fn push(&self, name: KeyName) {
            self.0.lock().unwrap().push(name.as_str().to_owned());
        }
    }

    impl Recorder for Described {
        fn describe_counter(&self, name: KeyName, _: Option<Unit>, _: SharedString) {
            self.push(name);
        }
        fn describe_gauge(&self, name: KeyName, _: Option<Unit>, _: SharedString) {
            self.push(name);
        }
        fn describe_histogram(&self, name: KeyName, _: Option<Unit>, _: SharedString) {
            self.push(name);
        }
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
            Counter::noop()
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    let recorder = Described::default();
    {
        let _local = metrics::set_default_local_recorder(&recorder);
        describe();
    }
    let mut described = recorder.0.into_inner().unwrap();
    described.sort();
    let mut listed: Vec<String> = METRICS.iter().map(|name| (*name).to_owned()).collect();
    listed.sort();
    assert_eq!(described, listed);
}

/// A minimal `tracing` subscriber that keeps, for every event, its level,
/// message and the span it happened in.
#[path = "traces.rs"]
mod traces;

/// Runs `fut` on a paused current-thread runtime with `collector` as the
/// thread's subscriber.
fn traced<F: Future>(collector: &traces::Collector, fut: F) -> F::Output {
    with_subscriber(collector.clone(), fut)
}

/// Runs `fut` on a paused current-thread runtime with `subscriber` as the
/// thread's subscriber.
fn with_subscriber<S, F>(subscriber: S, fut: F) -> F::Output
where
    S: tracing::Subscriber + Send + Sync + 'static,
    F: Future,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    tracing::subscriber::with_default(subscriber, || runtime.block_on(fut))
}

#[test]
fn every_attempt_and_pause_is_an_event_in_the_calls_span() {
    use tracing::Level;
    let collector = traces::Collector::default();
    let result = traced(&collector, call(&[502, 503, 200]));
    assert_eq!(result.unwrap(), 200);

    assert_eq!(collector.span_count(), 1, "one span per logical call");
    let (name, fields) = collector.span(1);
    assert_eq!(name, "resilience.call");
    for field in [
        "service=checkout",
        "target=user",
        "otel.kind=client",
        "status=ok",
        "otel.status_code=OK",
    ] {
        assert!(fields.iter().any(|f| f == field), "{field} in {fields:?}");
    }

    let events = collector.events();
    let summary: Vec<_> = events
        .iter()
        .map(|e| (e.level, e.message.as_str(), e.span))
        .collect();
    assert_eq!(
        summary,
        [
            (
                Level::INFO,
                "attempt failed, retrying after a pause",
                Some(1)
            ),
            (
                Level::INFO,
                "attempt failed, retrying after a pause",
                Some(1)
            ),
            (Level::DEBUG, "attempt succeeded", Some(1)),
        ]
    );
    let first = &events[0].fields;
    assert!(first.contains(&"attempt=1".to_owned()), "{first:?}");
    assert!(first.contains(&"verdict=transient".to_owned()), "{first:?}");
    assert!(first.contains(&"reason=5xx".to_owned()), "{first:?}");
    assert!(
        first.iter().any(|f| f.starts_with("delay_ms=")),
        "the pause is in the event: {first:?}"
    );
    assert!(events[2].fields.contains(&"attempt=3".to_owned()));
}

#[test]
fn an_exhausted_chain_warns_and_marks_its_span_as_an_error() {
    use tracing::Level;
    let collector = traces::Collector::default();
    assert!(traced(&collector, call(&[502, 502, 502])).is_err());

    let (_, fields) = collector.span(1);
    assert!(fields.contains(&"status=5xx".to_owned()), "{fields:?}");
    assert!(
        fields.contains(&"otel.status_code=ERROR".to_owned()),
        "{fields:?}"
    );
    let last = collector.events().pop().unwrap();
    assert_eq!(
        (last.level, last.message.as_str()),
        (Level::WARN, "giving up")
    );
    assert!(last.fields.contains(&"give_up=exhausted".to_owned()));
}

#[test]
fn breaker_state_changes_are_warnings_naming_the_breaker() {
    use tracing::Level;
    let collector = traces::Collector::default();
    tracing::subscriber::with_default(collector.clone(), || {
        breaker_transition(
            USER,
            crate::breaker::State::Closed,
            crate::breaker::State::Open,
            false,
        )
    });
    let events = collector.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].level, Level::WARN);
    for field in ["breaker=user", "from=closed", "to=open", "forced=false"] {
        assert!(
            events[0].fields.contains(&field.to_owned()),
            "{field} in {:?}",
            events[0].fields
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_observed_call_inside_another_is_the_same_logical_call() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    const INNER: Labels = Labels::new("checkout", "get_user");

    // An outer call (the breaker's) around an inner one (the retry chain's).
    let mut statuses = [502, 200].into_iter();
    let result = observe(
        USER,
        observe(
            INNER,
            Policy::http()
                .retry(move || {
                    let status = statuses.next().unwrap_or(200);
                    async move {
                        match status {
                            200 => Ok(status),
                            failed => Err(Failed::Status(failed)),
                        }
                    }
                })
                .notify_with(RetryMetrics::new(USER)),
        ),
    )
    .await;
    assert_eq!(result.unwrap(), 200);
    assert_one_retry_then_success(&snapshotter, "one duration, under the outer call's labels");
}

/// The series of one call to `user` whose first attempt got a 502 and
/// whose second succeeded: one duration, two attempts, one 5xx.
fn assert_one_retry_then_success(snapshotter: &Snapshotter, context: &str) {
    let mut read = read(snapshotter);
    single_duration(&read, "ok");
    read.remove(&duration("ok"));
    assert_eq!(
        read,
        series(&[
            (&retries("1", "retry"), Value::Counter(1)),
            (&retries("2", "success"), Value::Counter(1)),
            (&errors("5xx"), Value::Counter(1)),
        ]),
        "{context}"
    );
}

/// A call that nothing listens to (no recorder, no span wanted) leaves no
/// mark for the calls inside it: one that finds a recorder after all (a
/// thread-local one here) records itself in full, under its own labels.
#[test]
fn a_call_inside_a_quiet_one_records_itself_when_it_finds_a_recorder() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // A subscriber that wants nothing, whatever other tests' subscribers
    // made of the callsite: the outer call opens no span.
    let nobody = tracing::subscriber::NoSubscriber::default();
    let result = with_subscriber(
        nobody,
        observe(Labels::new("checkout", "outer"), async {
            let _local = metrics::set_default_local_recorder(&recorder);
            call(&[502, 200]).await
        }),
    );
    assert_eq!(result.unwrap(), 200);
    assert_one_retry_then_success(&snapshotter, "the inner call's own series");
}

#[test]
fn a_nested_scope_opens_no_span_and_takes_the_outer_labels() {
    let collector = traces::Collector::default();
    tracing::subscriber::with_default(collector.clone(), || {
        let outer = CallScope::new(USER);
        let inner = CallScope::new(Labels::new("checkout", "get_user"));
        {
            let _outer = outer.enter();
            let _inner = inner.enter();
            let success: crate::retry::Event<'_, Failed> =
                crate::retry::Event::Success { attempt: 1 };
            inner.attempt(&success, |_| None);
        }
        assert_eq!(inner.labels(), USER);
        assert!(inner.span().is_disabled());
        inner.finish(Status::Ok);
        outer.finish(Status::Ok);
        // Entered again after the outer call: still the same (nested) call.
        let _again = inner.enter();
    });
    assert_eq!(collector.span_count(), 1);
    let events = collector.events();
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].span,
        Some(1),
        "the inner attempt is in the outer span"
    );
}

#[test]
fn a_dropped_call_marks_its_span_cancelled_without_a_recorder() {
    let collector = traces::Collector::default();
    traced(&collector, async {
        let slow = observe(USER, async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok::<_, Failed>(())
        });
        assert!(
            tokio::time::timeout(Duration::from_secs(1), slow)
                .await
                .is_err()
        );
    });
    let (name, fields) = collector.span(1);
    assert_eq!(name, "resilience.call");
    assert!(
        fields.contains(&"status=cancelled".to_owned()),
        "{fields:?}"
    );
    assert!(
        fields.contains(&"otel.status_code=ERROR".to_owned()),
        "{fields:?}"
    );
}

/// A subscriber that wants events but no span gets no span from a call,
/// only its events; one that wants spans gets exactly one, with its status.
#[test]
fn a_call_nobody_traces_keeps_no_span() {
    let run = |collector: &traces::Collector| {
        tracing::subscriber::with_default(collector.clone(), || {
            let scope = CallScope::new(USER);
            drop(scope.enter());
            let disabled = scope.span().is_disabled();
            scope.finish(Status::Error);
            disabled
        })
    };
    let events_only = traces::Collector::events_only();
    assert!(run(&events_only), "no span without a subscriber for spans");
    assert_eq!(events_only.span_count(), 0);

    let everything = traces::Collector::default();
    assert!(
        !run(&everything),
        "a subscriber for spans gets the call's span"
    );
    assert_eq!(everything.span_count(), 1);
    let (name, fields) = everything.span(1);
    assert_eq!(name, "resilience.call");
    assert!(fields.contains(&"status=error".to_owned()), "{fields:?}");
}

/// `succeed` is `succeeded` then `finish(Status::Ok)`, whoever listens,
/// and a later finish changes nothing.
#[test]
fn succeed_records_the_success_and_finishes_the_call() {
    use tracing::Level;
    let succeed = |attempt| {
        let scope = CallScope::new(USER);
        drop(scope.enter());
        scope.succeed(attempt);
        scope.finish(Status::Error);
    };

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || succeed(2));
    let mut read = read(&snapshotter);
    single_duration(&read, "ok");
    read.remove(&duration("ok"));
    assert_eq!(
        read,
        series(&[(&retries("2", "success"), Value::Counter(1))])
    );

    let summary = |collector: &traces::Collector| {
        let events = collector.events();
        let seen: Vec<_> = events
            .iter()
            .map(|e| (e.level, e.message.clone(), e.fields.clone()))
            .collect();
        seen
    };
    let success = vec![(
        Level::DEBUG,
        "attempt succeeded".to_owned(),
        vec!["attempt=1".to_owned()],
    )];
    let traced = traces::Collector::default();
    tracing::subscriber::with_default(traced.clone(), || succeed(1));
    let (_, fields) = traced.span(1);
    assert!(fields.contains(&"status=ok".to_owned()), "{fields:?}");
    assert!(!fields.contains(&"status=error".to_owned()), "{fields:?}");
    assert_eq!(summary(&traced), success);

    // A quiet call: no span, no recorder, the event alone.
    let quiet = traces::Collector::events_only();
    tracing::subscriber::with_default(quiet.clone(), || succeed(1));
    assert_eq!(quiet.span_count(), 0);
    assert_eq!(summary(&quiet), success);
}

/// A call both traced and recorded keeps its span and its clock, which it
/// sets up in either order.
#[test]
fn a_call_traced_and_recorded_gets_both_its_span_and_its_duration() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let collector = traces::Collector::default();
    let result = metrics::with_local_recorder(&recorder, || traced(&collector, call(&[502, 200])));
    assert_eq!(result.unwrap(), 200);
    let (_, fields) = collector.span(1);
    assert!(fields.contains(&"status=ok".to_owned()), "{fields:?}");
    assert_one_retry_then_success(&snapshotter, "a traced call's series");
}
