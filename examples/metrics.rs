//! A client of a flaky in-process HTTP service, exporting the metrics of
//! `resilience::guide` as Prometheus text on `/metrics`.
//!
//! `cargo run --example metrics` plays a bounded scenario (recoveries,
//! exhausted retries, a bad request, a dropped connection, then an outage
//! that trips the circuit breaker and its recovery), prints what Prometheus
//! would scrape, and exits. `cargo run --example metrics --
//! --serve` keeps playing it and serving `/metrics` until interrupted, to
//! point a real Prometheus at it; `--listen 127.0.0.1:9464` fixes the
//! address (default: a free port on 127.0.0.1).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use common::{FaultServer, Reply};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use resilience::breaker::BreakerConfig;
use resilience::registry::Registry;
use resilience::retry::{Classify, HttpStatus, Reason, Verdict};
use resilience::{circuit_breaker, retry, telemetry};

/// The breaker's cooldown, as written in the attribute.
const COOLDOWN: Duration = Duration::from_millis(500);

#[derive(Debug)]
enum ClientError {
    Status(u16),
    Transport(reqwest::Error),
    Resilience(resilience::Error),
}

impl From<resilience::Error> for ClientError {
    fn from(err: resilience::Error) -> Self {
        ClientError::Resilience(err)
    }
}

impl Classify for ClientError {
    fn classify(&self) -> Verdict {
        match self {
            ClientError::Status(code) => HttpStatus(*code).classify(),
            // Connection refused or reset, a body cut short: transient.
            ClientError::Transport(_) => Verdict::Transient,
            ClientError::Resilience(err) => err.classify(),
        }
    }

    fn reason(&self) -> Option<Reason> {
        match self {
            ClientError::Status(code) => HttpStatus(*code).reason(),
            ClientError::Transport(err) if err.is_timeout() => Some(Reason::Timeout),
            ClientError::Transport(_) => Some(Reason::Network),
            ClientError::Resilience(err) => err.reason(),
        }
    }
}

struct UserClient {
    http: reqwest::Client,
    base: String,
}

impl UserClient {
    /// One attempt; the attributes make it one logical call: a span and a
    /// duration, the breaker `users` around up to 3 attempts (the layer order of
    /// `resilience::guide`). The cooldown is short for the demo (the default: 30 s). The
    /// retry site takes the breaker's name so that every series of the
    /// dependency has the same `target` (by default it is the fn's path).
    #[circuit_breaker(name = "users", min = 4, ratio = 0.5, cooldown = "500ms")]
    #[retry(name = "users", max = 3, initial = "100ms")]
    async fn get_user(&self, id: u64) -> Result<String, ClientError> {
        let response = self
            .http
            .get(format!("{}/users/{id}", self.base))
            .send()
            .await
            .map_err(ClientError::Transport)?;
        match response.status().as_u16() {
            200 => response.text().await.map_err(ClientError::Transport),
            code => Err(ClientError::Status(code)),
        }
    }
}

/// The scenario: what the service answers to each user's attempts.
fn script(server: &FaultServer) {
    server.script_statuses("/users/1", &[502, 502, 200]);
    server.script_statuses("/users/2", &[503, 503, 503]);
    server.script_statuses("/users/3", &[404]);
    server.script("/users/4", [Reply::DropMidBody, Reply::Ok]);
    // An outage: users 5 and 6 exhaust their retries and trip the breaker.
    server.script_statuses("/users/5", &[503, 503, 503]);
    server.script_statuses("/users/6", &[503, 503, 503]);
}

async fn fetch(client: &UserClient, id: u64) {
    match client.get_user(id).await {
        Ok(user) => println!("user {id}: {user}"),
        Err(err) => println!("user {id}: failed: {err:?}"),
    }
}

async fn play(client: &UserClient) {
    for id in 1..=6 {
        fetch(client, id).await;
    }
    // Rejected at once while open; after the cooldown one probe closes it.
    fetch(client, 7).await;
    tokio::time::sleep(COOLDOWN + Duration::from_millis(100)).await;
    fetch(client, 7).await;
}

fn recorder() -> Result<PrometheusHandle, Box<dyn std::error::Error>> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(telemetry::REQUEST_DURATION_SECONDS.into()),
            telemetry::DURATION_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(telemetry::RATE_LIMIT_WAIT_SECONDS.into()),
            telemetry::DURATION_BUCKETS,
        )?
        .install_recorder()?;
    telemetry::describe();
    Ok(handle)
}

async fn serve_metrics(handle: PrometheusHandle, addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let handle = handle.clone();
            async move { handle.render() }
        }),
    );
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            eprintln!("the /metrics server stopped: {err}");
        }
    });
    Ok(addr)
}

struct Args {
    serve: bool,
    listen: SocketAddr,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        serve: false,
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
    };
    let mut argv = std::env::args().skip(1);
    while let Some(arg) = argv.next() {
        match arg.as_str() {
            "--serve" => args.serve = true,
            "--listen" => {
                let value = argv.next().ok_or("`--listen` needs an address")?;
                args.listen = value
                    .parse()
                    .map_err(|err| format!("`--listen {value}`: {err}"))?;
                if !args.listen.ip().is_loopback() {
                    return Err(format!(
                        "`--listen {value}`: the example only listens on loopback"
                    ));
                }
            }
            other => {
                return Err(format!(
                    "unknown argument `{other}`; expected `--serve` or `--listen ADDR`"
                ));
            }
        }
    }
    Ok(args)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args()?;
    // `service` comes from the startup configuration (or the file named by
    // RESILIENCE_CONFIG); the breaker from the registry, by name.
    let registry = Registry::builder().service("example").install()?;
    let handle = recorder()?;
    let metrics_addr = serve_metrics(handle, args.listen).await?;
    println!("Prometheus metrics on http://{metrics_addr}/metrics\n");

    let server = FaultServer::start().await?;
    let client = UserClient {
        http: reqwest::Client::new(),
        base: server.url(""),
    };
    // The breaker of `#[circuit_breaker(name = "users", …)]`: the same one,
    // by name. Each change is a WARN event through `tracing` and the
    // `circuit_breaker_state` gauge; the hook prints it for the demo.
    registry
        .breaker(
            "users",
            BreakerConfig::new()
                .with_min_requests(4)
                .with_failure_ratio(0.5)
                .with_cooldown(COOLDOWN),
        )
        .on_state_change(|name, from, to| println!("  breaker `{name}`: {from} -> {to}"));
    loop {
        script(&server);
        play(&client).await;
        if !args.serve {
            break;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }

    // Scrape ourselves, as Prometheus would.
    let scraped = reqwest::get(format!("http://{metrics_addr}/metrics"))
        .await?
        .error_for_status()?
        .text()
        .await?;
    println!("\nGET /metrics (resilience series):");
    for line in scraped.lines().filter(|line| {
        !line.starts_with('#') && !line.contains("_bucket{") && !line.trim().is_empty()
    }) {
        println!("  {line}");
    }
    Ok(())
}
