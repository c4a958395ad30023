//! Load limiting against a real overloaded server: an open-loop
//! load at 0.5×, 1×, 2× and 4× the server's capacity, through no limit, a
//! static bulkhead, our adaptive limit (Vegas), our client-side throttle,
//! and tower-resilience's adaptive layer (AIMD and Vegas, with its
//! defaults, `load_shed` in front so that callers do not queue for
//! permits) in the same run. Prints goodput, p50 / p99 of the calls sent,
//! and the errors the callers saw.
//!
//! `cargo bench --bench load` (about 2.5 minutes); `-- --secs 10` for
//! longer runs, `-- --only adaptive` for one variant, `-- --csv
//! deploy/figures` to write the rows as the figures' CSV files.

#[path = "drive.rs"]
mod drive;
#[path = "server.rs"]
mod server;

use std::sync::Arc;
use std::time::Duration;

use drive::{Call, Ended, Report, open_loop};
use resilience::limit::{AdaptiveLimit, Bulkhead, Priority, Throttle, ThrottleConfig, VegasConfig};
use resilience::retry::Verdict;
use server::{Server, Shape};
use tower::{Service, ServiceBuilder, ServiceExt};

const SHAPE: Shape = Shape {
    workers: 8,
    work: Duration::from_millis(10),
    queue: 64,
};
/// The caller's deadline for one call.
const DEADLINE: Duration = Duration::from_secs(1);

async fn send(client: &reqwest::Client, url: &str) -> Ended {
    match client.get(url).timeout(DEADLINE).send().await {
        Ok(answer) if answer.status() == 200 => Ended::Ok,
        Ok(answer) if answer.status() == 503 => Ended::Refused,
        Ok(_) => Ended::Failed,
        Err(err) if err.is_timeout() => Ended::TimedOut,
        Err(_) => Ended::Failed,
    }
}

/// What a limiter of ours records for a call.
fn verdict(ended: Ended) -> Option<Verdict> {
    match ended {
        Ended::Ok => None,
        Ended::Refused | Ended::TimedOut | Ended::Failed => Some(Verdict::Transient),
        Ended::Shed => Some(Verdict::Ignored),
    }
}

fn variant(name: &str, client: reqwest::Client, url: String) -> Call {
    let url: Arc<str> = url.into();
    match name {
        "none" => Arc::new(move || {
            let (client, url) = (client.clone(), url.clone());
            Box::pin(async move { send(&client, &url).await })
        }),
        "bulkhead 8" => {
            let bulkhead = Arc::new(Bulkhead::new("load", SHAPE.workers as u32).unwrap());
            Arc::new(move || {
                let (client, url, bulkhead) = (client.clone(), url.clone(), bulkhead.clone());
                Box::pin(async move {
                    let Ok(_slot) = bulkhead.try_acquire(Priority::Critical) else {
                        return Ended::Shed;
                    };
                    send(&client, &url).await
                })
            })
        }
        "adaptive (ours, Vegas)" => {
            let limit = Arc::new(AdaptiveLimit::new("load", VegasConfig::new()).unwrap());
            Arc::new(move || {
                let (client, url, limit) = (client.clone(), url.clone(), limit.clone());
                Box::pin(async move {
                    let Ok(permit) = limit.try_acquire(Priority::Default) else {
                        return Ended::Shed;
                    };
                    let ended = send(&client, &url).await;
                    permit.record_verdict(verdict(ended));
                    ended
                })
            })
        }
        "throttle (ours, K=2)" => {
            let throttle = Arc::new(Throttle::new("load", ThrottleConfig::new()).unwrap());
            Arc::new(move || {
                let (client, url, throttle) = (client.clone(), url.clone(), throttle.clone());
                Box::pin(async move {
                    let Ok(ticket) = throttle.try_acquire(Priority::Default) else {
                        return Ended::Shed;
                    };
                    let ended = send(&client, &url).await;
                    ticket.record_verdict(verdict(ended));
                    ended
                })
            })
        }
        "tower-resilience AIMD" | "tower-resilience Vegas" => {
            let inner = {
                let client = client.clone();
                tower::service_fn(move |request: reqwest::Request| {
                    let client = client.clone();
                    // A 503 is a failure for its algorithm, not a success.
                    async move { client.execute(request).await?.error_for_status() }
                })
            };
            let algorithm = if name.ends_with("AIMD") {
                tower_resilience_adaptive::Algorithm::Aimd(
                    tower_resilience_adaptive::Aimd::builder().build().unwrap(),
                )
            } else {
                tower_resilience_adaptive::Algorithm::Vegas(
                    tower_resilience_adaptive::Vegas::builder().build().unwrap(),
                )
            };
            let layer = tower_resilience_adaptive::AdaptiveLimiterLayer::new(algorithm);
            // Clones share its limit; the mutex only makes the original Sync.
            let service = std::sync::Mutex::new(
                ServiceBuilder::new()
                    .load_shed()
                    .layer(layer)
                    .service(inner),
            );
            Arc::new(move || {
                let (client, url) = (client.clone(), url.clone());
                let mut service = service.lock().unwrap().clone();
                Box::pin(async move {
                    let request = client.get(&*url).timeout(DEADLINE).build().unwrap();
                    let result = match service.ready().await {
                        Ok(service) => service.call(request).await,
                        Err(err) => Err(err),
                    };
                    match result {
                        Ok(_) => Ended::Ok,
                        Err(err) => {
                            if err.is::<tower::load_shed::error::Overloaded>() {
                                return Ended::Shed;
                            }
                            use tower_resilience_adaptive::AdaptiveError;
                            match err.downcast_ref::<AdaptiveError<reqwest::Error>>() {
                                Some(AdaptiveError::LimitReached) => Ended::Shed,
                                Some(AdaptiveError::Service(err))
                                    if err.status().is_some_and(|s| s == 503) =>
                                {
                                    Ended::Refused
                                }
                                Some(AdaptiveError::Service(err)) if err.is_timeout() => {
                                    Ended::TimedOut
                                }
                                _ => Ended::Failed,
                            }
                        }
                    }
                })
            })
        }
        other => panic!("unknown variant {other}"),
    }
}

