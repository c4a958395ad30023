//! The tower `Layer` and `Service`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header::HeaderName};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use super::body::{BoxError, ResponseBody};
use super::config::IdempotencyConfig;
use super::reject::Rejection;
use super::store::{Begin, Entry, Fingerprint, IdempotencyStore, Lease, Outcome, StoredResponse};
use crate::idempotency::IdempotencyKey;
use crate::retry::{Classify, HttpStatus};

/// [`IDEMPOTENCY_KEY_HEADER`](crate::idempotency::IDEMPOTENCY_KEY_HEADER), pre-parsed.
const KEY_HEADER: HeaderName = HeaderName::from_static("idempotency-key");
/// [`IDEMPOTENCY_REPLAY_HEADER`](crate::idempotency::IDEMPOTENCY_REPLAY_HEADER), pre-parsed.
const REPLAY_HEADER: HeaderName = HeaderName::from_static("x-idempotency-replay");

/// Applies [`Idempotency`] to a service: see the [module docs](super).
pub struct IdempotencyLayer<St> {
    store: Arc<St>,
    config: Arc<IdempotencyConfig>,
}

impl<St: IdempotencyStore> IdempotencyLayer<St> {
    /// A layer with the [default settings](IdempotencyConfig#default).
    pub fn new(store: St) -> Self {
        Self::with_config(store, IdempotencyConfig::default())
    }

    /// A layer with the given settings.
    pub fn with_config(store: St, config: IdempotencyConfig) -> Self {
        Self {
            store: Arc::new(store),
            config: Arc::new(config),
        }
    }

    /// The store.
    pub fn store(&self) -> &St {
        &self.store
    }
}

impl<St> Clone for IdempotencyLayer<St> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            config: Arc::clone(&self.config),
        }
    }
}

impl<St> fmt::Debug for IdempotencyLayer<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("store", &std::any::type_name::<St>())
            .field("config", &self.config)
            .finish()
    }
}

impl<S, St> Layer<S> for IdempotencyLayer<St> {
    type Service = Idempotency<S, St>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotency {
            inner,
            store: Arc::clone(&self.store),
            config: Arc::clone(&self.config),
        }
    }
}

/// A service that runs its inner service at most once per
/// `Idempotency-Key` and replays the stored response afterwards.
///
/// Built by [`IdempotencyLayer`]; see the [module docs](super) for what it
/// answers and when.
pub struct Idempotency<S, St> {
    inner: S,
    store: Arc<St>,
    config: Arc<IdempotencyConfig>,
}

impl<S: Clone, St> Clone for Idempotency<S, St> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            store: Arc::clone(&self.store),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, St> fmt::Debug for Idempotency<S, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency")
            .field("inner", &self.inner)
            .field("store", &std::any::type_name::<St>())
            .field("config", &self.config)
            .finish()
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

pin_project! {
    /// The future of [`Idempotency`]: the inner future itself for requests
    /// that pass through, a boxed one for guarded requests (which wait on
    /// the store anyway).
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: FutureKind<F, B, E>,
    }
}

pin_project! {
    #[project = FutureKindProj]
    enum FutureKind<F, B, E> {
        Passthrough { #[pin] future: F },
        Ready { response: Option<Response<ResponseBody<B>>> },
        Guarded { future: BoxFuture<Result<Response<ResponseBody<B>>, E>> },
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            FutureKindProj::Passthrough { future } => future
                .poll(cx)
                .map(|result| result.map(|response| response.map(ResponseBody::inner))),
            FutureKindProj::Ready { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response)),
                // Only a caller polling after completion gets here.
                None => Poll::Pending,
            },
            FutureKindProj::Guarded { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, B, E> fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            FutureKind::Passthrough { .. } => "Passthrough",
            FutureKind::Ready { .. } => "Ready",
            FutureKind::Guarded { .. } => "Guarded",
        };
        f.debug_struct("ResponseFuture")
            .field("kind", &kind)
            .finish()
    }
}

impl<S, St, ReqBody, ResBody> Service<Request<ReqBody>> for Idempotency<S, St>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    St: IdempotencyStore,
    ReqBody: Body + From<Bytes> + Send + 'static,
    ReqBody::Data: Send,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        if !self.config.guards(request.method()) {
            let future = self.inner.call(request);
            return ResponseFuture {
                kind: FutureKind::Passthrough { future },
            };
        }
        let key = match key_of(request.headers()) {
            Ok(key) => key,
            Err(rejection) => {
                tracing::debug!(
                    method = %request.method(),
                    path = request.uri().path(),
                    error = rejection.code(),
                    "request rejected by the idempotency layer",
                );
                return ResponseFuture {
                    kind: FutureKind::Ready {
                        response: Some(rejection.into_response()),
                    },
                };
            }
        };
        // The clone that was driven to readiness goes with the request.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let future = guarded(
            inner,
            Arc::clone(&self.store),
            Arc::clone(&self.config),
            key,
            request,
        );
        ResponseFuture {
            kind: FutureKind::Guarded {
                future: Box::pin(future),
            },
        }
    }
}

