use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Request, Response};
use http_body::{Body as _, Frame};
use http_body_util::Full;
use tonic::body::Body;
use tower_layer::Layer;
use tower_service::Service;

use super::{BoxError, Judged, ResilienceLayer, Resilient, Rules, copy_with, take_ready};
use crate::error::{ConfigError, Error};
use crate::retry::{Reason, RetryOverride, Verdict};

/// The largest request body a retried call keeps in memory for its next
/// attempts: 4 MiB, gRPC's default largest message.
pub const MAX_BUFFERED: usize = 4 * 1024 * 1024;

/// A [`ResilienceLayer`] for a tonic channel, from
/// [`ResilienceLayer::grpc`].
///
/// The layer below a tonic client (cargo feature `tonic`): the breaker
/// judges every call by its `grpc-status`, and the calls of the methods
/// declared idempotent are retried.
///
/// gRPC sends every call as an HTTP `POST` with a streaming body, so the
/// HTTP rules would send each one once. [`GrpcLayer`] has its own:
///
/// - **what is retried**: the methods given to
///   [`idempotent`](GrpcLayer::idempotent) (a full method,
///   `/package.Service/Method`, or every method of a service,
///   `/package.Service/`), as gRPC's service config names them; any other
///   call is sent once, still through the breaker.
///   [`RetryOverride`] in the request's extensions
///   (`tonic::Request::extensions_mut`) overrides it per call; with
///   [`ResilienceLayer::with_hedge`] they are hedged instead of retried;
/// - **which bodies**: a retried call's request body is read into memory
///   before the first attempt, if it is complete at once (a unary or a
///   client-streaming call from an in-memory iterator) and at most
///   [`MAX_BUFFERED`] bytes; a body still streaming (a bidirectional call)
///   or larger is sent once, whole, as it came;
/// - **what a status means**: read from the response headers, where a
///   server puts it when a call fails before any message (tonic does for
///   every `Err(Status)` of a unary handler):
///
/// | `grpc-status` | retried | breaker |
/// |---|---|---|
/// | `UNAVAILABLE` (14), `DEADLINE_EXCEEDED` (4) | yes | failure |
/// | `RESOURCE_EXHAUSTED` (8) | yes, after `grpc-retry-pushback-ms` when the server sends it | failure |
/// | `UNKNOWN` (2), `INTERNAL` (13), `DATA_LOSS` (15) | no | failure |
/// | `OK` and every other code (`NOT_FOUND`, `INVALID_ARGUMENT`, …) | no | success |
///
///   A status sent in trailers after messages (a streaming call that
///   fails midway) is not seen: the call counts as answered once its
///   headers arrive. A response without `grpc-status` in its headers is
///   judged by its HTTP status, as a proxy's `503` should be.
///
/// ```no_run
/// use resilience::tower::ResilienceLayer;
/// use tower::ServiceBuilder;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let channel = tonic::transport::Channel::from_static("http://127.0.0.1:50051")
///     .connect()
///     .await?;
/// let channel = ServiceBuilder::new()
///     .layer(ResilienceLayer::named("users").grpc().idempotent(["/users.Users/GetUser"])?)
///     .service(channel);
/// // `UsersClient::new(channel)`: the generated client, as usual.
/// # Ok(()) }
/// ```
///
/// ```
/// use resilience::tower::ResilienceLayer;
/// use resilience::Policy;
///
/// let layer = ResilienceLayer::new("users", Policy::http())
///     .grpc()
///     .idempotent(["/users.Users/GetUser", "/users.Search/"])?;
/// assert!(layer.is_idempotent("/users.Users/GetUser"));
/// assert!(layer.is_idempotent("/users.Search/Query"));
/// assert!(!layer.is_idempotent("/users.Users/CreateUser"));
///
/// let err = ResilienceLayer::new("users", Policy::http()).grpc().idempotent(["GetUser"]).unwrap_err();
/// assert_eq!((err.field(), err.value()), ("idempotent", "GetUser"));
/// # Ok::<(), resilience::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct GrpcLayer {
    layer: ResilienceLayer,
    idempotent: Arc<[Box<str>]>,
}

impl ResilienceLayer {
    /// This layer with gRPC's rules, for a tonic channel: no method is
    /// retried until declared [idempotent](GrpcLayer::idempotent).
    pub fn grpc(self) -> GrpcLayer {
        GrpcLayer {
            layer: self,
            idempotent: Arc::from(Vec::new()),
        }
    }
}

impl GrpcLayer {
    /// Declares `methods` safe to send twice, so that their calls are
    /// retried: full methods (`/package.Service/Method`) or services
    /// (`/package.Service/`, every method). The error names the first path
    /// of another shape.
    pub fn idempotent<'a>(
        mut self,
        methods: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, ConfigError> {
        let mut all: Vec<Box<str>> = self.idempotent.iter().cloned().collect();
        for method in methods {
            let mut parts = method.split('/');
            let shaped = parts.next() == Some("")
                && parts.next().is_some_and(|service| !service.is_empty())
                && parts.next().is_some()
                && parts.next().is_none();
            if !shaped {
                return Err(ConfigError::new(
                    format!("gRPC layer `{}`", self.layer.name()),
                    "idempotent",
                    method,
                    "a gRPC method is `/package.Service/Method`, or `/package.Service/` for every method of a service",
                ));
            }
            all.push(method.into());
        }
        self.idempotent = all.into();
        Ok(self)
    }