/// An error of a call through our retry policy.
#[derive(Debug)]
enum CallError {
    Status(u16),
    Transport { timeout: bool },
    Runtime(resilience::Error),
}

impl From<resilience::Error> for CallError {
    fn from(err: resilience::Error) -> Self {
        CallError::Runtime(err)
    }
}

impl resilience::Classify for CallError {
    fn classify(&self) -> Verdict {
        match self {
            CallError::Status(code) => resilience::retry::HttpStatus(*code).classify(),
            CallError::Transport { .. } => Verdict::Transient,
            CallError::Runtime(err) => err.classify(),
        }
    }
}

async fn attempt(client: &reqwest::Client, url: &str) -> Result<(), CallError> {
    match send(client, url).await {
        Ended::Ok => Ok(()),
        Ended::Refused => Err(CallError::Status(503)),
        Ended::TimedOut => Err(CallError::Transport { timeout: true }),
        _ => Err(CallError::Transport { timeout: false }),
    }
}

/// A retry storm: 5 replicas, each with the HTTP policy (3 attempts,
/// 100 ms × 2 with jitter) and, by `with`, its own retry budget (20 % + 10
/// a second) and its own adaptive limit (a slot per attempt), calling the
/// overloaded server together at `load` × what it sustains.
/// One row of the retry storm: with or without a budget and a limit.
#[derive(Clone, Copy)]
struct Storm {
    load: f64,
    sustained: f64,
    budget: bool,
    limit: bool,
    secs: f64,
}

