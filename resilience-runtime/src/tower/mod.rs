//! A tower [`Layer`] applying a retry policy and a circuit breaker to any
//! HTTP client [`Service`] whose request body can be cloned (cargo feature
//! `tower`): a hyper client, a client built of tower layers.
//!
//! Below a tonic client, [`ResilienceLayer::grpc`] (cargo feature `tonic`)
//! applies gRPC's rules instead: calls judged by their `grpc-status`, the
//! methods declared idempotent retried with their request buffered, the
//! runtime's errors turned into a `Status` (see [`GrpcLayer`]).
//!
//! The same rules, from the same code, as the reqwest middleware
//! (`resilience::http::ResilienceMiddleware`, feature
//! `reqwest-middleware`), for clients that are not reqwest:
//!
//! - layered breaker → retry → transport: the breaker counts one logical
//!   call once, by its final outcome, however many attempts it took; when
//!   it is open nothing is sent and the caller gets
//!   [`Error::DependencyDown`] (inside the [`BoxError`]);
//! - a response is retried when its status says so (5xx, 408, 429 after
//!   its `Retry-After`), a transport error always (the inner service's
//!   errors are the transport's); the last attempt's response is returned
//!   as is, whatever its status, the earlier ones dropped unread;
//! - **retries need a copy of the request**: every attempt sends a clone
//!   of it, so the body type must be `Clone` (a buffered body:
//!   `http_body_util::Full<Bytes>`, `String`, `Bytes`); method, URI,
//!   version, headers and extensions are copied too. A streaming body
//!   cannot be sent twice: send it through the inner service itself;
//! - a `POST` or `PATCH` without an `Idempotency-Key` header, or marked
//!   [`RetryOverride::Never`], is sent exactly once, still through the
//!   breaker; [`RetryOverride::Idempotent`] lets a keyless one be
//!   retried;
//! - **readiness**: the layer's `poll_ready` is the inner service's; each
//!   retry attempt waits for a clone of the inner service to be ready
//!   before calling it, as tower's contract asks, so a connection pool or
//!   a concurrency limit below still applies back-pressure.
//!
//! ```no_run
//! use std::time::Duration;
//! use resilience::tower::ResilienceLayer;
//! use resilience::{BreakerConfig, CircuitBreaker, Policy};
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # async fn demo<S>(hyper_client: S) -> Result<(), resilience::tower::BoxError>
//! # where
//! #     S: Service<http::Request<String>, Response = http::Response<String>> + Clone + Send + 'static,
//! #     S::Error: Into<resilience::tower::BoxError> + Send + 'static,
//! #     S::Future: Send,
//! # {
//! let breaker = CircuitBreaker::new("users", BreakerConfig::new())?;
//! let mut client = ServiceBuilder::new()
//!     .layer(ResilienceLayer::new("users", Policy::http()).with_breaker(breaker))
//!     .service(hyper_client);
//! let request = http::Request::get("http://127.0.0.1:8080/users/42").body(String::new())?;
//! let response = client.ready().await?.call(request).await?;
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use crate::breaker::CircuitBreaker;
use crate::error::Error;
use crate::http_rules;
use crate::retry::{Classify, Event, Hedge, HttpStatus, Policy, Reason, RetryOverride, Verdict};

#[cfg(feature = "tonic")]
mod grpc;
#[cfg(feature = "tonic")]
pub use grpc::{GrpcLayer, GrpcResilient, MAX_BUFFERED};

/// The error of a [`Resilient`] service: the inner service's own error,
/// or a [`resilience::Error`](crate::Error) (an open breaker, a spent
/// retry budget, a passed deadline); `downcast_ref` to tell them apart.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Applies a retry policy, and optionally a circuit breaker, to every
/// request of an HTTP client [`Service`]; see the [module docs](self) for
/// the rules.
///
/// ```
/// use resilience::tower::ResilienceLayer;
/// use resilience::Policy;
///
/// let layer = ResilienceLayer::new("users", Policy::http());
/// assert_eq!(layer.policy().max_attempts(), 3);
/// assert!(layer.breaker().is_none());
/// ```
#[derive(Debug, Clone)]
pub struct ResilienceLayer {
    name: &'static str,
    policy: Policy,
    breaker: Option<CircuitBreaker>,
    hedge: Option<Hedge>,
    limit: Option<std::sync::Arc<crate::limit::Limiter>>,
}

