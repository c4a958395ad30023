//! Redis commands through the `redis` crate under a retry policy, against
//! a real `redis-server` of the test's own (on a free port, killed by its
//! PID), through the project's fault proxy.
//!
//! Not part of the default `cargo test`; run with
//!
//! ```text
//! cargo test --all-features --test redis_commands -- --ignored --test-threads 1
//! ```

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command as Process, Stdio};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use resilience::chaos::{Proxy, Toxic};
use resilience::redis_commands::{Command, CommandError};
use resilience::{Classify, Policy, Verdict};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A `redis-server` of the test's own, without persistence; killed by its
/// PID on drop.
struct RedisChild {
    port: u16,
    child: Child,
}

impl RedisChild {
    fn start(extra: &[&str]) -> Self {
        let redis = Self::spawn(extra);
        redis.wait_for(|ping| ping == "+PONG");
        redis
    }

    /// The server started, not yet waited for.
    fn spawn(extra: &[&str]) -> Self {
        let port = free_port();
        let child = Process::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)");
        Self { port, child }
    }

    /// Waits until the server's answer to `PING` is one `answered` accepts.
    fn wait_for(&self, answered: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.raw(&["PING"]).is_some_and(|line| answered(&line)) {
            assert!(
                Instant::now() < deadline,
                "redis-server on {} did not answer",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// One command on a fresh connection, straight to the server (not
    /// through the proxy): the first line of its answer.
    fn raw(&self, args: &[&str]) -> Option<String> {
        let mut stream =
            TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        stream.write_all(request.as_bytes()).ok()?;
        let mut reply = Vec::new();
        let mut buf = [0; 4096];
        loop {
            let n = stream.read(&mut buf).ok()?;
            reply.extend_from_slice(&buf[..n]);
            if n == 0 || reply.ends_with(b"\r\n") {
                break;
            }
        }
        let text = String::from_utf8_lossy(&reply).into_owned();
        Some(text.lines().next().unwrap_or_default().to_owned())
    }

    /// The whole `INFO commandstats` answer.
    fn commandstats(&self) -> String {
        let mut stream = TcpStream::connect(self.addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        stream
            .write_all(b"*2\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n")
            .unwrap();
        let mut reply = Vec::new();
        let mut buf = [0; 4096];
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0 {
                break;
            }
            reply.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&reply).into_owned()
    }

    /// How many times `command` (lower case) reached the server: the runs
    /// (failed ones included) and the refusals (`rejected_calls`, such as
    /// `READONLY`).
    fn calls(&self, command: &str) -> u64 {
        let stats = self.commandstats();
        let Some(line) = stats
            .lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:")))
        else {
            return 0;
        };
        line.split(',')
            .filter_map(|field| field.split_once('='))
            .filter(|(name, _)| matches!(*name, "calls" | "rejected_calls"))
            .filter_map(|(_, n)| n.trim().parse::<u64>().ok())
            .sum()
    }

    /// How many times `command` (lower case) was refused before it ran
    /// (`rejected_calls`: `LOADING`, `READONLY`, …).
    fn rejected(&self, command: &str) -> u64 {
        let stats = self.commandstats();
        stats
            .lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:")))
            .and_then(|line| {
                line.split(',')
                    .filter_map(|field| field.split_once('='))
                    .find(|(name, _)| *name == "rejected_calls")
                    .and_then(|(_, n)| n.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// The integer at `key` (`INCRBY key 0` answers `:n`).
    fn integer(&self, key: &str) -> i64 {
        self.raw(&["INCRBY", key, "0"])
            .and_then(|line| line.strip_prefix(':').map(str::to_owned))
            .and_then(|n| n.parse().ok())
            .unwrap()
    }
}

impl Drop for RedisChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A connection manager bounded to fit in one attempt of the policy, as
/// `clients_that_retry` advises.
async fn manager(addr: SocketAddr) -> ConnectionManager {
    let config = ConnectionManagerConfig::new()
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(50))
        .set_connection_timeout(Some(Duration::from_millis(500)))
        .set_response_timeout(Some(Duration::from_millis(500)));
    let client = redis::Client::open(format!("redis://{addr}/")).unwrap();
    ConnectionManager::new_with_config(client, config)
        .await
        .unwrap()
}

fn policy() -> Policy {
    Policy::builder()
        .with_max_attempts(4)
        .with_initial(Duration::from_millis(50))
        .build()
        .unwrap()
}

// The guide: every transport error is retried (SPEC §2, network), and a
// GET is safe to repeat (SPEC §3). The connection is reset after Redis
// answered the GET; the retry runs on a new connection and succeeds.
#[tokio::test(flavor = "current_thread")]
#[ignore = "starts its own redis-server"]
async fn a_get_is_retried_over_a_reset() {
    let redis = RedisChild::start(&[]);
    redis.raw(&["SET", "user:1:name", "ann"]).unwrap();
    let proxy = Proxy::builder(redis.addr())
        .toxic(Toxic::reset_after_response_to(b"user:1:name"), 1.0)
        .start()
        .await
        .unwrap();
    let conn = manager(proxy.addr()).await;
    proxy.heal(); // the reconnection is clean
    let name: Option<String> = Command::new(redis::cmd("GET").arg("user:1:name"))
        .query(&policy(), &conn)
        .await
        .expect("retried over the reset");
    assert_eq!(name.as_deref(), Some("ann"));
    assert_eq!(
        redis.calls("get"),
        2,
        "the GET the reset answer was lost for, and its retry"
    );
}

// The guide's idempotency rule (SPEC §3: never applied twice) on a Redis
// command: Redis applied the INCR, the answer was lost to a reset. Not
// idempotent, so not retried: the counter is 1, and the caller gets a
// failure rather than a second increment.
#[tokio::test(flavor = "current_thread")]
#[ignore = "starts its own redis-server"]
async fn an_incr_whose_answer_was_lost_is_not_applied_twice() {
    let redis = RedisChild::start(&[]);
    let proxy = Proxy::builder(redis.addr())
        .toxic(Toxic::reset_after_response_to(b"page:1:views"), 1.0)
        .start()
        .await
        .unwrap();
    let conn = manager(proxy.addr()).await;
    proxy.heal();
    let incr = redis::cmd("INCR").arg("page:1:views").clone();
    let command = Command::new(&incr);
    assert!(!command.is_idempotent());
    let err = command.query::<i64, _>(&policy(), &conn).await.unwrap_err();
    assert!(
        matches!(err, CommandError::Redis(ref e) if e.is_connection_dropped()),
        "{err:?}"
    );
    assert_eq!(command.verdict(&err), Verdict::Fatal);
    assert_eq!(err.outcome(), resilience::Outcome::Failure);
    assert_eq!(redis.integer("page:1:views"), 1, "applied once");
    assert_eq!(redis.calls("incr"), 1, "sent once");

    // Declared safe by the caller: retried, and so applied twice, which is
    // what declaring it accepts.
    let proxy = Proxy::builder(redis.addr())
        .toxic(Toxic::reset_after_response_to(b"page:2:views"), 1.0)
        .start()
        .await
        .unwrap();
    let conn = manager(proxy.addr()).await;
    proxy.heal();
    let incr = redis::cmd("INCR").arg("page:2:views").clone();
    let views: i64 = Command::new(&incr)
        .idempotent()
        .query(&policy(), &conn)
        .await
        .unwrap();
    assert_eq!(views, 2);
}

// READONLY: the server refused the write (a replica, as right after a
// failover), so nothing was applied and even an INCR may be retried; the
// replica is promoted during the pause, and the retry lands once.
#[tokio::test(flavor = "current_thread")]
#[ignore = "starts its own redis-server"]
async fn readonly_is_retried_and_an_incr_lands_once_after_the_failover() {
    let primary = RedisChild::start(&[]);
    let replica_of = format!("127.0.0.1 {}", primary.port);
    let replica = RedisChild::start(&["--replicaof", &replica_of]);
    let conn = manager(replica.addr()).await;
    let promote = {
        let port = replica.port;
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            tokio::task::spawn_blocking(move || {
                let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
                stream
                    .write_all(b"*3\r\n$9\r\nREPLICAOF\r\n$2\r\nNO\r\n$3\r\nONE\r\n")
                    .unwrap();
                let mut buf = [0; 64];
                let _ = stream.read(&mut buf);
            })
            .await
            .unwrap();
        })
    };
    let incr = redis::cmd("INCR").arg("orders:count").clone();
    let count: i64 = Command::new(&incr)
        .query(&policy(), &conn)
        .await
        .expect("retried after READONLY");
    promote.await.unwrap();
    assert_eq!(count, 1);
    assert_eq!(replica.integer("orders:count"), 1);
    assert!(
        replica.calls("incr") >= 2,
        "refused at least once, then applied once"
    );
}

/// A directory of the test's own under the system's temporary one,
/// removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("{name}-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// LOADING: a Redis that restarted reads its data back from disk and, until
// it is done, refuses commands with `LOADING`. Nothing was applied, so it
// is transient (the guide: a refusal for now is retried) and the GET is
// retried until the load ends, then answered with the loaded value. The
// dump is made big enough (2 million keys) that the load takes a second or
// more, so the call meets it.
#[tokio::test(flavor = "current_thread")]
#[ignore = "starts its own redis-server"]
async fn a_get_is_retried_over_loading_until_the_data_is_back() {
    const KEYS: &str = "2000000";
    let dir = TempDir::new("resilience-loading");
    let files = ["--dir", dir.path(), "--dbfilename", "dump.rdb"];
    {
        let writer = RedisChild::start(&[&files[..], &["--enable-debug-command", "yes"]].concat());
        // `DEBUG POPULATE` makes `key:0` … `key:N-1`, each `value:<n>`.
        assert_eq!(
            writer.raw(&["DEBUG", "POPULATE", KEYS]).as_deref(),
            Some("+OK")
        );
        assert_eq!(writer.raw(&["SAVE"]).as_deref(), Some("+OK"));
    }
    let redis = RedisChild::spawn(&files);
    redis.wait_for(|ping| ping.starts_with("-LOADING") || ping == "+PONG");
    let conn = manager(redis.addr()).await;
    let get = redis::cmd("GET").arg("key:42").clone();

    // Still loading: the server's own refusal, classified transient.
    let once = Policy::builder().with_max_attempts(1).build().unwrap();
    let err = Command::new(&get)
        .query::<Option<String>, _>(&once, &conn)
        .await
        .expect_err("the server is still loading its data");
    assert!(
        matches!(err, CommandError::Redis(ref e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading)),
        "{err:?}"
    );
    assert_eq!(err.classify(), Verdict::Transient);
    assert_eq!(Command::new(&get).verdict(&err), Verdict::Transient);
    assert_eq!(err.outcome(), resilience::Outcome::Failure);

    // Retried over LOADING, paused by the policy, until the load ends.
    let policy = Policy::builder()
        .with_max_attempts(100)
        .with_initial(Duration::from_millis(50))
        .with_max_interval(Duration::from_millis(200))
        .with_max_elapsed(Duration::from_secs(8))
        .build()
        .unwrap();
    let rejected_before = redis.rejected("get");
    let value: Option<String> = Command::new(&get)
        .query(&policy, &conn)
        .await
        .expect("answered once the data is loaded");
    assert_eq!(value.as_deref(), Some("value:42"));
    assert!(
        redis.rejected("get") > rejected_before,
        "the retried GET met LOADING at least once before its answer"
    );
    assert_eq!(redis.raw(&["DBSIZE"]).as_deref(), Some(":2000000"));
}

// WRONGTYPE is Redis's answer about the data, not a failure: not retried,
// and the dependency counts as up (SPEC §2: permanent errors).
#[tokio::test(flavor = "current_thread")]
#[ignore = "starts its own redis-server"]
async fn wrongtype_is_not_retried() {
    let redis = RedisChild::start(&[]);
    redis.raw(&["LPUSH", "cart:1", "apple"]).unwrap();
    let conn = manager(redis.addr()).await;
    let get = redis::cmd("GET").arg("cart:1").clone();
    let err = Command::new(&get)
        .query::<Option<String>, _>(&policy(), &conn)
        .await
        .unwrap_err();
    assert_eq!(err.classify(), Verdict::Permanent);
    assert_eq!(err.outcome(), resilience::Outcome::Success);
    assert_eq!(redis.calls("get"), 1, "one attempt");
}

// The classification the issue and the guide ask for, on the errors the
// `redis` crate builds (its `ServerErrorKind`s, and the codes it does not
// name, such as WRONGTYPE, as extension errors). Runs without a server.
mod classification {
    use redis::{ErrorKind, RedisError, ServerErrorKind, make_extension_error};
    use resilience::redis_commands::{Command, CommandError, may_have_been_applied};
    use resilience::{Classify, Outcome, Verdict};

    fn server(kind: ServerErrorKind) -> RedisError {
        RedisError::from((ErrorKind::Server(kind), "refused"))
    }

    fn io(kind: std::io::ErrorKind) -> RedisError {
        RedisError::from(std::io::Error::from(kind))
    }

    #[test]
    fn refusals_for_now_are_transient_and_not_applied() {
        for kind in [
            ServerErrorKind::BusyLoading,
            ServerErrorKind::TryAgain,
            ServerErrorKind::ClusterDown,
            ServerErrorKind::MasterDown,
            ServerErrorKind::ReadOnly,
        ] {
            let err = server(kind);
            assert_eq!(err.classify(), Verdict::Transient, "{kind:?}");
            assert_eq!(err.outcome(), Outcome::Failure, "{kind:?}");
            assert!(!may_have_been_applied(&err), "{kind:?}");
        }
    }

    #[test]
    fn transport_errors_are_transient() {
        for kind in [
            std::io::ErrorKind::ConnectionRefused,
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::ConnectionAborted,
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::UnexpectedEof,
            std::io::ErrorKind::TimedOut,
        ] {
            assert_eq!(io(kind).classify(), Verdict::Transient, "{kind:?}");
        }
        assert!(!may_have_been_applied(&io(
            std::io::ErrorKind::ConnectionRefused
        )));
        assert!(may_have_been_applied(&io(
            std::io::ErrorKind::ConnectionReset
        )));
        assert!(may_have_been_applied(&io(std::io::ErrorKind::TimedOut)));
    }

    #[test]
    fn answers_about_the_data_or_the_caller_are_permanent() {
        let errors = [
            make_extension_error(
                "WRONGTYPE".into(),
                Some("Operation against a key holding the wrong kind of value".into()),
            ),
            make_extension_error("NOAUTH".into(), Some("Authentication required.".into())),
            make_extension_error(
                "WRONGPASS".into(),
                Some("invalid username-password pair".into()),
            ),
            server(ServerErrorKind::NoScript),
            server(ServerErrorKind::ResponseError), // ERR syntax error
            server(ServerErrorKind::NoPerm),
            server(ServerErrorKind::ExecAbort),
            RedisError::from((ErrorKind::AuthenticationFailed, "auth")),
        ];
        for err in errors {
            assert_eq!(err.classify(), Verdict::Permanent, "{err:?}");
            assert_eq!(err.outcome(), Outcome::Success, "{err:?}");
        }
    }

    #[test]
    fn a_command_is_idempotent_by_its_name_and_options() {
        let idempotent = |cmd: &redis::Cmd| Command::new(cmd).is_idempotent();
        assert!(idempotent(redis::cmd("get").arg("k")));
        assert!(idempotent(
            redis::cmd("SET").arg("k").arg("v").arg("EX").arg(10)
        ));
        assert!(idempotent(redis::cmd("DEL").arg("k")));
        assert!(!idempotent(
            redis::cmd("SET").arg("lock").arg("me").arg("NX")
        ));
        assert!(!idempotent(
            redis::cmd("ZADD").arg("z").arg("INCR").arg(1).arg("m")
        ));
        for name in [
            "INCR", "INCRBY", "LPUSH", "RPUSH", "LPOP", "APPEND", "HINCRBY", "EVAL", "EVALSHA",
            "FCALL", "XADD", "SETNX",
        ] {
            assert!(!idempotent(&redis::cmd(name)), "{name}");
        }
        let incr = redis::cmd("INCR").arg("k").clone();
        assert!(Command::new(&incr).idempotent().is_idempotent());
    }

    #[test]
    fn a_lost_answer_stops_a_command_that_is_not_idempotent() {
        let incr = redis::cmd("INCR").arg("k").clone();
        let get = redis::cmd("GET").arg("k").clone();
        let reset = CommandError::Redis(io(std::io::ErrorKind::ConnectionReset));
        let readonly = CommandError::Redis(server(ServerErrorKind::ReadOnly));
        assert_eq!(Command::new(&incr).verdict(&reset), Verdict::Fatal);
        assert_eq!(Command::new(&incr).verdict(&readonly), Verdict::Transient);
        assert_eq!(Command::new(&get).verdict(&reset), Verdict::Transient);
        let timeout = CommandError::Resilience(resilience::Error::AttemptTimeout(
            std::time::Duration::from_millis(500),
        ));
        assert_eq!(Command::new(&incr).verdict(&timeout), Verdict::Fatal);
        assert_eq!(Command::new(&get).verdict(&timeout), Verdict::Transient);
    }
}