fn key_of(headers: &HeaderMap) -> Result<IdempotencyKey, Rejection> {
    let mut values = headers.get_all(KEY_HEADER).iter();
    let value = values.next().ok_or(Rejection::MissingKey)?;
    if values.next().is_some() {
        return Err(Rejection::InvalidKey(
            "the header appears more than once; send exactly one key".into(),
        ));
    }
    let text = value.to_str().map_err(|_| {
        Rejection::InvalidKey(format!(
            "{value:?} is not visible ASCII; use 1 to {} visible ASCII characters",
            crate::idempotency::MAX_KEY_LEN
        ))
    })?;
    IdempotencyKey::from_string(text).map_err(|err| Rejection::InvalidKey(err.to_string()))
}

/// Whether a handler's status may be stored: never one that the client is
/// expected to retry (SPEC §2: 408, 429, 5xx), or the retry would replay
/// the failure instead of running the handler again.
fn storable(status: StatusCode) -> bool {
    !status.is_server_error() && !HttpStatus(status.as_u16()).classify().is_retryable()
}

async fn guarded<S, St, ReqBody, ResBody>(
    mut inner: S,
    store: Arc<St>,
    config: Arc<IdempotencyConfig>,
    key: IdempotencyKey,
    request: Request<ReqBody>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    St: IdempotencyStore,
    ReqBody: Body + From<Bytes>,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, config.max_request_body).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(err) if err.is::<LengthLimitError>() => {
            return Ok(Rejection::RequestTooLarge {
                limit: config.max_request_body,
            }
            .into_response());
        }
        Err(err) => return Ok(Rejection::RequestUnreadable(err.to_string()).into_response()),
    };
    let fingerprint = Fingerprint::of_request(
        &parts.method,
        &parts.uri,
        &parts.headers,
        &config.fingerprint_headers,
        &body,
    );
    let lease = Lease::new(fingerprint);
    match store.begin(&key, &lease, config.lock_ttl).await {
        Ok(Begin::Started) => {}
        Ok(Begin::Existing(entry)) => return Ok(answer_existing(&key, entry, fingerprint)),
        Err(err) => {
            tracing::error!(%key, error = %err, "idempotency store failed; request refused");
            return Ok(Rejection::StoreUnavailable.into_response());
        }
    }

    let mut guard = LeaseGuard {
        store: Some(Arc::clone(&store)),
        key: key.clone(),
        lease: lease.clone(),
        answered: None,
        ttl: config.ttl,
    };
    let response = match inner
        .call(Request::from_parts(parts, ReqBody::from(body)))
        .await
    {
        Ok(response) => response,
        Err(err) => {
            guard.release("the service failed").await;
            return Err(err);
        }
    };
    let (parts, body) = response.into_parts();
    if !storable(parts.status) {
        guard
            .release("the handler answered a retryable status")
            .await;
        return Ok(Response::from_parts(parts, ResponseBody::inner(body)));
    }
    guard.answered = Some(parts.status);

    match read_bounded(Box::pin(body), config.max_stored_body).await {
        Read::Complete { data, trailers } => {
            let stored = StoredResponse::capture(
                parts.status,
                &parts.headers,
                &config.stored_headers,
                data.clone(),
            );
            guard.complete(&Outcome::Response(stored), &config).await;
            Ok(Response::from_parts(
                parts,
                ResponseBody::buffered(data, trailers, None),
            ))
        }
        Read::TooLarge { prefix, rest } => {
            let limit = config.max_stored_body as u64;
            tracing::warn!(
                %key,
                status = parts.status.as_u16(),
                limit,
                "response too large to store: delivered once, later requests with the key get 409",
            );
            let outcome = Outcome::TooLarge {
                status: parts.status,
                limit,
            };
            guard.complete(&outcome, &config).await;
            Ok(Response::from_parts(
                parts,
                ResponseBody::spilled(prefix, rest),
            ))
        }
        Read::Failed { prefix, error } => {
            // The handler's work is done (its status says so): releasing
            // the key would let the retry do it twice.
            tracing::warn!(
                %key,
                status = parts.status.as_u16(),
                %error,
                "response body failed: later requests with the key get 409",
            );
            let outcome = Outcome::BodyFailed {
                status: parts.status,
            };
            guard.complete(&outcome, &config).await;
            Ok(Response::from_parts(
                parts,
                ResponseBody::buffered(prefix, None, Some(error)),
            ))
        }
    }
}

