//! The server side of a rate limit: a tower layer that answers `429 Too
//! Many Requests` with `Retry-After` and the IETF `RateLimit` fields.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, RETRY_AFTER};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{Either, Full};
use tower_layer::Layer;
use tower_service::Service;

use super::{Priority, RateLimit};

/// `RateLimit-Policy`: the quota, as draft-ietf-httpapi-ratelimit-headers
/// writes it (`"payments";q=25;w=1`).
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`: what is left of the quota now (`"payments";r=3;t=1`).
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// A tower [`Layer`] that puts a [`RateLimit`] in front of a server's
/// handlers: a request over the rate is answered `429 Too Many Requests`
/// with `Retry-After` (whole seconds, rounded up, so never earlier than
/// the limit admits) and never reaches the handler; every response
/// carries the `RateLimit-Policy` and `RateLimit` fields of
/// draft-ietf-httpapi-ratelimit-headers, so clients can slow down before
/// they are refused.
///
/// The limit is the same [`RateLimit`] a client uses (its burst, its
/// priorities, its `max_wait`: a request may wait for its place instead
/// of being refused). A request's [`Priority`] is read from its
/// extensions (default: [`Priority::Default`]), so critical routes keep
/// the last tenth of the burst.
///
/// The library's own clients wait for `Retry-After` before their next
/// attempt, so both ends agree: a retried `429` is sent when the server
/// will take it.
///
/// ```
/// use resilience::limit::{Rate, RateLimit};
/// use resilience::limit::server::RateLimitLayer;
/// use tower::{Layer, Service, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limit = RateLimit::new("api", Rate::per_second(2))?;
/// let handler = tower::service_fn(|_: http::Request<()>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hello")))
/// });
/// let mut service = RateLimitLayer::new(limit).layer(handler);
/// let request = || http::Request::new(());
///
/// let first = service.ready().await?.call(request()).await?;
/// assert_eq!(first.status(), 200);
/// assert_eq!(first.headers()["ratelimit-policy"], r#""api";q=2;w=1"#);
/// assert_eq!(first.headers()["ratelimit"], r#""api";r=1;t=1"#);
/// service.ready().await?.call(request()).await?;
/// let refused = service.ready().await?.call(request()).await?;
/// assert_eq!(refused.status(), 429);
/// assert_eq!(refused.headers()["retry-after"], "1");
/// assert_eq!(refused.headers()["ratelimit"], r#""api";r=0;t=1"#);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    limit: Arc<RateLimit>,
    policy: HeaderValue,
}

impl RateLimitLayer {
    /// A layer applying `limit` to every request of the services it wraps.
    pub fn new(limit: RateLimit) -> Self {
        Self::shared(Arc::new(limit))
    }

    /// A layer applying a limit shared with other layers or code (one
    /// quota over several routers).
    pub fn shared(limit: Arc<RateLimit>) -> Self {
        let policy = policy(&limit);
        Self { limit, policy }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            limit: Arc::clone(&self.limit),
            policy: self.policy.clone(),
        }
    }
}

/// A service behind a [`RateLimitLayer`].
#[derive(Debug, Clone)]
pub struct RateLimited<S> {
    inner: S,
    limit: Arc<RateLimit>,
    policy: HeaderValue,
}

/// The response body of a [`RateLimited`] service: the handler's, or the
/// short text of a `429`.
pub type RateLimitedBody<B> = Either<B, Full<Bytes>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimited<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    ReqBody: Send + 'static,
{
    type Response = Response<RateLimitedBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let priority = request
            .extensions()
            .get::<Priority>()
            .copied()
            .unwrap_or_default();
        // The service that was polled ready is the one that runs the
        // request, after the limit's wait (tower's clone-and-swap).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limit = Arc::clone(&self.limit);
        let policy = self.policy.clone();
        Box::pin(async move {
            if let Err(refused) = limit.acquire(priority).await {
                let after = whole_seconds(refused.retry_after().unwrap_or(Duration::ZERO));
                let mut response = Response::new(Either::Right(Full::new(Bytes::from(format!(
                    "too many requests: the rate limit of `{}` ({}) is reached; retry after {after} s\n",
                    limit.name(),
                    limit.rate()
                )))));
                *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                let headers = response.headers_mut();
                headers.insert(RETRY_AFTER, HeaderValue::from(after));
                headers.insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; charset=utf-8"),
                );
                headers.insert(RATELIMIT_POLICY, policy);
                headers.insert(RATELIMIT, remaining(&limit, priority));
                return Ok(response);
            }
            let mut response = inner.call(request).await?.map(Either::Left);
            let headers = response.headers_mut();
            headers.insert(RATELIMIT_POLICY, policy);
            headers.insert(RATELIMIT, remaining(&limit, priority));
            Ok(response)
        })
    }
}

/// `d` in whole seconds, rounded up: a client told to come back never
/// comes back too early.
fn whole_seconds(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The limit's name as a Structured Field String: printable ASCII, `"`
/// and `\` escaped, anything else left out.
fn sf_string(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars().filter(|c| (' '..='~').contains(c)) {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// `"name";q=<calls>;w=<seconds>`: the rate over its period when that is
/// whole seconds, else over one second (the field has no sub-second
/// windows), rounded down.
fn policy(limit: &RateLimit) -> HeaderValue {
    let rate = limit.rate();
    let period = rate.period();
    let (q, w) = if period.subsec_nanos() == 0 {
        (u64::from(rate.count()), period.as_secs())
    } else {
        let per_second = u128::from(rate.count()) * 1_000_000_000 / period.as_nanos().max(1);
        (u64::try_from(per_second).unwrap_or(u64::MAX), 1)
    };
    let value = format!("{};q={q};w={w}", sf_string(limit.name()));
    HeaderValue::try_from(value).unwrap_or_else(|_| HeaderValue::from_static("\"\";q=0"))
}

/// `"name";r=<calls admitted now>;t=<seconds until one more>`.
fn remaining(limit: &RateLimit, priority: Priority) -> HeaderValue {
    let (left, next) = limit.remaining(priority);
    let value = format!(
        "{};r={left};t={}",
        sf_string(limit.name()),
        whole_seconds(next)
    );
    HeaderValue::try_from(value).unwrap_or_else(|_| HeaderValue::from_static("\"\";r=0"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Rate;

    #[test]
    fn names_are_structured_field_strings() {
        assert_eq!(sf_string("api"), r#""api""#);
        assert_eq!(sf_string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(sf_string("tab\there é"), r#""tabhere ""#);
    }

    #[test]
    fn the_policy_is_the_rate_over_whole_seconds() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _guard = runtime.enter();
        let policy = |rate: Rate| policy(&RateLimit::new("p", rate).unwrap());
        // draft-ietf-httpapi-ratelimit-headers: `"default";q=100;w=10`.
        assert_eq!(
            policy(Rate::new(100, Duration::from_secs(10))),
            r#""p";q=100;w=10"#
        );
        assert_eq!(policy(Rate::per_minute(6000)), r#""p";q=6000;w=60"#);
        assert_eq!(
            policy(Rate::new(25, Duration::from_millis(100))),
            r#""p";q=250;w=1"#
        );
    }

    #[test]
    fn whole_seconds_round_up() {
        assert_eq!(whole_seconds(Duration::ZERO), 0);
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::from_secs(2)), 2);
        assert_eq!(whole_seconds(Duration::from_millis(2001)), 3);
    }
}
