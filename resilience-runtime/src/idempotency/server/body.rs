//! The response body of the layer: the handler's own stream, or bytes the
//! layer buffered, stored or wrote.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

/// The error of [`ResponseBody`] and of the service: the handler's error,
/// boxed, as tower does.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

pin_project! {
    /// The body of every response that leaves an
    /// [`Idempotency`](super::Idempotency) service.
    ///
    /// Requests the layer does not guard, and responses it does not store
    /// (marked [`EffectNotApplied`](super::EffectNotApplied), `408`, `429`),
    /// keep the handler's body as is, streamed. Stored and replayed
    /// responses are buffered bytes with an exact length.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Buffered {
            data: Option<Bytes>,
            trailers: Option<HeaderMap>,
            error: Option<BoxError>,
        },
        // A body over the storage limit: what was read, then the rest.
        Spilled { prefix: Option<Bytes>, rest: Pin<Box<B>> },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        Self::buffered(data, None, None)
    }

    pub(crate) fn buffered(
        data: Bytes,
        trailers: Option<HeaderMap>,
        error: Option<BoxError>,
    ) -> Self {
        Self {
            kind: Kind::Buffered {
                data: (!data.is_empty()).then_some(data),
                trailers,
                error,
            },
        }
    }

    pub(crate) fn spilled(prefix: Bytes, rest: Pin<Box<B>>) -> Self {
        Self {
            kind: Kind::Spilled {
                prefix: (!prefix.is_empty()).then_some(prefix),
                rest,
            },
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx).map_err(Into::into),
            KindProj::Buffered {
                data,
                trailers,
                error,
            } => Poll::Ready(if let Some(data) = data.take() {
                Some(Ok(Frame::data(data)))
            } else if let Some(error) = error.take() {
                Some(Err(error))
            } else {
                trailers.take().map(|t| Ok(Frame::trailers(t)))
            }),
            KindProj::Spilled { prefix, rest } => match prefix.take() {
                Some(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
                None => rest.as_mut().poll_frame(cx).map_err(Into::into),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Buffered {
                data,
                trailers,
                error,
            } => data.is_none() && trailers.is_none() && error.is_none(),
            Kind::Spilled { prefix, rest } => prefix.is_none() && rest.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Buffered { data, .. } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Spilled { prefix, rest } => {
                let extra = prefix.as_ref().map_or(0, |d| d.len() as u64);
                let rest = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower().saturating_add(extra));
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper.saturating_add(extra));
                }
                hint
            }
        }
    }
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Inner { .. } => "Inner",
            Kind::Buffered { .. } => "Buffered",
            Kind::Spilled { .. } => "Spilled",
        };
        f.debug_struct("ResponseBody").field("kind", &kind).finish()
    }
}
