//! The one way this crate connects to Redis: a `redis` connection manager
//! configured to fail fast, shared by the idempotency store, the consumer's
//! deduplicator and the shared circuit breaker.
//!
//! `redis`' own defaults retry a failed reconnection 6 times with
//! exponential backoff from 100 ms, and every command waits for them: with
//! Redis dead, each command would take seconds to fail. Here a connection
//! opens within 250 ms or fails, a command is answered within 500 ms or
//! fails, and a lost connection is re-established by the next command,
//! without retries of its own, so nothing waits long on a dead Redis and a
//! restarted one is used again at once.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// How long a connection to Redis may take to open.
pub(crate) const CONNECTION_TIMEOUT: Duration = Duration::from_millis(250);

/// How long a command may wait for its answer.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);

/// Retries of a failed reconnection: none, the next command tries again.
pub(crate) const RECONNECT_RETRIES: usize = 0;

/// The longest pause between two reconnection attempts, for managers
/// configured with retries.
pub(crate) const MAX_RECONNECT_DELAY: Duration = Duration::from_millis(500);

/// The fail-fast configuration: `redis`' defaults but for the four values
/// above.
pub(crate) fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_number_of_retries(RECONNECT_RETRIES)
        .set_max_delay(MAX_RECONNECT_DELAY)
}

/// Connects to `url` with `config`.
pub(crate) async fn connect(
    url: &str,
    config: ConnectionManagerConfig,
) -> redis::RedisResult<ConnectionManager> {
    let client = redis::Client::open(url)?;
    ConnectionManager::new_with_config(client, config).await
}