    /// Whether calls to the method at `path` are retried.
    pub fn is_idempotent(&self, path: &str) -> bool {
        self.idempotent.iter().any(|declared| {
            if declared.ends_with('/') {
                path.starts_with(&**declared) && !path[declared.len()..].contains('/')
            } else {
                **declared == *path
            }
        })
    }

    /// The HTTP layer underneath: its name, policy and breaker.
    pub fn http(&self) -> &ResilienceLayer {
        &self.layer
    }
}

impl<S> Layer<S> for GrpcLayer {
    type Service = GrpcResilient<S>;

    fn layer(&self, inner: S) -> GrpcResilient<S> {
        Resilient {
            inner,
            layer: self.clone(),
        }
    }
}

/// The [`Service`] a [`GrpcLayer`] wraps around a tonic channel.
pub type GrpcResilient<S> = Resilient<S, GrpcLayer>;

impl<S, RB> Service<Request<Body>> for GrpcResilient<S>
where
    S: Service<Request<Body>, Response = Response<RB>> + Clone + Send + 'static,
    S::Error: Into<BoxError> + Send + 'static,
    S::Future: Send,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let ready = take_ready(&mut self.inner);
        let grpc = self.layer.clone();
        Box::pin(async move { grpc.send(ready, request).await.map_err(into_status) })
    }
}

/// The runtime's errors as the `Status` a gRPC caller handles, the
/// runtime's error its source: an open breaker is `UNAVAILABLE`, time run
/// out `DEADLINE_EXCEEDED`. The channel's own errors pass as they are.
fn into_status(error: BoxError) -> BoxError {
    let Some(runtime) = error.downcast_ref::<Error>() else {
        return error;
    };
    let code = match runtime {
        Error::DeadlineExceeded { .. }
        | Error::MaxElapsedExceeded { .. }
        | Error::AttemptTimeout(_) => tonic::Code::DeadlineExceeded,
        _ => tonic::Code::Unavailable,
    };
    let mut status = tonic::Status::new(code, runtime.to_string());
    status.set_source(Arc::from(error));
    Box::new(status)
}

impl GrpcLayer {
    /// One call under the rules of the [module docs](self).
    async fn send<S, RB>(&self, ready: S, request: Request<Body>) -> Result<Response<RB>, BoxError>
    where
        S: Service<Request<Body>, Response = Response<RB>> + Clone,
        S::Error: Into<BoxError>,
    {
        let layer = &self.layer;
        let once = match request.extensions().get::<RetryOverride>() {
            Some(RetryOverride::Never) => Some("the request asked to be sent once"),
            Some(RetryOverride::Idempotent) => None,
            None if self.is_idempotent(request.uri().path()) => None,
            None => Some("the method is not declared idempotent"),
        };
        if layer.sent_once(once, &request) {
            return layer.send_once(ready, request, Rules::Grpc).await;
        }
        let (parts, body) = request.into_parts();
        match buffer(body) {
            Buffered::Whole(bytes) => {
                let template = Request::from_parts(parts, ());
                let replay = move |template: &Request<()>| {
                    copy_with(template, Body::new(Full::new(bytes.clone())))
                };
                layer
                    .send_retried(ready, template, replay, Rules::Grpc)
                    .await
            }
            Buffered::Streaming(body) => {
                let request = Request::from_parts(parts, body);
                let once = Some("its body is still streaming or larger than 4 MiB");
                layer.sent_once(once, &request);
                layer.send_once(ready, request, Rules::Grpc).await
            }
        }
    }
}

/// A request body read as far as it goes without waiting.
enum Buffered {
    /// All of it: the call can be sent again.
    Whole(Bytes),
    /// What was read, then the rest as it comes: sent once.
    Streaming(Body),
}

/// Reads `body` while its frames are ready, up to [`MAX_BUFFERED`] bytes.
fn buffer(mut body: Body) -> Buffered {
    let mut read: VecDeque<Bytes> = VecDeque::new();
    let mut len = 0;
    // A body that is not ready now is a stream still being written:
    // waiting for its end could wait for the response it feeds.
    let mut cx = Context::from_waker(std::task::Waker::noop());
    loop {
        if body.is_end_stream() {
            break;
        }
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(None) => break,
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    len += data.len();
                    read.push_back(data);
                    if len > MAX_BUFFERED {
                        return Buffered::Streaming(ReadAhead::then(read, Then::Rest(body)));
                    }
                }
                // Trailers in a request: sent once, as it came.
                Err(frame) => {
                    let trailers = frame.into_trailers().ok();
                    return Buffered::Streaming(ReadAhead::then(read, Then::Trailers(trailers)));
                }
            },
            Poll::Ready(Some(Err(status))) => {
                return Buffered::Streaming(ReadAhead::then(read, Then::Failed(Some(status))));
            }
            Poll::Pending => return Buffered::Streaming(ReadAhead::then(read, Then::Rest(body))),
        }
    }
    // A unary call's body is one frame: kept as it is, not copied.
    if read.len() == 1 {
        return Buffered::Whole(read.pop_front().unwrap_or_default());
    }
    let mut whole = BytesMut::with_capacity(len);
    for chunk in read {
        whole.extend_from_slice(&chunk);
    }
    Buffered::Whole(whole.freeze())
}

