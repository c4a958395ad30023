//! The main demo: a real HTTP server on 127.0.0.1 plays scripted faults, and
//! a reqwest client annotated with `#[circuit_breaker]` and `#[retry]` rides
//! them out, as a timeline.
//!
//! `cargo run --example quickstart` (about 5 s)
//!
//! 1. a GET recovering after `502, 502 → 200`;
//! 2. a `400` not retried, a `429` whose `Retry-After` is honoured;
//! 3. a POST carrying one `Idempotency-Key` across its attempts, deduplicated
//!    by the server;
//! 4. the dependency going down: the breaker trips, calls fail at once as
//!    "dependency down", and the `fallback =` fn serves the last good
//!    value, marked stale (`resilience::fallback`), which becomes the
//!    `X-From-Cache: stale` header of an axum response;
//! 5. recovery: after the cooldown a half-open probe closes the breaker.
//!
//! It starts by installing its config file (shown), and ends with a
//! summary and the metrics the run recorded, as Prometheus would scrape
//! them.
//!
//! `tests/quickstart.rs` runs [`run`] on a paused clock and checks the
//! story's key lines, so this demo cannot rot.

#[path = "common/mod.rs"]
mod common;

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::IntoResponse as _;
use common::{FaultServer, PAYMENTS, Reply};
use resilience::breaker::{CircuitBreaker, State};
use resilience::fallback::{LastGood, MaybeStale};
use resilience::http::{HttpError, RequestBuilderExt, ResponseExt};
use resilience::{IdempotencyKey, circuit_breaker, registry, retry};
use tokio::time::Instant;

/// What the demo printed, and its figures.
#[derive(Debug, Default)]
pub struct Report {
    /// Every line printed, in order.
    pub lines: Vec<String>,
    /// Logical calls made by the client.
    pub calls: u32,
    /// Requests the server received (all attempts of all calls).
    pub attempts: usize,
    /// Times the breaker went from closed to open.
    pub trips: u32,
    /// Calls rejected at once by the open breaker.
    pub rejected: u32,
    /// Measured: the average wall time of a call that went through its
    /// retries and failed while the dependency was down.
    pub failed_call: Duration,
    /// Measured: the longest wall time of a call the open breaker rejected.
    pub fast_fail: Duration,
    /// An estimate, not a measurement: what the rejected calls would have
    /// cost had each taken `failed_call`, less what they took.
    pub time_saved: Duration,
    /// Wall time of the whole demo, on tokio's clock.
    pub elapsed: Duration,
}

impl Report {
    /// `true` when some printed line contains `text`.
    pub fn shows(&self, text: &str) -> bool {
        self.lines.iter().any(|line| line.contains(text))
    }
}

/// Prints and records the demo's lines, stamped with the time since start.
#[derive(Debug)]
struct Timeline {
    start: Instant,
    lines: Mutex<Vec<String>>,
    quiet: bool,
}

impl Timeline {
    fn new(quiet: bool) -> Self {
        Self {
            start: Instant::now(),
            lines: Mutex::new(Vec::new()),
            quiet,
        }
    }

    fn plain(&self, text: impl Into<String>) {
        let text = text.into();
        if !self.quiet {
            println!("{text}");
        }
        self.lines.lock().unwrap().push(text);
    }

    fn at(&self, text: impl AsRef<str>) {
        let secs = self.start.elapsed().as_secs_f64();
        self.plain(format!("  {secs:>6.3} s  {}", text.as_ref()));
    }
}

/// The client of the "users" and "payments" services.
struct Client {
    http: reqwest::Client,
    base: String,
    timeline: Arc<Timeline>,
    /// When the previous response arrived, to show the pause before the
    /// next attempt.
    last_response: Mutex<Option<Instant>>,
    /// Last good value per user, for the stale fallback.
    last_good: LastGood<u64, String>,
}

impl Client {
    // Caller → breaker → retry → transport (see `resilience::guide`): the breaker counts
    // one logical call, however many attempts the retries make, and when
    // it is open no attempt runs. The body runs again, whole, on every
    // attempt. When the call fails after its retries, or the breaker is
    // open, `stale_user` answers instead (a 400 is an answer: it stands).
    #[circuit_breaker(name = "users", min = 4, ratio = 0.5, cooldown = "2s", fallback = Self::stale_user)]
    #[retry(max = 3, initial = "100ms")]
    async fn get_user(&self, id: u64) -> Result<MaybeStale<String>, HttpError> {
        self.sent("GET", &format!("/users/{id}"));
        let response = self
            .http
            .get(format!("{}/users/{id}", self.base))
            .send()
            .await?;
        self.received(&response);
        let user = response.check().await?.text().await?;
        // Kept as the last good value, returned fresh.
        Ok(self.last_good.fresh(id, user))
    }

