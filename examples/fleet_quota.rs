//! The measurement of a rate quota shared by five replica processes
//! through the real Redis (`RELIABILITY.md`, *A rate quota shared by a
//! fleet*): a `redis-server` of its own on port 6394, five replica
//! processes each offered 1,000 calls a second (five times its share of a
//! quota of 1,000/s), and a receiving server here counting what arrives
//! each second. Optionally Redis is killed (by its PID) for 10 s, and
//! frozen (SIGSTOP / SIGCONT) for 10 s, mid-run.
//!
//! ```sh
//! cargo run --release --features limit-redis --example fleet_quota -- 60
//! cargo run --release --features limit-redis --example fleet_quota -- 60 --outages --csv deploy/figures/fleet-quota-outages.csv
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use resilience::limit::{FleetRateLimit, Priority, Rate};

const QUOTA: u32 = 1000;
const REPLICAS: usize = 5;
const PORT: u16 = 6394;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("replica") {
        replica(&args[2], args[3].parse().unwrap(), &args[4]);
        return;
    }
    let seconds: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(60);
    let outages = args.iter().any(|a| a == "--outages");
    let csv = args
        .iter()
        .position(|a| a == "--csv")
        .and_then(|i| args.get(i + 1).cloned());
    coordinator(seconds, outages, csv);
}