/// Runs one row of the retry storm, prints it, and gives it as a line of
/// `retry-storm.csv`.
async fn storm(client: &reqwest::Client, url: &str, server: &Server, storm: Storm) -> String {
    let Storm {
        load,
        sustained,
        budget,
        limit,
        secs,
    } = storm;
    use resilience::retry::{BudgetConfig, Policy};
    const REPLICAS: usize = 5;
    let replicas: Vec<_> = (0..REPLICAS)
        .map(|_| {
            let mut policy = Policy::http();
            if budget {
                let budget: &'static _ = Box::leak(Box::new(BudgetConfig::new().build().unwrap()));
                policy = policy.with_budget(budget);
            }
            let limit =
                limit.then(|| Arc::new(AdaptiveLimit::new("storm", VegasConfig::new()).unwrap()));
            (policy, limit)
        })
        .collect();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let replicas = Arc::new(replicas);
    let (client, url) = (client.clone(), Arc::<str>::from(url));
    let call: Call = Arc::new(move || {
        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (client, url, replicas) = (client.clone(), url.clone(), replicas.clone());
        Box::pin(async move {
            let (policy, limit) = &replicas[n % REPLICAS];
            let result = policy
                .retry(|| async {
                    let permit = match limit {
                        Some(limit) => Some(
                            limit
                                .try_acquire(Priority::Default)
                                .map_err(|shed| CallError::Runtime(shed.into()))?,
                        ),
                        None => None,
                    };
                    let result = attempt(&client, &url).await;
                    if let Some(permit) = permit {
                        permit.record(&result);
                    }
                    result
                })
                .await;
            match result {
                Ok(()) => Ended::Ok,
                Err(CallError::Runtime(resilience::Error::Overloaded(_))) => Ended::Shed,
                Err(CallError::Status(503)) => Ended::Refused,
                Err(CallError::Transport { timeout: true }) => Ended::TimedOut,
                Err(_) => Ended::Failed,
            }
        })
    });
    let (served, refused) = server.counts();
    let warmup = Duration::from_secs(1);
    let measure = Duration::from_secs_f64(secs);
    let calls = ((warmup + measure).as_secs_f64() * load * sustained) as u64;
    let report = open_loop(
        call,
        load * sustained,
        warmup,
        measure,
        Duration::from_secs(6),
    )
    .await;
    let (served_after, refused_after) = server.counts();
    let requests = (served_after - served) + (refused_after - refused);
    let p99 = report.percentile(0.99);
    println!(
        "| {} | {} | {load}× | {:.2} | {:.0}/s | {:.0} % | {:.1} ms | {} | {} | {} |",
        if budget { "yes" } else { "no" },
        if limit { "yes" } else { "no" },
        requests as f64 / calls as f64,
        report.goodput(),
        100.0 * report.goodput() / sustained,
        ms(p99),
        report.shed,
        report.refused,
        report.timed_out,
    );
    let series = match (budget, limit) {
        (false, false) => "no budget or limit",
        (true, false) => "retry budget",
        (false, true) => "adaptive limit",
        (true, true) => "budget and limit",
    };
    format!(
        "{load},{series},{:.2},{:.0},{:.0}",
        requests as f64 / calls as f64,
        report.goodput(),
        ms(p99),
    )
}

/// A variant's name in `load-limiting.csv`, as BENCHMARKS.md's table
/// writes it (a CSV field holds no comma).
fn csv_series(variant: &str) -> &'static str {
    match variant {
        "none" => "no limit",
        "bulkhead 8" => "Bulkhead of 8",
        "adaptive (ours, Vegas)" => "AdaptiveLimit (Vegas defaults)",
        "throttle (ours, K=2)" => "Throttle (K = 2)",
        "tower-resilience AIMD" => "tower-resilience AIMD + load_shed",
        _ => "tower-resilience Vegas + load_shed",
    }
}

/// Writes a figure's CSV under `dir` (`deploy/figures`, whose charts
/// `cargo run -p resilience-figures` redraws), when asked to.
fn write_csv(
    dir: Option<&std::path::Path>,
    name: &str,
    title: &str,
    header: &str,
    rows: &[String],
) {
    let Some(dir) = dir else { return };
    let path = dir.join(name);
    let text = format!("# title: {title}\n{header}\n{}\n", rows.join("\n"));
    std::fs::write(&path, text).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    println!("wrote {}", path.display());
}