crate::http_rules::layer_builder!(
    ResilienceLayer,
    "resilience::tower::ResilienceLayer",
    "layer"
);

impl<S> Layer<S> for ResilienceLayer {
    type Service = Resilient<S>;

    fn layer(&self, inner: S) -> Resilient<S> {
        Resilient {
            inner,
            layer: self.clone(),
        }
    }
}

/// The [`Service`] a [`ResilienceLayer`] (or, for a tonic channel, a
/// `GrpcLayer`) wraps around a client.
#[derive(Debug, Clone)]
pub struct Resilient<S, L = ResilienceLayer> {
    inner: S,
    layer: L,
}

impl<S, L> Resilient<S, L> {
    /// The wrapped client.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

/// One attempt's outcome as the retry executor and the breaker see it.
enum Attempt<RB, E> {
    /// A response that the rules reject (retryable, or a failure of the
    /// dependency); kept unread, so that the last one can be returned as is.
    Response(Box<Response<RB>>, Judged),
    Transport(E),
    Runtime(Error),
}

/// What the rules said of a response.
#[derive(Debug, Clone, Copy)]
struct Judged {
    verdict: Verdict,
    reason: Option<Reason>,
}

/// Which protocol's rules judge a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rules {
    /// Its status and `Retry-After`.
    Http,
    /// Its `grpc-status`, when the response carries it in its headers;
    /// else its HTTP status (a proxy's 503).
    #[cfg(feature = "tonic")]
    Grpc,
}

impl<RB, E> fmt::Debug for Attempt<RB, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attempt::Response(response, _) => write!(f, "Response({})", response.status()),
            Attempt::Transport(_) => f.write_str("Transport"),
            Attempt::Runtime(err) => write!(f, "Runtime({err})"),
        }
    }
}

impl<RB, E> From<Error> for Attempt<RB, E> {
    fn from(err: Error) -> Self {
        Attempt::Runtime(err)
    }
}

impl<RB, E> Classify for Attempt<RB, E> {
    fn classify(&self) -> Verdict {
        match self {
            Attempt::Response(_, judged) => judged.verdict,
            // The guide retries every transport error; cancellation is a
            // dropped future, which never gets here.
            Attempt::Transport(_) => Verdict::Transient,
            Attempt::Runtime(err) => err.classify(),
        }
    }

    fn reason(&self) -> Option<Reason> {
        match self {
            Attempt::Response(_, judged) => judged.reason,
            Attempt::Transport(_) => Some(Reason::Network),
            Attempt::Runtime(err) => err.reason(),
        }
    }
}

/// The rules' word on a response: `None` for an answer that stands (a
/// success for the breaker).
fn judge_response<RB>(rules: Rules, response: &Response<RB>) -> Option<Judged> {
    #[cfg(feature = "tonic")]
    if rules == Rules::Grpc
        && let Some(judged) = grpc::judge(response.headers())
    {
        return judged;
    }
    let _ = rules;
    let verdict = http_rules::response_verdict(response.status(), response.headers());
    verdict.is_retryable().then(|| Judged {
        verdict,
        reason: HttpStatus(response.status().as_u16()).reason(),
    })
}

fn judge<RB, E>(
    rules: Rules,
    outcome: Result<Response<RB>, E>,
) -> Result<Response<RB>, Attempt<RB, E>> {
    match outcome {
        Ok(response) => match judge_response(rules, &response) {
            Some(judged) => Err(Attempt::Response(Box::new(response), judged)),
            None => Ok(response),
        },
        Err(err) => Err(Attempt::Transport(err)),
    }
}

/// Back to what the service returns: the last response as is.
fn settle<RB, E: Into<BoxError>>(
    outcome: Result<Response<RB>, Attempt<RB, E>>,
) -> Result<Response<RB>, BoxError> {
    match outcome {
        Ok(response) => Ok(response),
        Err(Attempt::Response(response, _)) => Ok(*response),
        Err(Attempt::Transport(err)) => Err(err.into()),
        Err(Attempt::Runtime(err)) => Err(Box::new(err)),
    }
}