fn redis_server() -> Child {
    let child = Command::new("redis-server")
        .args(["--port", &PORT.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server starts");
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", PORT)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "redis-server listens"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn signal(child: &Child, signal: &str) {
    Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("kill runs");
}

/// Per second: calls arriving from replicas that were leasing, and from
/// replicas admitting their share alone.
struct Counts {
    leasing: Vec<AtomicU32>,
    alone: Vec<AtomicU32>,
}

fn coordinator(seconds: usize, outages: bool, csv: Option<String>) {
    let mut redis = redis_server();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let name = format!("measure-{}", std::process::id());
    let exe = std::env::current_exe().unwrap();
    let total = seconds + 1;
    let children: Vec<Child> = (0..REPLICAS)
        .map(|_| {
            Command::new(&exe)
                .args(["replica", &port.to_string(), &total.to_string(), &name])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let counts = Arc::new(Counts {
        leasing: (0..total + 5).map(|_| AtomicU32::new(0)).collect(),
        alone: (0..total + 5).map(|_| AtomicU32::new(0)).collect(),
    });
    let start = Instant::now();
    let mut readers = Vec::new();
    for _ in 0..REPLICAS {
        let (stream, _) = listener.accept().unwrap();
        let counts = counts.clone();
        readers.push(std::thread::spawn(move || {
            let mut stream = BufReader::new(stream);
            let mut buf = [0u8; 256];
            loop {
                let n = match stream.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let second = start.elapsed().as_secs() as usize;
                for &byte in &buf[..n] {
                    let slot = if byte == b'a' {
                        &counts.leasing
                    } else {
                        &counts.alone
                    };
                    if let Some(slot) = slot.get(second) {
                        slot.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    // Outages: killed at 15 s for 10 s, frozen at 40 s for 10 s.
    let mut events: Vec<(usize, &str)> = Vec::new();
    if outages {
        events = vec![(15, "kill"), (25, "restart"), (40, "stop"), (50, "cont")];
    }
    let mut state = vec!["up"; total + 5];
    for (at, what) in &events {
        let wait = Duration::from_secs(*at as u64).saturating_sub(start.elapsed());
        std::thread::sleep(wait);
        match *what {
            "kill" => {
                let _ = redis.kill();
                let _ = redis.wait();
                state[*at..*at + 10].fill("killed");
            }
            "restart" => redis = redis_server(),
            "stop" => {
                signal(&redis, "-STOP");
                state[*at..*at + 10].fill("frozen");
            }
            "cont" => signal(&redis, "-CONT"),
            _ => unreachable!(),
        }
    }
    let mut reports = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        reports.extend(
            BufReader::new(&out.stdout[..])
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<_>>(),
        );
    }
    for reader in readers {
        let _ = reader.join();
    }
    signal(&redis, "-CONT");
    let _ = redis.kill();
    let _ = redis.wait();

    // Seconds 1..=seconds: the first second is the replicas' start.
    let mut rows = Vec::new();
    for (second, state) in state.iter().enumerate().take(total).skip(1) {
        let leasing = counts.leasing[second].load(Ordering::Relaxed);
        let alone = counts.alone[second].load(Ordering::Relaxed);
        rows.push((second, leasing + alone, leasing, alone, *state));
    }
    let admitted: u32 = rows.iter().map(|r| r.1).sum();
    let max = rows.iter().map(|r| r.1).max().unwrap();
    let min = rows.iter().map(|r| r.1).min().unwrap();
    println!("second,admitted,quota,leasing,alone,redis");
    for (second, total, leasing, alone, state) in &rows {
        println!("{second},{total},{QUOTA},{leasing},{alone},{state}");
    }
    let (mut round_trips, mut calls, mut p99s, mut maxes) = (0u64, 0u64, Vec::new(), Vec::new());
    for line in &reports {
        let fields: Vec<&str> = line.split_whitespace().collect();
        round_trips += fields[1].parse::<u64>().unwrap();
        calls += fields[3].parse::<u64>().unwrap();
        p99s.push(fields[5].parse::<f64>().unwrap());
        maxes.push(fields[7].parse::<f64>().unwrap());
    }
    println!(
        "# {seconds} s, quota {QUOTA}/s, burst {QUOTA}: admitted {admitted} ({:.1} % of the quota); 1 s windows from {min} to {max}",
        f64::from(admitted) * 100.0 / (f64::from(QUOTA) * (total - 1) as f64)
    );
    println!(
        "# Redis round trips: {round_trips} for {calls} admissions, {:.2} per 1,000",
        round_trips as f64 * 1000.0 / calls as f64
    );
    println!(
        "# time an admitted call spent in the limiter: p99 per replica {p99s:?} µs, max {maxes:?} µs"
    );
    for line in &reports {
        println!("# {line}");
    }
    if let Some(path) = csv {
        let mut file = std::fs::File::create(&path).unwrap();
        let title = if outages {
            "A quota of 1,000/s shared by 5 replicas through Redis, killed at 15 s and frozen at 40 s for 10 s each"
        } else {
            "A quota of 1,000/s shared by 5 replicas through Redis"
        };
        writeln!(file, "# title: {title}").unwrap();
        writeln!(
            file,
            "second,admitted [calls/s],quota [calls/s],leasing [calls/s],alone [calls/s]"
        )
        .unwrap();
        for (second, total, leasing, alone, _) in &rows {
            writeln!(file, "{second},{total},{QUOTA},{leasing},{alone}").unwrap();
        }
    }
}

/// One replica: its own limit and connection, a call offered every
/// millisecond, one byte sent to the receiving server per admitted call
/// (`a` while leasing, `b` while alone).
fn replica(port: &str, seconds: u64, name: &str) {
    let name: &'static str = Box::leak(name.to_owned().into_boxed_str());
    let url = Box::leak(format!("redis://127.0.0.1:{PORT}/").into_boxed_str());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut sink = TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap();
    sink.set_nodelay(true).unwrap();
    runtime.block_on(async {
        let limit = FleetRateLimit::new(name, Rate::per_second(QUOTA), url).unwrap();
        let mut spent = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_millis(1));
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(seconds) {
            tick.tick().await;
            let before = Instant::now();
            let admitted = limit.try_acquire(Priority::Default).is_ok();
            let took = before.elapsed();
            if admitted {
                spent.push(took);
                let byte = if limit.is_leasing() { b'a' } else { b'b' };
                sink.write_all(&[byte]).unwrap();
            }
        }
        spent.sort();
        let p99 = spent[spent.len() * 99 / 100];
        println!(
            "round_trips {} admitted {} p99_us {:.2} max_us {:.1} replicas {}",
            limit.round_trips(),
            spent.len(),
            p99.as_secs_f64() * 1e6,
            spent.last().unwrap().as_secs_f64() * 1e6,
            limit.replicas(),
        );
    });
}
