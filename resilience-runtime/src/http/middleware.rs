//! A `reqwest-middleware` layer applying a policy to every request of a
//! client (cargo feature `reqwest-middleware`).

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

use super::classify::classify_response;
use super::error::HttpError;
use crate::breaker::CircuitBreaker;
use crate::error::Error;
use crate::http_rules;
use crate::retry::RetryOverride;
use crate::retry::{Classify, Event, Hedge, Policy, Reason, Verdict};

/// Applies a retry policy, and optionally a circuit breaker, to every
/// request of a [`reqwest_middleware::ClientWithMiddleware`], for code that
/// prefers one client-wide layer to an attribute on each method.
///
/// Layers in the order of the [guide](crate::guide#circuit-breaker): breaker → retry → transport. The breaker
/// counts one request once, however many attempts it took, by its final
/// outcome; an open breaker rejects the request without sending it, as a
/// [`reqwest_middleware::Error::Middleware`] holding
/// [`HttpError::Resilience`] ("dependency down").
///
/// Each request is sent again (a copy of it, body included) while the
/// classifier ([what may be retried](crate::guide#what-may-be-retried)) says so; the response of the last attempt is
/// returned as is, whatever its status, so the caller sees what it would
/// have seen without the layer. A response that leads to another attempt
/// is dropped unread, which closes its connection.
///
/// A middleware hands back the response as soon as its headers arrive, so
/// a body that breaks while the caller reads it is not retried here; to
/// retry those too, read the body inside the attempt
/// ([`RetriedRequest::bytes`](super::RetriedRequest::bytes) or `#[retry]`).
///
/// Sent exactly once, never retried, with the breaker still applied: a
/// `POST` or `PATCH` without an `Idempotency-Key` header (a retry could
/// apply it twice: either a key, or no retry), a streaming body (the
/// first attempt consumes it), and a request marked
/// [`RetryOverride::Never`]. A DEBUG event on target `resilience::http`
/// says which request went out once and why; the request itself is sent
/// as it would be without the layer.
///
/// ```no_run
/// use resilience::{BreakerConfig, CircuitBreaker, Policy};
/// use resilience::http::ResilienceMiddleware;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let breaker = CircuitBreaker::new("user-service", BreakerConfig::new())?;
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(ResilienceMiddleware::new("user-service", Policy::http()).with_breaker(breaker))
///     .build();
/// let user = client.get("http://127.0.0.1:8080/users/42").send().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ResilienceMiddleware {
    name: &'static str,
    policy: Policy,
    breaker: Option<CircuitBreaker>,
    hedge: Option<Hedge>,
    limit: Option<std::sync::Arc<crate::limit::Limiter>>,
}

crate::http_rules::layer_builder!(
    ResilienceMiddleware,
    "resilience::http::ResilienceMiddleware",
    "middleware"
);

/// Why `request` goes out once under a policy that allows retries, or
/// `None` when it may be retried (the rules every HTTP layer shares).
fn sent_once_because(request: &Request, asked: Option<RetryOverride>) -> Option<&'static str> {
    let replayable = request.try_clone().is_some();
    http_rules::sent_once_because(request.method(), request.headers(), replayable, asked)
}

/// The outcome of one attempt as the retry executor sees it.
#[derive(Debug)]
enum Attempt {
    /// A response whose status the classifier rejects; kept unread, so that
    /// the last one can be returned as is.
    Response(Box<Response>),
    Middleware(reqwest_middleware::Error),
    Runtime(Error),
}

impl From<Error> for Attempt {
    fn from(err: Error) -> Self {
        Attempt::Runtime(err)
    }
}

impl Classify for Attempt {
    fn classify(&self) -> Verdict {
        match self {
            Attempt::Response(response) => classify_response(response),
            Attempt::Middleware(reqwest_middleware::Error::Reqwest(err)) => err.classify(),
            // Another layer's error: only it knows, so do not retry.
            Attempt::Middleware(reqwest_middleware::Error::Middleware(err)) => err
                .downcast_ref::<HttpError>()
                .map_or(Verdict::Permanent, Classify::classify),
            Attempt::Runtime(err) => err.classify(),
        }
    }