fn answer_existing<B>(
    key: &IdempotencyKey,
    entry: Entry,
    fingerprint: Fingerprint,
) -> Response<ResponseBody<B>> {
    if entry.fingerprint() != fingerprint {
        tracing::info!(%key, "idempotency key reused for a different request");
        return Rejection::KeyReused.into_response();
    }
    match entry {
        Entry::InFlight { .. } => {
            tracing::info!(%key, "idempotency key in use by a running request");
            Rejection::KeyInUse.into_response()
        }
        Entry::Completed {
            outcome: Outcome::TooLarge { status, limit },
            ..
        } => Rejection::NotStored {
            status,
            why: format!("exceeded {limit} bytes"),
        }
        .into_response(),
        Entry::Completed {
            outcome: Outcome::BodyFailed { status },
            ..
        } => Rejection::NotStored {
            status,
            why: "body failed while it was sent".into(),
        }
        .into_response(),
        Entry::Completed {
            outcome: Outcome::Response(stored),
            ..
        } => {
            tracing::debug!(%key, status = stored.status().as_u16(), "idempotent replay");
            let mut response = Response::new(ResponseBody::full(stored.body().clone()));
            *response.status_mut() = stored.status();
            *response.headers_mut() = stored.headers().clone();
            response
                .headers_mut()
                .insert(REPLAY_HEADER, HeaderValue::from_static("true"));
            response
        }
    }
}

enum Read<B> {
    Complete {
        data: Bytes,
        trailers: Option<HeaderMap>,
    },
    TooLarge {
        prefix: Bytes,
        rest: Pin<Box<B>>,
    },
    Failed {
        prefix: Bytes,
        error: BoxError,
    },
}

async fn read_bounded<B>(mut body: Pin<Box<B>>, limit: usize) -> Read<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut data = BytesMut::new();
    let mut trailers: Option<HeaderMap> = None;
    while let Some(frame) = body.as_mut().frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(error) => {
                return Read::Failed {
                    prefix: data.freeze(),
                    error: error.into(),
                };
            }
        };
        match frame.into_data() {
            Ok(chunk) => {
                data.extend_from_slice(&chunk);
                if data.len() > limit {
                    return Read::TooLarge {
                        prefix: data.freeze(),
                        rest: body,
                    };
                }
            }
            Err(frame) => {
                if let Ok(more) = frame.into_trailers() {
                    trailers.get_or_insert_with(HeaderMap::new).extend(more);
                }
            }
        }
    }
    Read::Complete {
        data: data.freeze(),
        trailers,
    }
}

/// Settles the key when the future is dropped (the client went away)
/// before it did: a handler that had not answered frees the key, since it
/// no longer runs and the key must not stay locked until its lock ttl; a
/// handler that had answered a storable status did its work, so the key is
/// completed as [`Outcome::BodyFailed`].
struct LeaseGuard<St: IdempotencyStore> {
    store: Option<Arc<St>>,
    key: IdempotencyKey,
    lease: Lease,
    answered: Option<StatusCode>,
    ttl: std::time::Duration,
}

impl<St: IdempotencyStore> LeaseGuard<St> {
    async fn release(&mut self, why: &'static str) {
        if let Some(store) = self.store.take() {
            match store.release(&self.key, &self.lease).await {
                Ok(_) => tracing::debug!(key = %self.key, why, "idempotency key released"),
                Err(err) => tracing::error!(
                    key = %self.key,
                    why,
                    error = %err,
                    "idempotency key not released; it stays locked until the lock ttl",
                ),
            }
        }
    }

    async fn complete(&mut self, outcome: &Outcome, config: &IdempotencyConfig) {
        let Some(store) = self.store.take() else {
            return;
        };
        match store
            .complete(&self.key, &self.lease, outcome, config.ttl)
            .await
        {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                key = %self.key,
                lock_ttl = ?config.lock_ttl,
                "the handler outlived the idempotency lock ttl and another request took the key; response not stored",
            ),
            Err(err) => tracing::error!(
                key = %self.key,
                error = %err,
                "response not stored; the key stays locked until the lock ttl",
            ),
        }
    }
}

impl<St: IdempotencyStore> Drop for LeaseGuard<St> {
    fn drop(&mut self) {
        let Some(store) = self.store.take() else {
            return;
        };
        let (key, lease, answered, ttl) = (
            self.key.clone(),
            self.lease.clone(),
            self.answered,
            self.ttl,
        );
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let settled = match answered {
                        None => store.release(&key, &lease).await,
                        Some(status) => {
                            let outcome = Outcome::BodyFailed { status };
                            store.complete(&key, &lease, &outcome, ttl).await
                        }
                    };
                    if let Err(err) = settled {
                        tracing::error!(%key, error = %err, "idempotency key of a cancelled request not settled; it stays locked until the lock ttl");
                    }
                });
            }
            Err(_) => tracing::warn!(
                %key,
                "request cancelled outside a tokio runtime; its idempotency key stays locked until the lock ttl",
            ),
        }
    }
}