const VARIANTS: [&str; 6] = [
    "none",
    "bulkhead 8",
    "adaptive (ours, Vegas)",
    "throttle (ours, K=2)",
    "tower-resilience AIMD",
    "tower-resilience Vegas",
];

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut secs, mut only, mut storm_only) = (5.0, None::<String>, false);
    let mut csv: Option<std::path::PathBuf> = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--secs" => secs = args.next().and_then(|s| s.parse().ok()).expect("--secs N"),
            "--only" => only = args.next(),
            "--storm" => storm_only = true,
            // The rows as the figures' CSV files, in this folder.
            "--csv" => csv = args.next().map(Into::into),
            // What `cargo bench` passes.
            "--bench" => {}
            _ => {}
        }
    }
    // The server on a runtime and a thread of its own, the callers on
    // another: two cores, one each.
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = server_rt.block_on(Server::start(SHAPE));
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let url = format!("http://{}/", server.addr);
    client_rt.block_on(async {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1024)
            .build()
            .unwrap();
        // Unloaded: one call at a time.
        let mut unloaded = Vec::new();
        for _ in 0..300 {
            let started = tokio::time::Instant::now();
            assert_eq!(send(&client, &url).await, Ended::Ok);
            unloaded.push(started.elapsed());
        }
        unloaded.sort();
        let unloaded_p50 = unloaded[149];
        let unloaded_p99 = unloaded[296];
        // Sustained: a closed loop of twice the workers, the queue never
        // empty and never full.
        let (served_before, _) = server.counts();
        let started = tokio::time::Instant::now();
        let loops: Vec<_> = (0..2 * SHAPE.workers)
            .map(|_| {
                let (client, url) = (client.clone(), url.clone());
                tokio::spawn(async move {
                    while started.elapsed() < Duration::from_secs(3) {
                        send(&client, &url).await;
                    }
                })
            })
            .collect();
        for l in loops {
            l.await.unwrap();
        }
        let sustained = (server.counts().0 - served_before) as f64 / started.elapsed().as_secs_f64();
        let nominal = SHAPE.nominal_rps();
        println!(
            "server: {} workers × {:?}, queue {} (nominal {nominal:.0}/s); sustained {sustained:.0}/s ({:.0} % of nominal); unloaded p50 {:.1} ms, p99 {:.1} ms",
            SHAPE.workers,
            SHAPE.work,
            SHAPE.queue,
            100.0 * sustained / nominal,
            ms(unloaded_p50),
            ms(unloaded_p99),
        );
        println!("open loop, {secs} s measured after 1 s of warm-up, deadline {DEADLINE:?}; load as a multiple of the sustained rate");
        println!();
        println!("| variant | load | goodput | % of sustained | p50 | p99 | p99 / unloaded | shed locally | 503 | timed out | other |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        let mut rows = Vec::new();
        for name in VARIANTS {
            if storm_only {
                break;
            }
            if only.as_deref().is_some_and(|only| !name.contains(only)) {
                continue;
            }
            for load in [0.5, 1.0, 2.0, 4.0] {
                let call = variant(name, client.clone(), url.clone());
                let report: Report = open_loop(
                    call,
                    load * sustained,
                    Duration::from_secs(1),
                    Duration::from_secs_f64(secs),
                    DEADLINE + Duration::from_millis(100),
                )
                .await;
                let p99 = report.percentile(0.99);
                println!(
                    "| {name} | {load}× | {:.0}/s | {:.0} % | {:.1} ms | {:.1} ms | {:.1}× | {} | {} | {} | {} |",
                    report.goodput(),
                    100.0 * report.goodput() / sustained,
                    ms(report.percentile(0.5)),
                    ms(p99),
                    p99.as_secs_f64() / unloaded_p99.as_secs_f64(),
                    report.shed,
                    report.refused,
                    report.timed_out,
                    report.failed,
                );
                rows.push(format!(
                    "{load},{},{:.0},{:.1}",
                    csv_series(name),
                    100.0 * report.goodput() / sustained,
                    p99.as_secs_f64() / unloaded_p99.as_secs_f64(),
                ));
                // Let the server's queue drain between runs.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        if !storm_only && only.is_none() {
            write_csv(
                csv.as_deref(),
                "load-limiting.csv",
                "Load limiting against a real overloaded server (BENCHMARKS.md)",
                "load [× sustained],series,goodput [% of sustained],p99 [× unloaded]",
                &rows,
            );
        }
        if only.is_some() {
            return;
        }
        println!();
        println!("retry storm: 5 replicas, Policy::http (3 attempts), open loop; requests per logical call = requests the server received / calls started");
        println!();
        println!("| retry budget | adaptive limit | load | requests per call | goodput | % of sustained | p99 | shed locally | 503 | timed out |");
        println!("|---|---|---|---|---|---|---|---|---|---|");
        let mut rows = Vec::new();
        for load in [2.0, 4.0] {
            for (budget, limit) in [(false, false), (true, false), (false, true), (true, true)] {
                let row = Storm {
                    load,
                    sustained,
                    budget,
                    limit,
                    secs,
                };
                rows.push(storm(&client, &url, &server, row).await);
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
        write_csv(
            csv.as_deref(),
            "retry-storm.csv",
            "A retry storm against an overloaded dependency, 5 replicas (RELIABILITY.md)",
            "load [× sustained],series,requests per call [requests / call],goodput [calls/s],p99 [ms]",
            &rows,
        );
    });
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
