//! What the fleet suites (`breaker_redis`, `limit_redis`) share: `redis-cli`
//! against a port, and a `redis-server` of a test's own that it kills or
//! freezes by its PID, never the machine's shared one.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::{Instant, sleep};

/// `redis-cli -p port args…`, its answer trimmed.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A `redis-server` of the test's own on its own port, keeping nothing on
/// disk; stopped by its PID on drop (woken first, if it was frozen).
pub struct OwnRedis(Child);

impl OwnRedis {
    /// Starts it and waits, at most 5 s, until it answers `PING`.
    pub async fn start(port: u16) -> OwnRedis {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let server = OwnRedis(child);
        let start = Instant::now();
        while redis_cli(port, &["PING"]) != "PONG" {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "own redis on port {port} answers"
            );
            sleep(Duration::from_millis(20)).await;
        }
        server
    }

    /// Sends it `signal` (`-STOP` freezes it, `-CONT` wakes it).
    #[allow(dead_code, reason = "the breaker suite only kills its server")]
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.0.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} {}", self.0.id());
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        // A frozen server still dies on SIGKILL; CONT first so that it
        // never lingers stopped if the kill is refused.
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.id().to_string()])
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
