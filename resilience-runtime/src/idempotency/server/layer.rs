//! The tower `Layer` and `Service`.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header::HeaderName};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use pin_project_lite::pin_project;
use tokio::time::{Instant, timeout};
use tower_layer::Layer;
use tower_service::Service;

use super::body::{BoxError, ResponseBody};
use super::config::IdempotencyConfig;
use super::effect::EffectNotApplied;
use super::reject::Rejection;
use super::scope::Scope;
use super::store::{
    Claim, Completion, Entry, Fingerprint, IdempotencyStore, KeyLease, StoreError, StoredResponse,
};
use crate::idempotency::IdempotencyKey;
use crate::retry::{Classify, HttpStatus};

/// [`IDEMPOTENCY_KEY_HEADER`](crate::idempotency::IDEMPOTENCY_KEY_HEADER), pre-parsed.
const KEY_HEADER: HeaderName = HeaderName::from_static("idempotency-key");
/// [`IDEMPOTENCY_REPLAY_HEADER`](crate::idempotency::IDEMPOTENCY_REPLAY_HEADER), pre-parsed.
const REPLAY_HEADER: HeaderName = HeaderName::from_static("x-idempotency-replay");

/// Applies [`Idempotency`] to a service: see the [module docs](super).
///
/// Every layer names the [`Scope`] its keys belong to (the caller), so
/// that one client can never be replayed another's response; opting out is
/// written [`Scope::unscoped()`].
///
/// ```
/// use axum::{Router, routing::post};
/// use http::header::AUTHORIZATION;
/// use resilience::idempotency::server::{IdempotencyLayer, MemoryStore, Scope};
///
/// let app: Router = Router::new()
///     .route("/payments", post(|| async { "paid" }))
///     .layer(IdempotencyLayer::new(MemoryStore::default(), Scope::header(AUTHORIZATION)));
/// # drop(app);
/// ```
pub struct IdempotencyLayer<St> {
    store: Arc<St>,
    scope: Arc<Scope>,
    config: Arc<IdempotencyConfig>,
}

impl<St: IdempotencyStore> IdempotencyLayer<St> {
    /// A layer with the [default settings](IdempotencyConfig#default), its
    /// keys scoped to the caller that `scope` identifies.
    pub fn new(store: St, scope: Scope) -> Self {
        Self::with_config(store, scope, IdempotencyConfig::default())
    }

    /// A layer with the given settings, its keys scoped to the caller that
    /// `scope` identifies.
    pub fn with_config(store: St, scope: Scope, config: IdempotencyConfig) -> Self {
        Self {
            store: Arc::new(store),
            scope: Arc::new(scope),
            config: Arc::new(config),
        }
    }

    /// The store.
    pub fn store(&self) -> &St {
        &self.store
    }

    /// Whose keys these are.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }
}

impl<St> Clone for IdempotencyLayer<St> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            scope: Arc::clone(&self.scope),
            config: Arc::clone(&self.config),
        }
    }
}

impl<St> fmt::Debug for IdempotencyLayer<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("store", &std::any::type_name::<St>())
            .field("scope", &self.scope)
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
            scope: Arc::clone(&self.scope),
            config: Arc::clone(&self.config),
        }
    }
}

/// A service that runs its inner service at most once per
/// `Idempotency-Key` and replays the stored response afterwards.
///
/// Built by [`IdempotencyLayer`]; see the [module docs](super) for what it
/// answers and when. A guarded request's handler runs on a task of its
/// own (`tokio::spawn`), so that dropping the [`ResponseFuture`] (the
/// client went away) never stops a handler that began: that is why the
/// inner service, its future, its error and its response body must be
/// `Send + 'static`.
pub struct Idempotency<S, St> {
    inner: S,
    store: Arc<St>,
    scope: Arc<Scope>,
    config: Arc<IdempotencyConfig>,
}

impl<S: Clone, St> Clone for Idempotency<S, St> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            store: Arc::clone(&self.store),
            scope: Arc::clone(&self.scope),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, St> fmt::Debug for Idempotency<S, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency")
            .field("inner", &self.inner)
            .field("store", &std::any::type_name::<St>())
            .field("scope", &self.scope)
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
        let (parts, body) = request.into_parts();
        let key = key_of(&parts.headers).and_then(|key| {
            self.scope
                .stored_key(&parts, &key)
                .map_err(|missing| Rejection::MissingScope(missing.0))
        });
        let request = Request::from_parts(parts, body);
        let key = match key {
            Ok(key) => key,
            Err(rejection) => {
                // At debug, as every rejection: a client sending requests
                // without credentials must not flood the logs.
                tracing::debug!(
                    method = %request.method(),
                    path = request.uri().path(),
                    error = rejection.code(),
                    scope = ?self.scope,
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
            "{} is not visible ASCII; use 1 to {} visible ASCII characters",
            crate::idempotency::shown(&String::from_utf8_lossy(value.as_bytes())),
            crate::idempotency::MAX_KEY_LEN
        ))
    })?;
    // The draft's quoted form and the bare key are the same key.
    IdempotencyKey::from_header(text).map_err(|err| Rejection::InvalidKey(err.to_string()))
}