    /// The fallback of [`get_user`](Self::get_user), handed its arguments
    /// and the error it ended with (the open breaker's `DependencyDown`
    /// included): the last good value, marked stale (never an unmarked
    /// stub: see `resilience::guide`), or that error when there is none.
    /// The macro logs it at WARN and counts it as
    /// `http_client_fallbacks_total{kind="stale"}`.
    async fn stale_user(&self, id: u64, error: HttpError) -> Result<MaybeStale<String>, HttpError> {
        self.last_good.stale(&id).ok_or(error)
    }

    // A POST may be retried only with an idempotency key (see `resilience::guide`): the
    // macro refuses `create_*` without one. Every attempt gets a clone of
    // `key`, so the server sees the same value each time.
    #[retry(max = 3, initial = "100ms")]
    async fn create_payment(&self, key: IdempotencyKey, cents: u32) -> Result<Receipt, HttpError> {
        self.sent("POST", &format!("{PAYMENTS} (Idempotency-Key {key})"));
        let response = self
            .http
            .post(format!("{}{PAYMENTS}", self.base))
            .idempotency_key(&key)
            .body(format!("amount_cents={cents}"))
            .send()
            .await?;
        self.received(&response);
        let response = response.check().await?;
        let replayed = response.headers().contains_key("x-idempotency-replay");
        // Read inside the attempt: a body cut short is retried too.
        match response.text().await {
            Ok(text) => Ok(Receipt { text, replayed }),
            Err(err) => {
                let mut cause: &dyn std::error::Error = &err;
                while let Some(source) = cause.source() {
                    cause = source;
                }
                self.timeline.at(format!("   ✗ body cut short: {cause}"));
                Err(err.into())
            }
        }
    }

    /// One logical call of [`get_user`](Self::get_user).
    async fn fetch_user(&self, id: u64) -> Result<MaybeStale<String>, HttpError> {
        self.new_call();
        self.get_user(id).await
    }

    async fn pay(&self, key: &IdempotencyKey, cents: u32) -> Result<Receipt, HttpError> {
        self.new_call();
        self.create_payment(key.clone(), cents).await
    }

    fn new_call(&self) {
        *self.last_response.lock().unwrap() = None;
    }

    fn sent(&self, method: &str, path: &str) {
        let pause = self
            .last_response
            .lock()
            .unwrap()
            .take()
            .map(|at| format!("   (after a {} ms pause)", at.elapsed().as_millis()))
            .unwrap_or_default();
        self.timeline.at(format!("→ {method} {path}{pause}"));
    }

    fn received(&self, response: &reqwest::Response) {
        let mut line = format!("← {}", response.status());
        if let Some(value) = response.headers().get("retry-after") {
            let _ = write!(line, ", Retry-After: {}", value.to_str().unwrap_or("?"));
        }
        if response.headers().contains_key("x-idempotency-replay") {
            line.push_str(", X-Idempotency-Replay: true");
        }
        self.timeline.at(line);
        *self.last_response.lock().unwrap() = Some(Instant::now());
    }
}

