//! A service's own Redis commands through the `redis` crate: its errors
//! classified, and a command that may have been applied retried only when
//! repeating it is safe (cargo feature `redis-commands`).
//!
//! # What may be retried
//!
//! [`Classify`] for [`redis::RedisError`]:
//!
//! | error | verdict | outcome |
//! |---|---|---|
//! | connection refused, reset, aborted, broken pipe, EOF, timed out; any other I/O error | [`Verdict::Transient`] | failure |
//! | `LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY` (a replica after a failover): the server refused the command for now | [`Verdict::Transient`] | failure |
//! | `WRONGTYPE`, `NOSCRIPT`, `ERR` (syntax, arguments), `EXECABORT`, `CROSSSLOT`, `MOVED`/`ASK` outside the cluster client, an authentication or ACL refusal (`NOAUTH`, `WRONGPASS`, `NOPERM`), a reply of an unexpected type | [`Verdict::Permanent`] | success: Redis answered |
//! | a reply that could not be parsed | [`Verdict::Fatal`] | failure |
//! | an error of the client's own before anything was sent (invalid configuration) | [`Verdict::Ignored`] | ignored |
//!
//! # What may be repeated
//!
//! A retried command runs twice when its first attempt was applied and
//! only the answer was lost: the connection broke after the command was
//! sent, or the answer was late. For `GET`, `SET`, `DEL` or `HSET` that is
//! harmless; for `INCR`, `LPUSH` or a script it applies the effect twice
//! (the guide's rule for a `POST`). So [`Command`] retries a command that
//! is not [idempotent](IDEMPOTENT_COMMANDS) only after an error that says
//! it was **not** applied: a refused connection, or a server that refused
//! it (`LOADING`, `READONLY`, …). After a reset, an EOF or a timeout it
//! stops, the error a failure ([`Verdict::Fatal`]), unless the caller
//! declared the command safe to repeat ([`Command::idempotent`]: a script
//! that checks a request id, an `INCR` whose double count does not
//! matter).
//!
//! # With the `redis` crate's own reconnects
//!
//! The `redis` crate retries no command by itself on a single node: a
//! command on a broken connection fails with its error, and
//! [`redis::aio::ConnectionManager`] reconnects in the background, every
//! command issued meanwhile waiting for it (6 reconnection attempts by
//! default). That is one loop, ours, as long as the manager's reconnection
//! fits in one attempt: bound it (`ConnectionManagerConfig`: few
//! reconnection attempts, connection and response timeouts) under the
//! policy's `attempt_timeout`. The cluster client does retry commands
//! (`ClusterClientBuilder::retries`, 16 by default, on `MOVED`, `ASK`,
//! `TRYAGAIN` and connection errors): set it to 0 under a policy, or keep
//! the cluster client's loop and leave the retrying to it (see
//! [clients that retry](crate::clients_that_retry)).

use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, ServerErrorKind};

use crate::error::Error;
use crate::retry::{Classify, Policy, Reason, Verdict};

impl Classify for RedisError {
    fn classify(&self) -> Verdict {
        if self.is_timeout() || self.is_connection_dropped() || self.is_connection_refusal() {
            return Verdict::Transient;
        }
        match self.kind() {
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly,
            ) => Verdict::Transient,
            // The guide retries every transport error.
            ErrorKind::Io
            | ErrorKind::ClusterConnectionNotFound
            | ErrorKind::MasterNameNotFoundBySentinel
            | ErrorKind::NoValidReplicasFoundBySentinel => Verdict::Transient,
            ErrorKind::Server(_)
            | ErrorKind::Extension
            | ErrorKind::AuthenticationFailed
            | ErrorKind::UnexpectedReturnType
            | ErrorKind::RESP3NotSupported => Verdict::Permanent,
            ErrorKind::Client | ErrorKind::InvalidClientConfig | ErrorKind::EmptySentinelList => {
                Verdict::Ignored
            }
            // A broken reply, and any kind a later `redis` adds: a
            // failure, not retried.
            _ => Verdict::Fatal,
        }
    }

    fn reason(&self) -> Option<Reason> {
        if self.is_timeout() {
            return Some(Reason::Timeout);
        }
        match self.classify() {
            Verdict::Permanent | Verdict::Ignored => None,
            _ if matches!(self.kind(), ErrorKind::Server(_)) => Some(Reason::ServerError),
            _ => Some(Reason::Network),
        }
    }
}