/// Whether a status frees the key without the [`EffectNotApplied`] marker:
/// only `408` and `429` (the retryable 4xx of [the guide](crate::guide#what-may-be-retried)), which say by their
/// definition that the request was not processed (RFC 9110 §15.5.9, RFC
/// 6585 §4). A `5xx` says nothing of the kind, so it is final.
fn refused_unprocessed(status: StatusCode) -> bool {
    status.is_client_error() && HttpStatus(status.as_u16()).classify().is_retryable()
}

/// Reads the request body and fingerprints it here, in the request's own
/// future, then runs everything from `begin` on in a task of its own, so
/// that a client going away (its future dropped) stops nothing once the
/// key is taken.
async fn guarded<S, St, ReqBody, ResBody>(
    inner: S,
    store: Arc<St>,
    config: Arc<IdempotencyConfig>,
    key: IdempotencyKey,
    request: Request<ReqBody>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    St: IdempotencyStore,
    ReqBody: Body + From<Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
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
    let log_key = key.clone();
    let detached = tokio::spawn(run(inner, store, config, key, parts, body, fingerprint));
    // Dropping this future (the client went away) only detaches the task.
    match detached.await {
        Ok(answer) => answer,
        Err(err) => {
            tracing::error!(key = %log_key, error = %err, "idempotency task ended without an answer");
            Ok(Rejection::Internal.into_response())
        }
    }
}