/// The headers an axum handler returning `answer` would send, as
/// `Name: value` pairs: the stale mark comes from the library.
fn marks(answer: MaybeStale<String>) -> String {
    let response = answer.into_response();
    ["x-from-cache", "age"]
        .iter()
        .filter_map(|name| {
            let value = response.headers().get(*name)?.to_str().ok()?;
            let name = if *name == "age" {
                "Age"
            } else {
                "X-From-Cache"
            };
            Some(format!("{name}: {value}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Debug)]
struct Receipt {
    text: String,
    replayed: bool,
}

/// The startup config: the same keys as the attributes. A real service
/// names its file with `RESILIENCE_CONFIG` or `config_file`.
const CONFIG: &str = r#"
service = "quickstart"

[breakers.users]
cooldown = "2s"
"#;

/// The breaker of `#[circuit_breaker(name = "users")]`, shared through the
/// process-wide registry.
fn users_breaker() -> &'static CircuitBreaker {
    registry::global()
        .breakers()
        .into_iter()
        .find(|breaker| breaker.name() == "users")
        .expect("`get_user` was called, so its breaker exists")
}

/// Runs the five scenes against a fresh server. `quiet` records the lines
/// without printing them.
pub async fn run(quiet: bool) -> Report {
    // The library's metrics, as Prometheus would scrape them, recorded for
    // this run only (a recorder local to this thread: the demo runs on one).
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let metrics = recorder.handle();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let server = FaultServer::start().await.expect("bind 127.0.0.1");
    let timeline = Arc::new(Timeline::new(quiet));
    let trips = Arc::new(Mutex::new(0));
    let client = Client {
        http: reqwest::Client::new(),
        base: server.url(""),
        timeline: timeline.clone(),
        last_response: Mutex::new(None),
        last_good: LastGood::new("users"),
    };
    let t = &*timeline;
    let mut report = Report::default();
    t.plain(format!(
        "resilience quickstart: a real HTTP server on {} plays scripted faults",
        server.addr()
    ));
    t.plain("policy: 3 attempts, 100 ms ×2 backoff ±25 % jitter; breaker `users`: min 4 calls, ratio 0.5, cooldown 2 s");

    // The startup config, installed before any call: every section is
    // checked against the protected fns of the program (a section naming
    // none is an error, not a setting silently not in force), and the
    // breaker's hook is attached by name, without touching its settings.
    {
        let (timeline, trips) = (timeline.clone(), trips.clone());
        let installed = registry::Registry::builder()
            .config_str(CONFIG, "quickstart.toml")
            .and_then(|builder| {
                builder
                    .on_state_change("users", move |name, from, to| {
                        if (from, to) == (State::Closed, State::Open) {
                            *trips.lock().unwrap() += 1;
                        }
                        timeline.at(format!(
                            "⚡ breaker `{name}`: {} → {}",
                            from.as_str(),
                            to.as_str()
                        ));
                    })
                    .install()
            });
        match installed {
            Ok(registry) => {
                let sites: Vec<_> = registry.sites().iter().map(|site| site.name).collect();
                t.plain(format!(
                    "config: quickstart.toml installed; sites: {}",
                    sites.join(", ")
                ));
                for line in CONFIG.trim().lines() {
                    t.plain(format!("   | {line}"));
                }
            }
            Err(err) => t.plain(format!("✗ config refused: {err}")),
        }
    }

    // 1. Transient failures ride out.
    t.plain("\n1. GET /users/42: the server answers 502, 502, then 200");
    server.script_statuses("/users/42", &[502, 502, 200]);
    server.body("/users/42", "Ada Lovelace");
    let before = server.requests().len();
    let user = client.fetch_user(42).await;
    report.calls += 1;
    match user {
        Ok(user) => t.at(format!(
            "✓ user 42 = {:?} after {} attempts",
            user.value(),
            server.requests().len() - before
        )),
        Err(err) => t.at(format!("✗ {err}")),
    }

    // 2. What must not be retried, and a server that asks for a pause.
    t.plain(
        "\n2. GET /users/0: 400 is the caller's mistake; GET /users/7: 429 with Retry-After: 1",
    );
    server.script_statuses("/users/0", &[400]);
    let before = server.requests().len();
    let bad = client.fetch_user(0).await;
    report.calls += 1;
    match bad {
        Ok(user) => t.at(format!("✗ unexpected success: {user:?}")),
        Err(err) => t.at(format!(
            "✓ not retried ({} attempt): {}",
            server.requests().len() - before,
            err.status()
                .map_or_else(|| err.to_string(), |s| s.to_string())
        )),
    }
    server.script("/users/7", [Reply::RetryAfter(429, 1), Reply::Ok]);
    server.body("/users/7", "Grace Hopper");
    let started = Instant::now();
    let user = client.fetch_user(7).await;
    report.calls += 1;
    match user {
        Ok(user) => t.at(format!(
            "✓ user 7 = {:?}, {:.1} s later: Retry-After honoured",
            user.value(),
            started.elapsed().as_secs_f64()
        )),
        Err(err) => t.at(format!("✗ {err}")),
    }

    // 3. A POST is safe to retry only with an idempotency key.
    t.plain("\n3. POST /payments, behind the server's `IdempotencyLayer`: the first attempt is processed, its response lost");
    server.script(PAYMENTS, [Reply::DropMidBody]);
    let key = IdempotencyKey::new();
    let receipt = client.pay(&key, 1250).await;
    report.calls += 1;
    let posts = server.requests_to(PAYMENTS);
    let same_key = posts
        .iter()
        .all(|r| r.idempotency_header.as_deref() == Some(&*key.header_value()));
    match receipt {
        Ok(receipt) => t.at(format!(
            "✓ {:?}{}; {} attempts, same key on each: {same_key}; payments created on the server: {}",
            receipt.text,
            if receipt.replayed { " (replayed)" } else { "" },
            posts.len(),
            server.payments_created(),
        )),
        Err(err) => t.at(format!("✗ {err}")),
    }

    // 4. The dependency goes down.
    t.plain("\n4. the users service goes down: every request gets 503");
    server.always("/users/42", Reply::Status(503));
    server.body("/users/42", "Ada Lovelace (v2)");
    let mut failed_calls = Vec::new();
    for _ in 0..8 {
        let open = users_breaker().state() == State::Open;
        let started = Instant::now();
        let outcome = client.fetch_user(42).await;
        let took = started.elapsed();
        report.calls += 1;
        match outcome {
            Ok(answer @ MaybeStale::Stale { .. }) if open => {
                report.rejected += 1;
                report.fast_fail = report.fast_fail.max(took);
                let user = answer.value().clone();
                t.at(format!(
                    "↺ dependency down, failed fast in {} ms; serving stale {user:?} ({})",
                    took.as_millis(),
                    marks(answer)
                ));
            }
            Ok(answer @ MaybeStale::Stale { .. }) => {
                failed_calls.push(took);
                let user = answer.value().clone();
                t.at(format!(
                    "↺ failed after the retries in {} ms; serving stale {user:?} ({})",
                    took.as_millis(),
                    marks(answer)
                ));
            }
            Ok(MaybeStale::Fresh(user)) => t.at(format!("✓ {user:?}")),
            Err(err) => t.at(format!("✗ no last good value: {err}")),
        }
    }
    if !failed_calls.is_empty() {
        let average = failed_calls.iter().sum::<Duration>() / failed_calls.len() as u32;
        report.failed_call = average;
        report.time_saved = (average.saturating_sub(report.fast_fail)) * report.rejected;
    }

    // 5. Recovery.
    t.plain("\n5. the service is back; the breaker waits out its cooldown, then probes");
    server.always("/users/42", Reply::Ok);
    // The cooldown, and a little more: the breaker's clock ticks on its own.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    let outcome = client.fetch_user(42).await;
    report.calls += 1;
    match outcome {
        Ok(MaybeStale::Fresh(user)) => t.at(format!(
            "✓ probe succeeded: {user:?}; breaker `users` is {}",
            users_breaker().state().as_str()
        )),
        Ok(MaybeStale::Stale { value, .. }) => t.at(format!("✗ still stale: {value:?}")),
        Err(err) => t.at(format!("✗ {err}")),
    }

    report.attempts = server.requests().len();
    report.trips = *trips.lock().unwrap();
    report.elapsed = timeline.start.elapsed();
    t.plain("\nsummary");
    t.plain("  | calls | attempts | breaker trips | failed fast | a failed call took (avg) | a fast fail took (max) | total time |");
    t.plain("  |------:|---------:|--------------:|------------:|-------------------------:|-----------------------:|-----------:|");
    t.plain(format!(
        "  | {:>5} | {:>8} | {:>13} | {:>11} | {:>21} ms | {:>19} ms | {:>8.1} s |",
        report.calls,
        report.attempts,
        report.trips,
        report.rejected,
        report.failed_call.as_millis(),
        report.fast_fail.as_millis(),
        report.elapsed.as_secs_f64(),
    ));
    t.plain(format!(
        "  estimate, not measured: the {} fast fails spared their callers about {:.1} s of waiting \
         (each would have taken about as long as a failed call)",
        report.rejected,
        report.time_saved.as_secs_f64(),
    ));
    t.plain("\nmetrics (what Prometheus would scrape; the duration histograms left out)");
    let text = metrics.render();
    let mut series: Vec<&str> = text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter(|line| !line.starts_with("http_client_request_duration_seconds"))
        .collect();
    series.sort_unstable();
    if series.is_empty() {
        t.plain("  none: this build has the `metrics` feature off");
    }
    for line in series {
        t.plain(format!("  {line}"));
    }
    report.lines = timeline.lines.lock().unwrap().clone();
    report
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    run(false).await;
}