/// Whether the command that failed with `error` may have been applied by
/// Redis: `false` only when the error says it was not (the connection was
/// refused, or the server answered with an error); `true` after a reset,
/// an EOF, a timeout or a broken reply, when only the answer may be lost.
///
/// ```
/// use redis::{ErrorKind, RedisError};
/// use resilience::redis_commands::may_have_been_applied;
///
/// let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
/// assert!(!may_have_been_applied(&refused));
/// let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
/// assert!(may_have_been_applied(&reset));
/// ```
pub fn may_have_been_applied(error: &RedisError) -> bool {
    !(error.is_connection_refusal()
        || matches!(error.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
        || matches!(error.classify(), Verdict::Ignored))
}

/// The commands that leave the same data when run twice as when run once,
/// so that a retry after a lost answer is harmless: reads, and writes that
/// set rather than add. As with HTTP's `DELETE`, the answer to the repeat
/// may differ (`DEL` and `SADD` count 0 the second time). `SET` with `NX`,
/// `XX`+`GET` or `GET`, and `ZADD` with `INCR`, are not: [`Command`] looks
/// at their options.
pub const IDEMPOTENT_COMMANDS: &[&str] = &[
    // Reads.
    "BITCOUNT",
    "DBSIZE",
    "ECHO",
    "EXISTS",
    "GET",
    "GETBIT",
    "GETRANGE",
    "HEXISTS",
    "HGET",
    "HGETALL",
    "HKEYS",
    "HLEN",
    "HMGET",
    "HSCAN",
    "HSTRLEN",
    "HVALS",
    "KEYS",
    "LINDEX",
    "LLEN",
    "LPOS",
    "LRANGE",
    "MGET",
    "PFCOUNT",
    "PING",
    "PTTL",
    "SCAN",
    "SCARD",
    "SISMEMBER",
    "SMEMBERS",
    "SMISMEMBER",
    "SRANDMEMBER",
    "SSCAN",
    "STRLEN",
    "TTL",
    "TYPE",
    "XLEN",
    "XRANGE",
    "XREVRANGE",
    "ZCARD",
    "ZCOUNT",
    "ZMSCORE",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZRANK",
    "ZREVRANGE",
    "ZREVRANK",
    "ZSCAN",
    "ZSCORE",
    // Writes that set a value, whatever was there.
    "DEL",
    "EXPIRE",
    "EXPIREAT",
    "HDEL",
    "HMSET",
    "HSET",
    "MSET",
    "PERSIST",
    "PEXPIRE",
    "PEXPIREAT",
    "PFADD",
    "PSETEX",
    "SADD",
    "SET",
    "SETEX",
    "SREM",
    "UNLINK",
    "ZADD",
    "ZREM",
];

/// The options that make `SET` or `ZADD` answer differently, or act
/// differently, the second time.
const UNSAFE_OPTIONS: &[(&str, &[&str])] = &[("SET", &["NX", "GET"]), ("ZADD", &["INCR"])];

/// One Redis command run under a retry [`Policy`] by the rule of
/// [what may be repeated](self#what-may-be-repeated): a command that is not
/// idempotent is retried only after an error that says it was not
/// applied, unless the caller [declares it safe](Self::idempotent).
///
/// ```no_run
/// use resilience::Policy;
/// use resilience::redis_commands::Command;
///
/// # async fn demo(redis: redis::aio::ConnectionManager) -> Result<(), Box<dyn std::error::Error>> {
/// let policy = Policy::http();
/// // Retried over a reset: reading twice is harmless.
/// let name: Option<String> = Command::new(redis::cmd("GET").arg("user:42:name"))
///     .query(&policy, &redis)
///     .await?;
/// // Retried after LOADING or READONLY (not applied), never after a reset
/// // or a timeout (maybe applied): counted once or not at all.
/// let views: i64 = Command::new(redis::cmd("INCR").arg("page:42:views"))
///     .query(&policy, &redis)
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Command<'a> {
    cmd: &'a Cmd,
    name: String,
    idempotent: bool,
}

