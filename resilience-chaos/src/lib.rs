//! A fault-injecting TCP proxy for tests, in the spirit of toxiproxy: put
//! it between a client and a real server, and the client meets latency, a
//! slow link, a server that never answers, refused connections, resets
//! before and after the request reached the server, and truncated
//! responses.
//!
//! ```
//! use resilience_chaos::{Proxy, Toxic};
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! # let upstream = echo.local_addr()?;
//! # tokio::spawn(async move { while let Ok((mut s, _)) = echo.accept().await {
//! #     tokio::spawn(async move { let (mut r, mut w) = s.split(); tokio::io::copy(&mut r, &mut w).await }); } });
//!
//! let proxy = Proxy::builder(upstream)                    // the real server's address
//!     .seed(7)                                            // replayable choices
//!     .toxic(Toxic::reset_after_response(), 0.1)          // 10 % of connections
//!     .start().await?;
//! let client_addr = proxy.addr();                         // give this to the client
//! # let _ = tokio::net::TcpStream::connect(client_addr).await?;
//! # Ok(()) }
//! ```
//!
//! # Toxics
//!
//! | toxic | the client sees | the upstream sees |
//! |---|---|---|
//! | [`Toxic::Latency`] | each round trip `delay..=delay + jitter` slower | the request late |
//! | [`Toxic::Bandwidth`] | at most `bytes_per_sec` each way | the same |
//! | [`Toxic::Blackhole`] | a connection that never answers: its own timeout | nothing |
//! | [`Proxy::refuse`] | `ConnectionRefused` | nothing |
//! | [`Toxic::ResetBeforeForward`] | `ConnectionReset` after sending | nothing |
//! | [`Toxic::ResetBeforeResponse`] | `ConnectionReset`, no response byte | the request |
//! | [`Toxic::ResetMidResponse`] | `after_bytes` of the response, then `ConnectionReset` | the request, answered |
//! | [`Toxic::ResetAfterResponse`] | `ConnectionReset` instead of the response | the request, answered in full |
//! | [`Toxic::ResetAfterResponseTo`] | everything up to the request holding its bytes, then `ConnectionReset` instead of that request's answer | every request, that one answered (a `COMMIT` applied) |
//! | [`Toxic::CloseMidBody`] | `after_bytes` of the response, then EOF | the request, answered |
//!
//! # HTTP faults
//!
//! [`HttpProxy`] reads HTTP/1.1 requests: it answers chosen ones itself
//! (S3's `503 SlowDown`, any [`HttpReply`]) and forwards the others,
//! counting the requests the real server saw. Chain it with a [`Proxy`]
//! for resets and latency.
//!
//! # Choice per connection
//!
//! Each accepted connection is given its toxics once, from the current
//! [`Toxics`]: each shaping toxic (latency, bandwidth) with its own
//! probability, and at most one faulting toxic, drawn with one uniform
//! number against the faulting toxics' cumulative probabilities (so those
//! add up to at most 1). The generator is a [`StdRng`](rand::rngs::StdRng)
//! seeded by [`Builder::seed`] (or at random, readable with
//! [`Proxy::seed`]): connections accepted in the same order get the same
//! toxics. With HTTP/1.1 keep-alive one connection carries many requests,
//! and the choice applies to the connection; a client that opens a
//! connection per request (reqwest's `pool_max_idle_per_host(0)`) gets one
//! choice per request.
//!
//! # When the request reached the server
//!
//! At TCP level, the *response* is what the upstream sends once the proxy
//! has begun forwarding the client's bytes. [`Toxic::ResetBeforeResponse`]
//! resets the client at the response's first byte, which it never passes on
//! (the upstream processed the request), or after the upstream stayed silent
//! for `wait` after the client's latest bytes. [`Toxic::ResetMidResponse`]
//! and [`Toxic::CloseMidBody`] count response bytes from the first one.
//! [`Toxic::ResetAfterResponse`] reads the whole response (until the
//! upstream closes, goes `quiet`, or [`RESPONSE_CAP`] bytes) and discards
//! it.
//!
//! # Bounded
//!
//! The proxy listens on `127.0.0.1` only. Dropping the [`Proxy`] closes its
//! listener and aborts every connection task; [`Proxy::shutdown`] does the
//! same and waits for it.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod conn;
mod error;
mod faults;
mod http;
mod proxy;
mod toxic;

pub use error::Error;
pub use faults::Faults;
pub use http::{HttpBuilder, HttpProxy, HttpReply};
pub use proxy::{Builder, Proxy};
pub use toxic::{DEFAULT_QUIET, DEFAULT_RESPONSE_WAIT, RESPONSE_CAP, Toxic, Toxics};
