//! Requests that can be sent again, and the one-line helpers on reqwest's
//! builders and responses.

use std::future::Future;

use bytes::Bytes;
use reqwest::{Client, Request, RequestBuilder, Response};

use super::classify::{classify_response, retry_after};
use super::error::{HttpError, StatusError};
use crate::idempotency::{IDEMPOTENCY_KEY_HEADER, IdempotencyKey};
use crate::retry::{Policy, Verdict};

/// More of an error body than this is not read: the connection is closed
/// instead of drained.
const DRAIN_LIMIT: usize = 64 * 1024;

mod sealed {
    #![allow(unreachable_pub)] // the usual sealed-trait pattern
    pub trait Sealed {}
    impl Sealed for reqwest::RequestBuilder {}
    impl Sealed for reqwest::Response {}
}

/// Resilience helpers on [`reqwest::RequestBuilder`].
pub trait RequestBuilderExt: sealed::Sealed + Sized {
    /// Sets the `Idempotency-Key` header to `key`, in the IETF draft's
    /// form: a Structured Field String, `"order-42"`
    /// ([`IdempotencyKey::header_value`]).
    ///
    /// Build the key once per logical call, outside the retried code, so
    /// that every attempt carries the same value (the guide's
    /// [idempotency first, retry second](crate::guide#idempotency-first-retry-second)).
    ///
    /// ```
    /// use resilience::IdempotencyKey;
    /// use resilience::http::RequestBuilderExt;
    ///
    /// let key = IdempotencyKey::from_string("order-42")?;
    /// let request = reqwest::Client::new()
    ///     .post("http://127.0.0.1:8080/payments")
    ///     .idempotency_key(&key)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(request.headers()["idempotency-key"], r#""order-42""#);
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    fn idempotency_key(self, key: &IdempotencyKey) -> RequestBuilder;

    /// Sends the request under `policy`: every attempt sends the same
    /// request again (body included), a non-success status is a
    /// [`StatusError`], and the verdicts follow the guide's table of
    /// [what may be retried](crate::guide#what-may-be-retried).
    ///
    /// Checked before the first attempt, when the policy allows more than
    /// one: the body can be sent again, and a `POST` or `PATCH` carries an
    /// `Idempotency-Key` (see [`ReplayableRequest::new`]).
    fn with_policy(self, policy: Policy) -> RetriedRequest;

    /// Builds the request and checks that it can be retried; see
    /// [`ReplayableRequest::new`].
    fn replayable(self) -> Result<ReplayableRequest, HttpError>;
}

impl RequestBuilderExt for RequestBuilder {
    fn idempotency_key(self, key: &IdempotencyKey) -> RequestBuilder {
        self.header(IDEMPOTENCY_KEY_HEADER, key.header_value())
    }

    fn with_policy(self, policy: Policy) -> RetriedRequest {
        let (client, request) = self.build_split();
        let request = request.map_err(HttpError::from).and_then(|request| {
            ReplayableRequest::check(client, request, policy.max_attempts() > 1)
        });
        RetriedRequest { request, policy }
    }

    fn replayable(self) -> Result<ReplayableRequest, HttpError> {
        let (client, request) = self.build_split();
        ReplayableRequest::new(client, request?)
    }
}

/// Resilience helpers on [`reqwest::Response`].
pub trait ResponseExt: sealed::Sealed + Sized {
    /// The verdict for this response; see
    /// [`classify_response`](super::classify_response).
    fn verdict(&self) -> Verdict;

    /// The response itself when its status is a success (`2xx`), else a
    /// [`StatusError`] with the status and `Retry-After`, after draining the
    /// body (up to 64 KiB; a longer body closes the connection instead) so
    /// that nothing of this attempt leaks into the next.
    fn check(self) -> impl Future<Output = Result<Response, StatusError>> + Send;
}

impl ResponseExt for Response {
    fn verdict(&self) -> Verdict {
        classify_response(self)
    }

    async fn check(self) -> Result<Response, StatusError> {
        if self.status().is_success() {
            return Ok(self);
        }
        let status = self.status();
        let retry_after = retry_after(self.headers());
        let url = self.url().clone();
        let body = drain(self).await;
        Err(StatusError::new(status, retry_after, url, body))
    }
}

/// Reads an error body to its end (bounded), keeping its first bytes.
async fn drain(mut response: Response) -> String {
    let mut excerpt = Vec::new();
    let mut read = 0;
    while read <= DRAIN_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                read += chunk.len();
                let room = StatusError::BODY_EXCERPT.saturating_sub(excerpt.len());
                excerpt.extend_from_slice(&chunk[..room.min(chunk.len())]);
            }
            Ok(None) => break,
            // The status is the error being reported; a body that breaks
            // while being drained only means the connection is not reused,
            // which dropping the response below takes care of.
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&excerpt).into_owned()
}