impl<'a> Command<'a> {
    /// The command, judged idempotent by its name and options
    /// ([`IDEMPOTENT_COMMANDS`]).
    pub fn new(cmd: &'a Cmd) -> Self {
        let mut args = cmd.args_iter().filter_map(|arg| match arg {
            redis::Arg::Simple(bytes) => Some(String::from_utf8_lossy(bytes).to_ascii_uppercase()),
            _ => None,
        });
        let name = args.next().unwrap_or_default();
        let options: Vec<String> = args.collect();
        let unsafe_option = UNSAFE_OPTIONS
            .iter()
            .filter(|(command, _)| *command == name)
            .any(|(_, unsafe_options)| {
                options
                    .iter()
                    .any(|option| unsafe_options.contains(&option.as_str()))
            });
        let idempotent = IDEMPOTENT_COMMANDS.contains(&name.as_str()) && !unsafe_option;
        Self {
            cmd,
            name,
            idempotent,
        }
    }

    /// Declares the command safe to run twice (a script that checks a
    /// request id, a count whose rare double does not matter): retried
    /// after any transient error, as a read is.
    #[must_use]
    pub fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// The command's name, upper case (`INCR`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether a retry after a lost answer is harmless.
    pub fn is_idempotent(&self) -> bool {
        self.idempotent
    }

    /// The verdict on an attempt of this command that failed with `error`:
    /// its [classification](Classify), except that a transient error after
    /// which a command that is not idempotent may have been applied stops
    /// the chain ([`Verdict::Fatal`]: a failure, not retried).
    pub fn verdict(&self, error: &CommandError) -> Verdict {
        let verdict = error.classify();
        let maybe_applied = match error {
            CommandError::Redis(err) => may_have_been_applied(err),
            // An attempt cut by its timeout: sent, the answer late.
            CommandError::Resilience(Error::AttemptTimeout(_)) => true,
            CommandError::Resilience(_) => false,
        };
        if verdict.is_retryable() && maybe_applied && !self.idempotent {
            Verdict::Fatal
        } else {
            verdict
        }
    }

    /// Runs the command on `connection` (a clone of it for each attempt,
    /// as the `redis` crate's connections are handles) under `policy`.
    ///
    /// # Errors
    ///
    /// The last attempt's [`CommandError::Redis`], or
    /// [`CommandError::Resilience`] when the policy's time or the caller's
    /// deadline ran out.
    pub async fn query<T, C>(&self, policy: &Policy, connection: &C) -> Result<T, CommandError>
    where
        T: FromRedisValue,
        C: redis::aio::ConnectionLike + Clone,
    {
        (*policy)
            .retry(|| {
                let mut connection = connection.clone();
                async move {
                    self.cmd
                        .query_async::<T>(&mut connection)
                        .await
                        .map_err(CommandError::Redis)
                }
            })
            .when(|error: &CommandError| self.verdict(error))
            .await
    }
}

/// The error of a [`Command`]: Redis's, or the runtime's own (the policy's
/// time, the caller's deadline).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// The last attempt's error.
    #[error(transparent)]
    Redis(#[from] RedisError),
    /// The chain's own end.
    #[error(transparent)]
    Resilience(#[from] Error),
}

impl Classify for CommandError {
    fn classify(&self) -> Verdict {
        match self {
            CommandError::Redis(err) => err.classify(),
            CommandError::Resilience(err) => err.classify(),
        }
    }

    fn reason(&self) -> Option<Reason> {
        match self {
            CommandError::Redis(err) => err.reason(),
            CommandError::Resilience(err) => err.reason(),
        }
    }
}