/// What was read of a body ahead of sending it, then what came after.
struct ReadAhead {
    read: VecDeque<Bytes>,
    then: Then,
}

enum Then {
    /// The rest of the body, as it comes.
    Rest(Body),
    /// Its trailers, read too.
    Trailers(Option<HeaderMap>),
    /// The error it failed with.
    Failed(Option<tonic::Status>),
}

impl ReadAhead {
    fn then(read: VecDeque<Bytes>, then: Then) -> Body {
        Body::new(ReadAhead { read, then })
    }
}

impl http_body::Body for ReadAhead {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(data) = self.read.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        match &mut self.then {
            Then::Rest(body) => Pin::new(body).poll_frame(cx),
            Then::Trailers(trailers) => {
                Poll::Ready(trailers.take().map(|t| Ok(Frame::trailers(t))))
            }
            Then::Failed(status) => Poll::Ready(status.take().map(Err)),
        }
    }
}

/// The verdict of the `grpc-status` in `headers`, per the table of the
/// [module docs](self): `Some(None)` for an answer that stands, `None`
/// when the headers carry no status.
pub(super) fn judge(headers: &HeaderMap) -> Option<Option<Judged>> {
    let code: u32 = headers
        .get("grpc-status")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let judged = |verdict, reason| Some(Judged { verdict, reason });
    Some(match code {
        14 => judged(Verdict::Transient, Some(Reason::ServerError)),
        4 => judged(Verdict::Transient, Some(Reason::Timeout)),
        8 => {
            let pushback = headers
                .get("grpc-retry-pushback-ms")
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.trim().parse::<u64>().ok());
            let verdict = pushback.map_or(Verdict::Transient, |ms| {
                Verdict::RetryAfter(Duration::from_millis(ms))
            });
            judged(verdict, Some(Reason::ServerError))
        }
        2 | 13 | 15 => judged(Verdict::Fatal, Some(Reason::ServerError)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: &str, pushback: Option<&str>) -> Option<Option<Judged>> {
        let mut headers = HeaderMap::new();
        headers.insert("grpc-status", code.parse().unwrap());
        if let Some(ms) = pushback {
            headers.insert("grpc-retry-pushback-ms", ms.parse().unwrap());
        }
        judge(&headers)
    }

    #[test]
    fn statuses_are_judged_by_the_table() {
        let verdict = |code, pushback| status(code, pushback).map(|j| j.map(|j| j.verdict));
        assert_eq!(verdict("14", None), Some(Some(Verdict::Transient)));
        assert_eq!(verdict("4", None), Some(Some(Verdict::Transient)));
        assert_eq!(
            verdict("8", Some("250")),
            Some(Some(Verdict::RetryAfter(Duration::from_millis(250))))
        );
        assert_eq!(verdict("8", Some("soon")), Some(Some(Verdict::Transient)));
        assert_eq!(verdict("13", None), Some(Some(Verdict::Fatal)));
        for answer in ["0", "5", "3", "7", "16"] {
            assert_eq!(verdict(answer, None), Some(None), "{answer}");
        }
        // Garbage is no status: the HTTP status judges.
        assert!(verdict("fourteen", None).is_none());
        assert!(judge(&HeaderMap::new()).is_none());
    }

    #[test]
    fn a_ready_body_is_buffered_and_a_pending_one_is_passed_on_whole() {
        let body = Body::new(Full::new(Bytes::from_static(b"\0\0\0\0\x02hi")));
        assert!(matches!(buffer(body), Buffered::Whole(bytes) if &bytes[..] == b"\0\0\0\0\x02hi"));

        struct Later(u8);
        impl http_body::Body for Later {
            type Data = Bytes;
            type Error = std::convert::Infallible;
            fn poll_frame(
                mut self: Pin<&mut Self>,
                cx: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
                self.0 += 1;
                match self.0 {
                    1 => Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"first"))))),
                    2 => {
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                    3 => Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"second"))))),
                    _ => Poll::Ready(None),
                }
            }
        }
        let Buffered::Streaming(mut rest) = buffer(Body::new(Later(0))) else {
            panic!("a pending body is not buffered");
        };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut read = Vec::new();
        while let Poll::Ready(Some(frame)) = Pin::new(&mut rest).poll_frame(&mut cx) {
            read.extend_from_slice(&frame.unwrap().into_data().unwrap());
        }
        assert_eq!(read, b"firstsecond");
    }
}