/// A request that can be sent once per attempt: its body is buffered, so
/// every attempt sends the same bytes.
///
/// ```no_run
/// use resilience::http::{HttpError, RequestBuilderExt};
/// use resilience::{IdempotencyKey, Policy};
///
/// # async fn demo(client: reqwest::Client) -> Result<(), HttpError> {
/// let request = client
///     .post("http://127.0.0.1:8080/payments")
///     .idempotency_key(&IdempotencyKey::new())
///     .body("amount=10")
///     .replayable()?;
/// let response = Policy::http()
///     .retry(|| request.send())
///     .notify(|event| println!("{event:?}"))
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ReplayableRequest {
    client: Client,
    request: Request,
}

impl ReplayableRequest {
    /// Checks that `request` can be retried:
    ///
    /// - its body is buffered, not a stream: a stream is consumed by the
    ///   first attempt, and a retry would send an empty or truncated body
    ///   ([`HttpError::BodyNotReplayable`]);
    /// - a `POST` or `PATCH` carries an `Idempotency-Key` header, without
    ///   which a retry may run it twice ([`HttpError::MissingIdempotencyKey`]).
    ///
    /// Both errors are permanent: they describe the request, not the server.
    pub fn new(client: Client, request: Request) -> Result<Self, HttpError> {
        Self::check(client, request, true)
    }

    fn check(client: Client, request: Request, retried: bool) -> Result<Self, HttpError> {
        if retried {
            check_retryable(&request)?;
        }
        Ok(Self { client, request })
    }

    /// The request every attempt sends.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// One attempt: sends a copy of the request, and turns a non-success
    /// status into a [`StatusError`] (see [`ResponseExt::check`]).
    pub async fn send(&self) -> Result<Response, HttpError> {
        let request = self
            .request
            .try_clone()
            .ok_or_else(|| HttpError::BodyNotReplayable {
                method: self.request.method().clone(),
                url: Box::new(self.request.url().clone()),
            })?;
        let response = self.client.execute(request).await?;
        Ok(response.check().await?)
    }
}

/// The checks of [`ReplayableRequest::new`].
pub(super) fn check_retryable(request: &Request) -> Result<(), HttpError> {
    if request.try_clone().is_none() {
        return Err(HttpError::BodyNotReplayable {
            method: request.method().clone(),
            url: Box::new(request.url().clone()),
        });
    }
    if crate::http_rules::lacks_idempotency_key(request.method(), request.headers()) {
        return Err(HttpError::MissingIdempotencyKey {
            method: request.method().clone(),
            url: Box::new(request.url().clone()),
        });
    }
    Ok(())
}

/// A request to be sent under a retry policy; built by
/// [`RequestBuilderExt::with_policy`], run by one of its methods.
///
/// [`bytes`](Self::bytes), [`text`](Self::text) and
/// [`read_with`](Self::read_with) read the body inside each attempt, so a
/// connection dropped in the middle of the body is retried like any other
/// network failure; [`send`](Self::send) retries until the headers of a
/// successful response arrive.
#[derive(Debug)]
#[must_use = "a request does nothing until it is sent"]
pub struct RetriedRequest {
    request: Result<ReplayableRequest, HttpError>,
    policy: Policy,
}

impl RetriedRequest {
    /// Sends the request until a successful response arrives, and returns
    /// it with its body unread.
    pub async fn send(self) -> Result<Response, HttpError> {
        self.read_with(|response| async move { Ok(response) }).await
    }

    /// Sends the request and reads the whole body of the successful
    /// response.
    pub async fn bytes(self) -> Result<Bytes, HttpError> {
        self.read_with(|response| async move { Ok(response.bytes().await?) })
            .await
    }

    /// Sends the request and reads the successful response as text.
    pub async fn text(self) -> Result<String, HttpError> {
        self.read_with(|response| async move { Ok(response.text().await?) })
            .await
    }

    /// Sends the request and hands each successful response to `read`,
    /// inside the attempt: an error of `read` is classified like any other
    /// and may lead to another attempt.
    pub async fn read_with<T, F, Fut>(self, read: F) -> Result<T, HttpError>
    where
        F: Fn(Response) -> Fut,
        Fut: Future<Output = Result<T, HttpError>>,
    {
        let request = self.request?;
        let (request, read) = (&request, &read);
        self.policy
            .retry(|| async move { read(request.send().await?).await })
            .await
    }
}