/// A copy of `request`'s head with `body`, for one more attempt.
fn copy_with<B, C>(request: &Request<B>, body: C) -> Request<C> {
    let mut copy = Request::new(body);
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    *copy.extensions_mut() = request.extensions().clone();
    copy
}

/// Takes the service `poll_ready` made ready, leaving a clone in its place
/// for the next caller to poll ready again.
fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}

impl<S, B, RB> Service<Request<B>> for Resilient<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Error: Into<BoxError> + Send + 'static,
    S::Future: Send,
    B: Clone + Send + Sync + 'static,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let ready = take_ready(&mut self.inner);
        let layer = self.layer.clone();
        Box::pin(async move {
            let asked = request.extensions().get::<RetryOverride>().copied();
            let once =
                http_rules::sent_once_because(request.method(), request.headers(), true, asked);
            if layer.sent_once(once, &request) {
                return layer.send_once(ready, request, Rules::Http).await;
            }
            let replay = |template: &Request<B>| copy_with(template, template.body().clone());
            layer
                .send_retried(ready, request, replay, Rules::Http)
                .await
        })
    }
}

impl ResilienceLayer {
    /// Whether `request` goes out once: the policy allows one attempt, or
    /// `once` says why not (logged at DEBUG).
    fn sent_once<B>(&self, once: Option<&'static str>, request: &Request<B>) -> bool {
        if self.policy.max_attempts() <= 1 {
            return true;
        }
        let Some(reason) = once else {
            return false;
        };
        tracing::debug!(
            target: "resilience::tower",
            name = self.name,
            method = %request.method(),
            uri = %request.uri(),
            reason,
            "request sent once, not retried"
        );
        true
    }

    /// One attempt, through the breaker.
    async fn send_once<S, B, RB>(
        &self,
        mut ready: S,
        request: Request<B>,
        rules: Rules,
    ) -> Result<Response<RB>, BoxError>
    where
        S: Service<Request<B>, Response = Response<RB>>,
        S::Error: Into<BoxError>,
    {
        let priority = priority_of(request.extensions());
        let once = http_rules::limited(self.limit.as_deref(), priority, async {
            judge(rules, ready.call(request).await)
        });
        settle(http_rules::through(self.breaker.as_ref(), once).await)
    }

    /// The retry chain (or the hedged call), through the breaker: each
    /// attempt sends `replay(&template)`.
    async fn send_retried<S, B, T, RB, R>(
        &self,
        ready: S,
        template: Request<T>,
        replay: R,
        rules: Rules,
    ) -> Result<Response<RB>, BoxError>
    where
        S: Service<Request<B>, Response = Response<RB>> + Clone,
        S::Error: Into<BoxError>,
        R: Fn(&Request<T>) -> Request<B>,
    {
        let name = self.name;
        // Owned by the closure, so that the chain is `Send` without asking
        // the client to be `Sync`.
        let inner = ready;
        let (limit, priority) = (self.limit.as_deref(), priority_of(template.extensions()));
        let attempt = move || {
            let mut service = inner.clone();
            let request = replay(&template);
            let send = async move {
                poll_fn(|cx| service.poll_ready(cx))
                    .await
                    .map_err(Attempt::Transport)?;
                judge(rules, service.call(request).await)
            };
            http_rules::limited(limit, priority, send)
        };
        if let Some(hedge) = self.hedge {
            let hedged = self.policy.hedge(hedge, attempt);
            return settle(http_rules::through(self.breaker.as_ref(), hedged).await);
        }
        let chain = self.policy.retry(attempt).notify(
            |event: &Event<'_, Attempt<RB, S::Error>>| {
                if let Event::Retry { attempt, delay, .. } = event {
                    tracing::debug!(target: "resilience::tower", name, attempt, ?delay, "retrying request");
                }
            },
        );
        settle(http_rules::through(self.breaker.as_ref(), chain).await)
    }
}

/// The [`Priority`](crate::limit::Priority) a request asks for in its
/// extensions, else the caller's [`with_priority`](crate::limit::with_priority),
/// `Default` when neither.
fn priority_of(extensions: &http::Extensions) -> crate::limit::Priority {
    extensions
        .get::<crate::limit::Priority>()
        .copied()
        .or_else(crate::limit::scoped_priority)
        .unwrap_or_default()
}
