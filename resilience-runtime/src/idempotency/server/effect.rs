//! The handler's word that its effect was not applied.

/// A response extension by which a handler declares that **nothing was
/// applied**: the [`IdempotencyLayer`](super::IdempotencyLayer) then frees
/// the key instead of storing the response, and the client's retry with the
/// same key runs the handler again.
///
/// Without it, every response the handler gives, `5xx` included, is final
/// for its key: it is stored and replayed, since the layer cannot tell a
/// `500` raised before the charge from one raised after the commit. Insert
/// the marker only where the handler knows no side effect happened, e.g. a
/// `503` answered because the database was unreachable before the
/// transaction began, or a dependency refused the call outright. A marker
/// on a response of any status frees the key; it is meant for failures.
///
/// With axum, return it as `axum::Extension` among the response parts:
///
/// ```
/// use axum::{Extension, http::StatusCode, response::IntoResponse};
/// use resilience::idempotency::server::EffectNotApplied;
///
/// async fn create_payment() -> impl IntoResponse {
///     // The bank refused the connection: no charge was sent.
///     (StatusCode::SERVICE_UNAVAILABLE, Extension(EffectNotApplied), "bank unavailable")
/// }
/// # let _ = create_payment;
/// ```
///
/// With any other `http` service, insert it into the response's
/// extensions:
///
/// ```
/// use http::{Response, StatusCode};
/// use resilience::idempotency::server::EffectNotApplied;
///
/// let mut response = Response::new("database unreachable; nothing was written");
/// *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
/// response.extensions_mut().insert(EffectNotApplied);
/// assert!(EffectNotApplied::is_on(&response));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EffectNotApplied;

impl EffectNotApplied {
    /// Whether `response` carries the marker.
    pub fn is_on<B>(response: &http::Response<B>) -> bool {
        response.extensions().get::<Self>().is_some()
    }
}