    fn reason(&self) -> Option<Reason> {
        match self {
            Attempt::Response(response) => {
                crate::retry::HttpStatus(response.status().as_u16()).reason()
            }
            Attempt::Middleware(reqwest_middleware::Error::Reqwest(err)) => err.reason(),
            Attempt::Middleware(reqwest_middleware::Error::Middleware(err)) => {
                err.downcast_ref::<HttpError>().and_then(Classify::reason)
            }
            Attempt::Runtime(err) => err.reason(),
        }
    }
}

/// One attempt's response as the retry executor and the breaker see it.
fn judge(outcome: reqwest_middleware::Result<Response>) -> Result<Response, Attempt> {
    match outcome {
        Ok(response) if classify_response(&response).is_retryable() => {
            Err(Attempt::Response(Box::new(response)))
        }
        Ok(response) => Ok(response),
        Err(err) => Err(Attempt::Middleware(err)),
    }
}

/// Back to what a middleware returns: the last response as is, whatever
/// its status.
fn settle(outcome: Result<Response, Attempt>) -> reqwest_middleware::Result<Response> {
    match outcome {
        Ok(response) => Ok(response),
        Err(Attempt::Response(response)) => Ok(*response),
        Err(Attempt::Middleware(err)) => Err(err),
        Err(Attempt::Runtime(err)) => Err(reqwest_middleware::Error::middleware(
            HttpError::Resilience(err),
        )),
    }
}

#[async_trait::async_trait]
impl Middleware for ResilienceMiddleware {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let name = self.name;
        let (limit, priority) = (
            self.limit.as_deref(),
            extensions
                .get::<crate::limit::Priority>()
                .copied()
                .or_else(crate::limit::scoped_priority)
                .unwrap_or_default(),
        );
        let once = if self.policy.max_attempts() <= 1 {
            Some("the policy allows one attempt")
        } else {
            sent_once_because(&request, extensions.get::<RetryOverride>().copied())
        };
        if let Some(reason) = once {
            if self.policy.max_attempts() > 1 {
                tracing::debug!(
                    target: "resilience::http",
                    name,
                    method = %request.method(),
                    url = %request.url(),
                    reason,
                    "request sent once, not retried"
                );
            }
            let once = http_rules::limited(limit, priority, async {
                judge(next.run(request, extensions).await)
            });
            return settle(http_rules::through(self.breaker.as_ref(), once).await);
        }
        let name = self.name;
        let (template, shared) = (&request, &*extensions);
        let attempt = || {
            let next = next.clone();
            async move {
                let request = template.try_clone().ok_or_else(|| {
                    // Checked by `sent_once_because` above.
                    Attempt::Middleware(reqwest_middleware::Error::middleware(
                        HttpError::BodyNotReplayable {
                            method: template.method().clone(),
                            url: Box::new(template.url().clone()),
                        },
                    ))
                })?;
                // Each attempt gets the extensions as they came in; the
                // successful one's are handed back.
                let mut extensions = shared.clone();
                let send = async { judge(next.run(request, &mut extensions).await) };
                let response = http_rules::limited(limit, priority, send).await?;
                Ok((response, extensions))
            }
        };
        let outcome = match self.hedge {
            Some(hedge) => {
                let hedged = self.policy.hedge(hedge, attempt);
                http_rules::through(self.breaker.as_ref(), hedged).await
            }
            None => {
                let chain = self.policy.retry(attempt).notify(|event: &Event<'_, Attempt>| {
                    if let Event::Retry { attempt, delay, .. } = event {
                        tracing::debug!(target: "resilience::http", name, attempt, ?delay, "retrying request");
                    }
                });
                http_rules::through(self.breaker.as_ref(), chain).await
            }
        };
        settle(outcome.map(|(response, used)| {
            extensions.extend(used);
            response
        }))
    }
}
