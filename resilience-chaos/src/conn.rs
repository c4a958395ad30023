//! One proxied connection: the two directions, and where each fault fires.

use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::watch;
use tokio::time::{Instant, sleep, sleep_until, timeout};

use crate::Toxic;
use crate::faults::Counters;
use crate::toxic::{Plan, RESPONSE_CAP};

const BUFFER: usize = 16 * 1024;

/// How a connection ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Cleanly: FIN passed on (or being passed on) both ways.
    Close,
    /// An RST to the client (a fault, or the upstream's own reset).
    ResetClient,
    /// An I/O error on the client's side: RST both ways.
    Abort,
}

/// Serves one accepted connection according to its `plan`.
pub(crate) async fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    plan: Plan,
    counters: &Counters,
) {
    let Plan {
        latency,
        bandwidth,
        fault,
        mut rng,
    } = plan;
    match fault {
        Some(toxic @ Toxic::Blackhole) => {
            counters.injected(toxic);
            drain(client).await;
            return;
        }
        Some(toxic @ Toxic::ResetBeforeForward) => {
            let mut client = client;
            // Wait for the request (or the client's close), never forward it.
            let _ = client.read(&mut [0; 1024]).await;
            counters.injected(toxic);
            reset(&client);
            return;
        }
        _ => {}
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        counters.upstream_error();
        reset(&client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // When the proxy last forwarded client bytes: `None` until the first
    // ones, which start the "response".
    let (forwarded, forwarded_rx) = watch::channel(None::<Instant>);
    // Whether the client's bytes held the request a toxic waits for.
    let trigger = match fault {
        Some(Toxic::ResetAfterResponseTo { request, .. }) => Some(request),
        _ => None,
    };
    let (armed, armed_rx) = watch::channel(false);

    let end = {
        let mut up = pin!(pump_up(
            &mut client_read,
            &mut server_write,
            latency,
            bandwidth.map(Throttle::new),
            &mut rng,
            &forwarded,
            trigger.map(|request| (request, &armed)),
        ));
        let mut down = pin!(pump_down(
            &mut server_read,
            &mut client_write,
            bandwidth.map(Throttle::new),
            fault,
            forwarded_rx,
            armed_rx,
            counters,
        ));
        let mut up_done = false;
        loop {
            tokio::select! {
                result = &mut up, if !up_done => match result {
                    Ok(()) => up_done = true,
                    Err(_) => break End::Abort,
                },
                result = &mut down => break result.unwrap_or(End::ResetClient),
            }
        }
    };
    match end {
        End::Close => {}
        End::ResetClient => {
            if let Ok(client) = client_read.reunite(client_write) {
                reset(&client);
            }
        }
        End::Abort => {
            if let Ok(client) = client_read.reunite(client_write) {
                reset(&client);
            }
            if let Ok(server) = server_read.reunite(server_write) {
                reset(&server);
            }
        }
    }
}

/// Client → upstream: latency, bandwidth, and the client's half-close
/// passed on.
async fn pump_up(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    latency: Option<(Duration, Duration)>,
    mut throttle: Option<Throttle>,
    rng: &mut StdRng,
    forwarded: &watch::Sender<Option<Instant>>,
    trigger: Option<(&'static [u8], &watch::Sender<bool>)>,
) -> io::Result<()> {
    let mut buf = vec![0; BUFFER];
    // The last bytes read, so that a request split across reads matches.
    let mut tail = Vec::new();
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            to.shutdown().await?;
            return Ok(());
        }
        if let Some((delay, jitter)) = latency {
            let jitter_nanos = u64::try_from(jitter.as_nanos()).unwrap_or(u64::MAX);
            sleep(delay.saturating_add(Duration::from_nanos(rng.random_range(0..=jitter_nanos))))
                .await;
        }
        if let Some((request, armed)) = trigger.filter(|(_, armed)| !*armed.borrow()) {
            tail.extend_from_slice(&buf[..n]);
            if tail.windows(request.len()).any(|window| window == request) {
                // Before the write, as below: the answer may come first.
                armed.send_replace(true);
            }
            let keep = request.len().saturating_sub(1);
            tail.drain(..tail.len().saturating_sub(keep));
        }
        // Marked before the write too: the upstream may answer before the
        // write returns.
        forwarded.send_replace(Some(Instant::now()));
        write(to, &buf[..n], throttle.as_mut()).await?;
        forwarded.send_replace(Some(Instant::now()));
    }
}

/// Upstream → client: bandwidth, and every fault that fires once the
/// request reached the upstream. An error here is the upstream's (its reset
/// is passed on to the client as a reset), or the client's write side.
async fn pump_down(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    mut throttle: Option<Throttle>,
    fault: Option<Toxic>,
    mut forwarded: watch::Receiver<Option<Instant>>,
    armed: watch::Receiver<bool>,
    counters: &Counters,
) -> io::Result<End> {
    let mut buf = vec![0; BUFFER];
    // Response bytes forwarded so far: bytes after the client's first ones.
    let mut response: u64 = 0;
    loop {
        let n = match fault {
            Some(toxic @ Toxic::ResetBeforeResponse { wait }) => loop {
                let last = *forwarded.borrow_and_update();
                tokio::select! {
                    read = from.read(&mut buf) => {
                        let n = read?;
                        if forwarded.borrow().is_some() {
                            // The upstream answered: the request was
                            // processed. Not a byte of it is passed on.
                            counters.injected(toxic);
                            return Ok(End::ResetClient);
                        }
                        break n;
                    }
                    () = sleep_until(later(last.unwrap_or_else(Instant::now), wait)), if last.is_some() => {
                        counters.injected(toxic);
                        return Ok(End::ResetClient);
                    }
                    changed = forwarded.changed() => {
                        if changed.is_err() {
                            // The sender lives as long as the connection.
                            return Ok(End::ResetClient);
                        }
                    }
                }
            },
            _ => from.read(&mut buf).await?,
        };
        if n == 0 {
            to.shutdown().await?;
            return Ok(End::Close);
        }
        let chunk = &buf[..n];
        if forwarded.borrow().is_none() {
            // A greeting, sent before any request: not a response.
            write(to, chunk, throttle.as_mut()).await?;
            continue;
        }
        match fault {
            Some(
                toxic @ (Toxic::ResetMidResponse { after_bytes }
                | Toxic::CloseMidBody { after_bytes }),
            ) => {
                let remaining = after_bytes.saturating_sub(response);
                let len = u64::try_from(chunk.len()).unwrap_or(u64::MAX);
                if len < remaining {
                    write(to, chunk, throttle.as_mut()).await?;
                    response += len;
                    continue;
                }
                let head = usize::try_from(remaining).unwrap_or(chunk.len());
                write(to, &chunk[..head], throttle.as_mut()).await?;
                to.flush().await?;
                counters.injected(toxic);
                if matches!(toxic, Toxic::CloseMidBody { .. }) {
                    to.shutdown().await?;
                    return Ok(End::Close);
                }
                return Ok(End::ResetClient);
            }
            Some(toxic @ Toxic::ResetAfterResponse { quiet }) => {
                discard_response(from, n, quiet).await;
                counters.injected(toxic);
                return Ok(End::ResetClient);
            }
            Some(toxic @ Toxic::ResetAfterResponseTo { quiet, .. }) if *armed.borrow() => {
                discard_response(from, n, quiet).await;
                counters.injected(toxic);
                return Ok(End::ResetClient);
            }
            _ => write(to, chunk, throttle.as_mut()).await?,
        }
    }
}

/// Reads the rest of a response whose first `first` bytes were read, and
/// throws it away: until the upstream closes, stays `quiet`, or has sent
/// [`RESPONSE_CAP`] bytes.
async fn discard_response(from: &mut OwnedReadHalf, first: usize, quiet: Duration) {
    let mut buf = vec![0; BUFFER];
    let mut seen = u64::try_from(first).unwrap_or(u64::MAX);
    while seen < RESPONSE_CAP {
        match timeout(quiet, from.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) | Err(_) => break,
            Ok(Ok(n)) => seen += u64::try_from(n).unwrap_or(u64::MAX),
        }
    }
}

