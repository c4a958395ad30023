//! S3 through the AWS SDK for Rust, against a real S3-compatible server
//! (`s3s-fs`, installed by `.ci/install-servers`) on loopback, behind the
//! project's fault proxy.
//!
//! Not part of the default `cargo test`; run with
//!
//! ```text
//! .ci/install-servers
//! cargo test --all-features --test s3 -- --ignored --test-threads 1
//! ```
//!
//! Each test starts its own `s3s-fs` on a free port over a fresh temporary
//! folder, and kills it by its PID when it ends.

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;

const ACCESS_KEY: &str = "resilience-test";
const SECRET_KEY: &str = "resilience-test-secret";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// An `s3s-fs` child serving a temporary folder on its own port; killed by
/// its PID, and its folder removed, on drop.
struct S3Server {
    addr: SocketAddr,
    root: PathBuf,
    child: Child,
}

impl S3Server {
    fn start() -> Self {
        let port = free_port();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let root =
            std::env::temp_dir().join(format!("resilience-s3-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&root).expect("create the server's folder");
        let child = Command::new("s3s-fs")
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(&root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("s3s-fs must be installed (.ci/install-servers)");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err() {
            assert!(
                Instant::now() < deadline,
                "s3s-fs did not listen on {addr} within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { addr, root, child }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// An SDK client for `addr`: path-style addressing, static credentials,
/// plain HTTP, no TLS stack.
fn client_config(addr: SocketAddr) -> aws_sdk_s3::config::Builder {
    aws_sdk_s3::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(format!("http://{addr}"))
        .force_path_style(true)
        .credentials_provider(Credentials::new(ACCESS_KEY, SECRET_KEY, None, None, "test"))
        .http_client(aws_smithy_http_client::Builder::new().build_http())
}

#[tokio::test]
#[ignore = "starts its own s3s-fs (.ci/install-servers)"]
async fn sdk_talks_to_the_server() {
    let server = S3Server::start();
    let s3 = aws_sdk_s3::Client::from_conf(client_config(server.addr).build());
    s3.create_bucket()
        .bucket("avatars")
        .send()
        .await
        .expect("create the bucket");
    s3.put_object()
        .bucket("avatars")
        .key("ann")
        .body(ByteStream::from_static(b"ann's avatar"))
        .send()
        .await
        .expect("put");
    let object = s3
        .get_object()
        .bucket("avatars")
        .key("ann")
        .send()
        .await
        .expect("get");
    let body = object
        .body
        .collect()
        .await
        .expect("read the body")
        .into_bytes();
    assert_eq!(&body[..], b"ann's avatar");
    let missing = s3
        .get_object()
        .bucket("avatars")
        .key("bob")
        .send()
        .await
        .unwrap_err();
    let service = missing.into_service_error();
    assert!(service.is_no_such_key(), "{service:?}");
}
