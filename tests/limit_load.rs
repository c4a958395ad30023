//! The adaptive concurrency limit against a real overloaded server on
//! loopback, bounded for CI (about 14 s): an open-loop load at
//! 4× what the server sustains, through `AdaptiveLimit` with Netflix's
//! Vegas defaults, knowing nothing of the server's size. The issue's
//! targets: goodput at least 90 % of the throughput the server sustains,
//! and the p99 of the calls sent at most 3× the unloaded p99. Without a
//! limit the same load keeps the server's queue full (checked too, so that
//! the test fails if the server stops being overloaded).
//!
//! The longer run, with every variant and tower-resilience beside them:
//! `cargo bench --bench load`.

#[path = "../benches/load/drive.rs"]
mod drive;
#[path = "../benches/load/server.rs"]
mod server;

use std::sync::Arc;
use std::time::Duration;

use drive::{Call, Ended, open_loop};
use resilience::limit::{AdaptiveLimit, Priority, VegasConfig};
use resilience::retry::Verdict;
use server::{Server, Shape};

const SHAPE: Shape = Shape {
    // The issue's own example of a server's size. Vegas keeps a queue of
    // `alpha..beta` = 3 to 6 calls at the dependency whatever its size, so
    // on 8 workers its steady state alone adds up to 0.75 of a call's work
    // and the spikes after each `rtt_noload` probe reach the 3× bound
    // (3.0–3.8× measured on a quiet machine); on 16 it adds 0.4.
    workers: 16,
    // 40 ms, so that the debug build's CPU time per call and the timer's
    // granularity are small beside the work: the latency measured is the
    // server's queue.
    work: Duration::from_millis(40),
    queue: 64,
};
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

#[test]
fn the_adaptive_limit_keeps_goodput_and_latency_at_4x_overload() {
    // The server and the callers on a thread each.
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
        // Unloaded: 200 calls, 4 at a time on 16 workers, so that none
        // waits in the server's queue and one hiccup of a shared machine
        // is not the p99 (the 2nd slowest of 200).
        let mut unloaded = Vec::new();
        for _ in 0..50 {
            let batch = (0..4).map(|_| {
                let (client, url) = (client.clone(), url.clone());
                tokio::spawn(async move {
                    let started = tokio::time::Instant::now();
                    assert_eq!(send(&client, &url).await, Ended::Ok);
                    started.elapsed()
                })
            });
            for call in batch.collect::<Vec<_>>() {
                unloaded.push(call.await.unwrap());
            }
        }
        unloaded.sort();
        let unloaded_p99 = unloaded[197];

        let (before, _) = server.counts();
        let started = tokio::time::Instant::now();
        let loops: Vec<_> = (0..2 * SHAPE.workers)
            .map(|_| {
                let (client, url) = (client.clone(), url.clone());
                tokio::spawn(async move {
                    while started.elapsed() < Duration::from_secs(2) {
                        send(&client, &url).await;
                    }
                })
            })
            .collect();
        for l in loops {
            l.await.unwrap();
        }
        let sustained = (server.counts().0 - before) as f64 / started.elapsed().as_secs_f64();
        assert!(sustained > 0.5 * SHAPE.nominal_rps(), "{sustained}/s");

        let limited: Call = {
            let limit = Arc::new(AdaptiveLimit::new("load", VegasConfig::new()).unwrap());
            let (client, url) = (client.clone(), url.clone());
            Arc::new(move || {
                let (client, url, limit) = (client.clone(), url.clone(), limit.clone());
                Box::pin(async move {
                    let Ok(permit) = limit.try_acquire(Priority::Default) else {
                        return Ended::Shed;
                    };
                    let ended = send(&client, &url).await;
                    permit.record_verdict(match ended {
                        Ended::Ok => None,
                        _ => Some(Verdict::Transient),
                    });
                    ended
                })
            })
        };
        let report = open_loop(
            limited,
            4.0 * sustained,
            Duration::from_secs(2),
            Duration::from_secs(3),
            DEADLINE + Duration::from_millis(100),
        )
        .await;
        let (goodput, p99) = (report.goodput(), report.percentile(0.99));
        eprintln!(
            "adaptive at 4×: goodput {goodput:.0}/s of {sustained:.0}/s sustained, p99 {p99:?} (unloaded {unloaded_p99:?}), shed {}, 503 {}, timed out {}",
            report.shed, report.refused, report.timed_out
        );
        assert!(goodput >= 0.9 * sustained, "goodput {goodput:.0}/s < 90 % of {sustained:.0}/s");
        assert!(
            p99 <= 3 * unloaded_p99,
            "p99 {p99:?} > 3 × the unloaded p99 {unloaded_p99:?}"
        );
        assert!(report.shed > 0, "at 4× the limit sheds");
        assert_eq!(report.refused + report.timed_out + report.failed, 0);

        // The same load without a limit: the server's queue, not the
        // client, decides the latency.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let unlimited: Call = {
            let (client, url) = (client.clone(), url.clone());
            Arc::new(move || {
                let (client, url) = (client.clone(), url.clone());
                Box::pin(async move { send(&client, &url).await })
            })
        };
        let report = open_loop(
            unlimited,
            4.0 * sustained,
            Duration::from_secs(1),
            Duration::from_secs(2),
            DEADLINE + Duration::from_millis(100),
        )
        .await;
        let p99 = report.percentile(0.99);
        eprintln!(
            "no limit at 4×: goodput {:.0}/s, p99 {p99:?}, 503 {}",
            report.goodput(),
            report.refused
        );
        assert!(p99 > 3 * unloaded_p99, "the server was not overloaded: p99 {p99:?}");
        assert!(report.refused > 0);
    });
}