/// Reads and discards everything the client sends, until it closes.
async fn drain(mut client: TcpStream) {
    let mut buf = vec![0; BUFFER];
    while let Ok(1..) = client.read(&mut buf).await {}
}

/// Makes the next close of `stream` an RST (`SO_LINGER` of zero).
fn reset(stream: &TcpStream) {
    // `set_linger` is deprecated because a non-zero linger blocks the
    // thread on close; a zero one does not (tokio 1.50 names it
    // `set_zero_linger`, the workspace allows 1.49).
    #[allow(deprecated)]
    let _ = stream.set_linger(Some(Duration::ZERO));
}

async fn write<W: AsyncWrite + Unpin>(
    to: &mut W,
    bytes: &[u8],
    throttle: Option<&mut Throttle>,
) -> io::Result<()> {
    match throttle {
        Some(throttle) => throttle.write(to, bytes).await,
        None => to.write_all(bytes).await,
    }
}

/// A rate limit on one direction.
#[derive(Debug)]
struct Throttle {
    bytes_per_sec: u64,
    /// Since when `sent` bytes were written without a pause in the traffic.
    since: Instant,
    sent: u64,
}

impl Throttle {
    fn new(bytes_per_sec: u64) -> Self {
        Self {
            bytes_per_sec: bytes_per_sec.max(1),
            since: Instant::now(),
            sent: 0,
        }
    }

    /// Writes `bytes` in slices of a twentieth of a second's worth, pausing
    /// after each so that the rate stays at or below the limit.
    async fn write<W: AsyncWrite + Unpin>(&mut self, to: &mut W, bytes: &[u8]) -> io::Result<()> {
        let slice = usize::try_from(self.bytes_per_sec / 20)
            .unwrap_or(usize::MAX)
            .max(1);
        if Instant::now() > self.due() {
            // Idle time earns no credit.
            self.since = Instant::now();
            self.sent = 0;
        }
        for piece in bytes.chunks(slice) {
            to.write_all(piece).await?;
            self.sent += u64::try_from(piece.len()).unwrap_or(u64::MAX);
            sleep_until(self.due()).await;
        }
        Ok(())
    }

    fn due(&self) -> Instant {
        let secs = self.sent as f64 / self.bytes_per_sec as f64;
        later(
            self.since,
            Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX),
        )
    }
}

/// `at + delay`, or a year after `at` when that overflows.
fn later(at: Instant, delay: Duration) -> Instant {
    at.checked_add(delay)
        .unwrap_or_else(|| at + Duration::from_secs(365 * 24 * 3600))
}