/// `begin`, the handler, and `complete` or `release`: the part of a
/// guarded request that runs to its end whatever the client does.
async fn run<S, St, ReqBody, ResBody>(
    mut inner: S,
    store: Arc<St>,
    config: Arc<IdempotencyConfig>,
    key: IdempotencyKey,
    parts: http::request::Parts,
    body: Bytes,
    fingerprint: Fingerprint,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    St: IdempotencyStore,
    ReqBody: From<Bytes>,
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    let lease = KeyLease::new(fingerprint);
    let began = Instant::now();
    let begin = timeout(
        config.store_timeout,
        store.begin(&key, &lease, config.lock_ttl),
    )
    .await;
    let failure = match begin {
        Ok(Ok(Claim::Started)) => None,
        Ok(Ok(Claim::Existing(entry))) => return Ok(answer_existing(&key, entry, fingerprint)),
        Ok(Err(err @ (StoreError::Full { .. } | StoreError::Corrupt { .. }))) => {
            Some((err.to_string(), false))
        }
        Ok(Err(err)) => Some((err.to_string(), true)),
        Err(_) => Some((format!("no answer within {:?}", config.store_timeout), true)),
    };
    if let Some((what, maybe_taken)) = failure {
        tracing::error!(
            %key,
            store = store.name(),
            error = %what,
            "idempotency store failed on begin; request refused, handler not run",
        );
        if maybe_taken {
            // The key may have been taken all the same (the command reached
            // the store, its answer did not come back): free it, in the
            // background so that the 503 is not delayed.
            tokio::spawn(settle_late(
                Arc::clone(&store),
                key.clone(),
                lease,
                Settle::Release,
                Arc::clone(&config),
                began + config.lock_ttl,
            ));
        }
        return Ok(Rejection::StoreUnavailable {
            store: store.name().to_owned(),
            call: "begin",
            what,
        }
        .into_response());
    }

    let renewal = tokio::spawn(renew_while_held(
        Arc::clone(&store),
        key.clone(),
        lease.clone(),
        Arc::clone(&config),
        began,
    ))
    .abort_handle();
    let mut held = Held {
        store: Some(store),
        key,
        lease,
        config,
        renewal,
        answered: None,
    };
    let request = Request::from_parts(parts, ReqBody::from(body));
    let response = match (CatchUnwind {
        future: async move { inner.call(request).await },
    })
    .await
    {
        Ok(Ok(response)) => response,
        Ok(Err(err)) => {
            tracing::error!(key = %held.key, "the service failed after it began; the key is final");
            let outcome = Completion::Response(Rejection::ServiceFailed.stored());
            held.complete(outcome).await;
            return Err(err);
        }
        Err(_panic) => {
            tracing::error!(key = %held.key, "the handler panicked after it began; the key is final");
            let outcome = Completion::Response(Rejection::HandlerPanicked.stored());
            held.complete(outcome).await;
            return Ok(Rejection::HandlerPanicked.into_response());
        }
    };
    let (parts, body) = response.into_parts();
    if parts.extensions.get::<EffectNotApplied>().is_some() {
        held.release("the handler declared its effect not applied")
            .await;
        return Ok(Response::from_parts(parts, ResponseBody::inner(body)));
    }
    if refused_unprocessed(parts.status) {
        held.release("the handler refused the request unprocessed (408 or 429)")
            .await;
        return Ok(Response::from_parts(parts, ResponseBody::inner(body)));
    }
    held.answered = Some(parts.status);

    let max_stored_body = held.config.max_stored_body;
    match read_bounded(Box::pin(body), max_stored_body).await {
        Read::Complete { data, trailers } => {
            let stored = StoredResponse::capture(
                parts.status,
                &parts.headers,
                &held.config.stored_headers,
                data.clone(),
            );
            held.complete(Completion::Response(stored)).await;
            Ok(Response::from_parts(
                parts,
                ResponseBody::buffered(data, trailers, None),
            ))
        }
        Read::TooLarge { prefix, rest } => {
            let limit = max_stored_body as u64;
            tracing::warn!(
                key = %held.key,
                status = parts.status.as_u16(),
                limit,
                "response too large to store: delivered once, later requests with the key get 409",
            );
            let outcome = Completion::TooLarge {
                status: parts.status,
                limit,
            };
            held.complete(outcome).await;
            Ok(Response::from_parts(
                parts,
                ResponseBody::spilled(prefix, rest),
            ))
        }
        Read::Failed { prefix, error } => {
            // The handler's work is done (its status says so): releasing
            // the key would let the retry do it twice.
            tracing::warn!(
                key = %held.key,
                status = parts.status.as_u16(),
                %error,
                "response body failed: later requests with the key get 409",
            );
            let outcome = Completion::BodyFailed {
                status: parts.status,
            };
            held.complete(outcome).await;
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
            outcome: Completion::TooLarge { status, limit },
            ..
        } => Rejection::NotStored {
            status,
            why: format!("exceeded {limit} bytes"),
        }
        .into_response(),
        Entry::Completed {
            outcome: Completion::BodyFailed { status },
            ..
        } => Rejection::NotStored {
            status,
            why: "body failed while it was sent".into(),
        }
        .into_response(),
        Entry::Completed {
            outcome: Completion::Response(stored),
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

pin_project! {
    /// A future whose panic becomes an `Err`, as `futures`'
    /// `catch_unwind`: a handler that panicked after it began may have
    /// applied its effect, so the layer must still record the key.
    struct CatchUnwind<F> {
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn std::any::Any + Send>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let future = self.project().future;
        // Never polled again after a panic: the layer stops at the `Err`.
        match std::panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

/// What a request that held a key still owes the store.
#[derive(Debug)]
enum Settle {
    Release,
    Complete(Completion),
}

impl Settle {
    fn as_str(&self) -> &'static str {
        match self {
            Settle::Release => "release",
            Settle::Complete(_) => "complete",
        }
    }
}

/// One bounded attempt at `settle`; `Err` says what went wrong.
async fn settle_once<St: IdempotencyStore>(
    store: &St,
    key: &IdempotencyKey,
    lease: &KeyLease,
    settle: &Settle,
    config: &IdempotencyConfig,
) -> Result<bool, String> {
    let call = async {
        match settle {
            Settle::Release => store.release(key, lease).await,
            Settle::Complete(outcome) => store.complete(key, lease, outcome, config.ttl).await,
        }
    };
    match timeout(config.store_timeout, call).await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err(format!("no answer within {:?}", config.store_timeout)),
    }
}

/// Retries `settle` in the background, with backoff from 50 ms to 1 s,
/// until the store answers or the lock expires at `until` (after which
/// the store frees the key by itself).
async fn settle_late<St: IdempotencyStore>(
    store: Arc<St>,
    key: IdempotencyKey,
    lease: KeyLease,
    settle: Settle,
    config: Arc<IdempotencyConfig>,
    until: Instant,
) {
    let mut pause = Duration::from_millis(50);
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        match settle_once(&*store, &key, &lease, &settle, &config).await {
            Ok(done) => {
                tracing::info!(%key, call = settle.as_str(), attempts, done, "idempotency key settled late");
                return;
            }
            Err(error) if Instant::now() + pause >= until => {
                tracing::error!(
                    %key,
                    store = store.name(),
                    call = settle.as_str(),
                    attempts,
                    %error,
                    "idempotency key not settled; the store frees it when its lock ttl ends",
                );
                return;
            }
            Err(_) => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// Keeps the lock of a running request alive: renews it every third of
/// the lock ttl from `began` until aborted, so a lock survives one failed
/// renewal, and a crashed holder (whose renewals stop) blocks its key for
/// at most one lock ttl.
async fn renew_while_held<St: IdempotencyStore>(
    store: Arc<St>,
    key: IdempotencyKey,
    lease: KeyLease,
    config: Arc<IdempotencyConfig>,
    began: Instant,
) {
    let every = config.lock_ttl / 3;
    let mut next = began + every;
    loop {
        tokio::time::sleep_until(next).await;
        next += every;
        let renewed = timeout(
            config.store_timeout,
            store.renew(&key, &lease, config.lock_ttl),
        )
        .await;
        let error = match renewed {
            Ok(Ok(true)) => continue,
            Ok(Ok(false)) => {
                tracing::error!(
                    %key,
                    lock_ttl = ?config.lock_ttl,
                    "the idempotency lock of a running request expired (its renewals failed for a whole lock ttl); a retry with this key may run the handler again",
                );
                return;
            }
            Ok(Err(err)) => err.to_string(),
            Err(_) => format!("no answer within {:?}", config.store_timeout),
        };
        tracing::warn!(
            %key,
            store = store.name(),
            %error,
            "idempotency lock not renewed; trying again in a third of the lock ttl",
        );
    }
}

/// The key a running request holds. It is settled once, by `complete` or
/// `release`; if the task is dropped before (the runtime shuts down, or
/// the response body panicked), the drop settles it on a new task: a
/// handler that had not answered frees the key, one that had answered a
/// status that is final completes it as [`Completion::BodyFailed`].
struct Held<St: IdempotencyStore> {
    store: Option<Arc<St>>,
    key: IdempotencyKey,
    lease: KeyLease,
    config: Arc<IdempotencyConfig>,
    /// The task that renews the lock while the request runs.
    renewal: tokio::task::AbortHandle,
    answered: Option<StatusCode>,
}

impl<St: IdempotencyStore> Held<St> {
    async fn release(&mut self, why: &'static str) {
        self.settle(Settle::Release, why).await;
    }

    async fn complete(&mut self, outcome: Completion) {
        self.settle(Settle::Complete(outcome), "the handler answered")
            .await;
    }

    /// One attempt bounded by the store timeout, then retries in the
    /// background: the response is never held back for long.
    async fn settle(&mut self, settle: Settle, why: &'static str) {
        let Some(store) = self.store.take() else {
            return;
        };
        self.renewal.abort();
        let key = &self.key;
        match settle_once(&*store, key, &self.lease, &settle, &self.config).await {
            Ok(true) => {
                tracing::debug!(%key, why, call = settle.as_str(), "idempotency key settled")
            }
            Ok(false) => tracing::warn!(
                %key,
                lock_ttl = ?self.config.lock_ttl,
                call = settle.as_str(),
                "the handler outlived the idempotency lock ttl and the key was freed or taken by another request",
            ),
            Err(error) => {
                tracing::warn!(
                    %key,
                    store = store.name(),
                    call = settle.as_str(),
                    %error,
                    "idempotency key not settled; response delivered, retrying in the background until the lock ttl ends",
                );
                tokio::spawn(settle_late(
                    store,
                    key.clone(),
                    self.lease.clone(),
                    settle,
                    Arc::clone(&self.config),
                    Instant::now() + self.config.lock_ttl,
                ));
            }
        }
    }
}

impl<St: IdempotencyStore> Drop for Held<St> {
    fn drop(&mut self) {
        let Some(store) = self.store.take() else {
            return;
        };
        self.renewal.abort();
        let settle = match self.answered {
            None => Settle::Release,
            Some(status) => Settle::Complete(Completion::BodyFailed { status }),
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(settle_late(
                    store,
                    self.key.clone(),
                    self.lease.clone(),
                    settle,
                    Arc::clone(&self.config),
                    // The last renewal was at most now: the lock ends by then.
                    Instant::now() + self.config.lock_ttl,
                ));
            }
            Err(_) => tracing::warn!(
                key = %self.key,
                "idempotency task dropped outside a tokio runtime; its key stays locked until the lock ttl",
            ),
        }
    }
}
