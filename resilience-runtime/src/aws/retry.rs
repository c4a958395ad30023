//! The library's retry policy as an AWS SDK client's own retry: one loop,
//! the SDK's, every decision of which is the policy's.

use std::cell::Cell;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use aws_smithy_runtime::client::retries::RetryPartition;
use aws_smithy_runtime::client::retries::TokenBucket;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeSerializationInterceptorContextRef, BeforeTransmitInterceptorContextMut,
    BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextRef, InterceptorContext,
};
use aws_smithy_runtime_api::client::retries::RequestAttempts;
use aws_smithy_runtime_api::client::retries::classifiers::{
    ClassifyRetry, RetryAction, RetryClassifierPriority, RetryReason,
};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use aws_smithy_types::retry::{ErrorKind, RetryConfig, RetrySpec};
use aws_smithy_types::timeout::TimeoutConfig;
use tokio::time::Instant;

use super::classify::by_kind;
use crate::deadline;
use crate::retry::attempts::Next;
use crate::retry::{Attempts, DefaultRng, Event, GiveUp, NotKept, Policy, Reason, Verdict};
use crate::telemetry::{Labels, RetryMetrics};

/// The name both halves answer to, in the SDK's logs and errors.
const NAME: &str = "resilience::aws::AwsRetry";

/// A retry [`Policy`] run as an AWS SDK client's retry, so that a call to
/// S3 (or any AWS service) has one retry loop: the SDK's, each of whose
/// attempts is one of the policy's.
///
/// The SDK keeps sending the requests, signing them and reading the
/// answers; every decision about another attempt is the policy's, made by
/// the same rules as `#[retry]`'s:
///
/// - which errors are retried: the SDK's own classifiers (its lists of
///   throttling and transient error codes, 500/502/503/504, timeouts and
///   I/O failures), the judgement [`Classify`](crate::Classify) gives
///   `SdkError` too;
/// - how many attempts: the policy's `max_attempts`;
/// - how long each pause: the policy's backoff and jitter, never shorter
///   than the server's `x-amz-retry-after`;
/// - when to stop early: a pause that would cross the policy's
///   `max_elapsed` or the caller's [deadline](crate::deadline) is not
///   taken; an empty retry [`Budget`](crate::retry::Budget) of the policy
///   refuses the retry;
/// - how long one attempt may run: the earliest of the policy's
///   `attempt_timeout`, the SDK's own `operation_attempt_timeout`, the
///   caller's deadline and the end of `max_elapsed`: a hung S3 is cut
///   then, and no attempt starts after the deadline;
/// - inside another retry chain (an SDK call in a `#[retry]` fn): the SDK
///   makes one attempt and the outer chain retries, never 3 × 3.
///
/// Each attempt is recorded in `http_client_retries_total` (and
/// `dependency_errors_total`) under the labels given, as `#[retry]`'s are.
/// The SDK's client-wide retry quota (its token bucket) is turned off by
/// [`retry_partition`](Self::retry_partition): the policy's budget is the
/// one that applies.
///
/// Put the four pieces on the client's config; the circuit breaker goes
/// around the call (caller → breaker → retry → transport), where it counts
/// the logical call once and, while open, lets the SDK send nothing:
///
/// ```no_run
/// use resilience::aws::AwsRetry;
/// use resilience::{BreakerConfig, CircuitBreaker, Policy};
///
/// # async fn demo(config: aws_sdk_s3::config::Builder) -> Result<(), Box<dyn std::error::Error>> {
/// // `config`: the client's config as the application builds it, e.g.
/// // `aws_sdk_s3::config::Builder::from(&aws_config::load_defaults(..).await)`.
/// let retry = AwsRetry::new("s3", Policy::http());
/// let s3 = aws_sdk_s3::Client::from_conf(
///     config
///         .retry_config(retry.retry_config())
///         .retry_partition(retry.retry_partition())
///         .retry_classifier(retry.clone())
///         .interceptor(retry)
///         .build(),
/// );
/// let breaker = CircuitBreaker::new("s3", BreakerConfig::relaxed())?;
/// let avatar = breaker
///     .call(s3.get_object().bucket("avatars").key("ann").send())
///     .await?;
/// # Ok(()) }
/// ```
///
/// Without the interceptor the classifier cannot see the call's chain: it
/// then forbids every retry (one attempt a call), never a loop the policy
/// does not decide. A config whose `RetryConfig` is not
/// [`retry_config`](Self::retry_config)'s (fewer attempts than the
/// policy's, or the SDK's 2.1 retry behaviour, which would bend the
/// policy's pauses) fails each call before anything is sent, with an error
/// that says so.
#[derive(Debug, Clone)]
pub struct AwsRetry {
    inner: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    policy: Arc<Policy>,
    labels: Labels,
}

impl AwsRetry {
    /// The policy for calls to `target` (the metrics' `target` label, the
    /// `service` label being the application's, as [`Labels::of`] reads
    /// it).
    pub fn new(target: &'static str, policy: Policy) -> Self {
        Self::with_labels(Labels::of(target), policy)
    }

    /// The policy, recording under `labels`.
    pub fn with_labels(labels: Labels, policy: Policy) -> Self {
        Self {
            inner: Arc::new(Shared {
                policy: Arc::new(policy),
                labels,
            }),
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    /// The SDK's retry configuration that lets the policy decide: the
    /// standard mode with the policy's `max_attempts`, the pauses the
    /// policy asks for taken as they are (`RetrySpec` 2.0, whose
    /// `x-amz-retry-after` handling does not clamp them into the SDK's own
    /// backoff window), and never capped below `max_elapsed`.
    pub fn retry_config(&self) -> RetryConfig {
        let policy = self.policy();
        RetryConfig::standard()
            .with_max_attempts(policy.max_attempts())
            .with_max_backoff(policy.max_elapsed())
            .with_retry_spec(RetrySpec::v2_0())
    }

    /// A retry partition named after the target, without the SDK's retry
    /// quota (an unlimited token bucket): the policy's
    /// [`Budget`](crate::retry::Budget), when it has one, limits the
    /// retries instead. Without it, the SDK's bucket (500 tokens, 5 a
    /// retry, shared by every client of the partition) can refuse a retry
    /// the policy granted.
    pub fn retry_partition(&self) -> RetryPartition {
        RetryPartition::custom(self.inner.labels.target())
            .token_bucket(TokenBucket::unlimited())
            .build()
    }

    fn chain(cfg: &ConfigBag) -> Result<&Chain, BoxError> {
        cfg.load::<Chain>().ok_or_else(|| {
            BoxError::from(format!(
                "{NAME}: the call's retry chain is missing: the interceptor must be installed with `interceptor(retry)` on the client's config"
            ))
        })
    }

    /// Checks that the SDK will let the policy decide.
    fn check_config(&self, cfg: &ConfigBag) -> Result<(), BoxError> {
        let wanted = self.policy().max_attempts();
        let Some(config) = cfg.load::<RetryConfig>() else {
            return Err(format!(
                "{NAME}: the client has no RetryConfig: set `retry_config(retry.retry_config())`"
            )
            .into());
        };
        if config.max_attempts() < wanted {
            return Err(format!(
                "{NAME}: the client's RetryConfig allows {} attempts, the policy {wanted}: set `retry_config(retry.retry_config())` on the client's config",
                config.max_attempts()
            )
            .into());
        }
        if config
            .retry_spec()
            .is_some_and(|spec| spec.is_at_least(RetrySpec::V2_1))
        {
            return Err(format!(
                "{NAME}: the client's RetryConfig has the SDK's retry behaviour 2.1, which clamps the policy's pauses into its own backoff: set `retry_config(retry.retry_config())` on the client's config"
            )
            .into());
        }
        Ok(())
    }
}

/// One logical call's chain, kept in the call's config bag.
#[derive(Debug, Clone)]
struct Chain(Arc<Mutex<ChainState>>);

impl Storable for Chain {
    type Storer = StoreReplace<Self>;
}

#[derive(Debug)]
struct ChainState {
    attempts: Attempts<DefaultRng, Arc<Policy>, NotKept>,
    metrics: RetryMetrics,
    /// The client's own `operation_attempt_timeout`, which the chain's
    /// timer may shorten for one attempt but never lengthen.
    own_timeout: Option<Duration>,
}

impl Chain {
    fn lock(&self) -> MutexGuard<'_, ChainState> {
        // A panic while held leaves counts that are still counts.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What the interceptor decided after an attempt, for the classifier the
/// SDK's retry strategy asks next.
#[derive(Debug, Clone, Copy)]
enum Decision {
    /// The attempt succeeded: nothing to add.
    Done,
    /// Another attempt after this pause.
    Retry(Duration, ErrorKind),
    /// No other attempt.
    Stop,
}

thread_local! {
    // The SDK's orchestrator runs the attempt's last interceptor hook
    // (`read_after_attempt`) and then, in the same poll and with no await
    // between them, asks the retry strategy, which runs the classifiers:
    // the decision passes from one to the other here, on that thread.
    static DECISION: Cell<Option<Decision>> = const { Cell::new(None) };
}

/// The time the SDK must give the attempt that starts at `start`, under
/// the chain started at `began`: the policy's attempt timeout, the caller's
/// deadline and the end of `max_elapsed`, whichever comes first.
fn attempt_limit(
    policy: &Policy,
    began: Instant,
    start: Instant,
    own: Option<Duration>,
) -> Duration {
    let mut end = began + policy.max_elapsed();
    if let Some(timeout) = policy.attempt_timeout() {
        end = end.min(start + timeout);
    }
    if let Some(deadline) = deadline::current() {
        end = end.min(deadline);
    }
    let limit = end.saturating_duration_since(start);
    own.map_or(limit, |own| own.min(limit))
}

fn arm(cfg: &mut ConfigBag, limit: Duration) {
    let config = cfg
        .load::<TimeoutConfig>()
        .map(TimeoutConfig::to_builder)
        .unwrap_or_default()
        .operation_attempt_timeout(limit)
        .build();
    cfg.interceptor_state().store_put(config);
}

/// The SDK's judgement of the attempt, by every classifier but ours.
fn sdk_judgement(ctx: &InterceptorContext, components: &RuntimeComponents) -> RetryAction {
    let mut action = RetryAction::NoActionIndicated;
    for classifier in components.retry_classifiers() {
        if classifier.name() == NAME {
            continue;
        }
        let next = classifier.classify_retry_v2(ctx, &action);
        if next == RetryAction::NoActionIndicated {
            continue;
        }
        action = next;
        if action == RetryAction::RetryForbidden {
            break;
        }
    }
    action
}

/// The SDK's judgement as the policy's verdict, with the reason the
/// metrics record.
fn verdict(ctx: &InterceptorContext, action: &RetryAction) -> (Verdict, Option<Reason>) {
    let status = ctx.response().map(|response| response.status().as_u16());
    let error = ctx.output_or_error().and_then(Result::err);
    let reason = match (status, error) {
        (Some(408), _) => Some(Reason::Timeout),
        (Some(status), _) if status >= 500 => Some(Reason::ServerError),
        (_, Some(err)) if err.is_timeout_error() => Some(Reason::Timeout),
        (_, Some(err)) => match err.as_connector_error() {
            Some(connector) if connector.is_timeout() => Some(Reason::Timeout),
            Some(connector) if connector.is_user() => None,
            Some(_) => Some(Reason::Network),
            None if err.is_response_error() => Some(Reason::Network),
            None => None,
        },
        (_, None) => None,
    };
    let verdict = match action {
        RetryAction::RetryIndicated(RetryReason::RetryableError { kind, retry_after }) => {
            let verdict = retry_after.map_or(Verdict::Transient, Verdict::RetryAfter);
            match (
                by_kind(*kind),
                ctx.response().and_then(super::classify::retry_after),
            ) {
                (Verdict::Permanent, _) => Verdict::Permanent,
                (_, Some(asked)) if verdict == Verdict::Transient => Verdict::RetryAfter(asked),
                _ => verdict,
            }
        }
        _ => Verdict::Permanent,
    };
    let reason = match (verdict, status) {
        (Verdict::Transient | Verdict::RetryAfter(_), Some(_)) => {
            reason.or(Some(Reason::ServerError))
        }
        (Verdict::Permanent, Some(status)) if status < 500 => None,
        _ => reason,
    };
    (verdict, reason)
}

fn kind_of(action: &RetryAction) -> ErrorKind {
    match action {
        RetryAction::RetryIndicated(RetryReason::RetryableError { kind, .. }) => *kind,
        _ => ErrorKind::TransientError,
    }
}

impl Intercept for AwsRetry {
    fn name(&self) -> &'static str {
        NAME
    }

    fn read_before_execution(
        &self,
        _context: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        DECISION.set(None);
        self.check_config(cfg)?;
        let own_timeout = cfg
            .load::<TimeoutConfig>()
            .and_then(TimeoutConfig::operation_attempt_timeout);
        let state = ChainState {
            attempts: Attempts::with_rng(Arc::clone(&self.inner.policy), DefaultRng),
            metrics: RetryMetrics::new(self.inner.labels),
            own_timeout,
        };
        cfg.interceptor_state()
            .store_put(Chain(Arc::new(Mutex::new(state))));
        Ok(())
    }

    fn modify_before_retry_loop(
        &self,
        _context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // The first attempt's timer, armed before the SDK reads it.
        let chain = Self::chain(cfg)?.clone();
        let mut state = chain.lock();
        let state = &mut *state;
        match state.attempts.begin() {
            Err(_) => {
                let error: &BoxError = &"the caller's deadline had passed".into();
                state.metrics.record(
                    &Event::GaveUp {
                        attempt: 0,
                        error,
                        reason: GiveUp::Deadline,
                    },
                    |_| None,
                );
                Err(format!("{NAME}: the caller's deadline had passed before the first attempt; nothing was sent").into())
            }
            Ok(timer) => {
                let now = Instant::now();
                if let Some((until, _)) = timer {
                    let limit = until.saturating_duration_since(now);
                    arm(cfg, state.own_timeout.map_or(limit, |own| own.min(limit)));
                }
                Ok(())
            }
        }
    }

    fn read_before_attempt(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        DECISION.set(None);
        let sdk_attempt = cfg
            .load::<RequestAttempts>()
            .map_or(1, RequestAttempts::attempts);
        let chain = Self::chain(cfg)?;
        let mut state = chain.lock();
        // The first attempt began before the loop (its timer is read before
        // this hook runs); each later one here, after its pause.
        if state.attempts.attempt() < sdk_attempt && state.attempts.begin().is_err() {
            return Err(format!(
                "{NAME}: the caller's deadline passed during the pause; nothing more was sent"
            )
            .into());
        }
        Ok(())
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let ctx = context.inner();
        let chain = Self::chain(cfg)?.clone();
        let mut state = chain.lock();
        let state = &mut *state;
        let attempt = state.attempts.attempt();
        if !ctx.is_failed() {
            state
                .metrics
                .record(&Event::Success::<()> { attempt }, |_| None);
            DECISION.set(Some(Decision::Done));
            return Ok(());
        }
        let action = sdk_judgement(ctx, runtime_components);
        let (verdict, reason) = verdict(ctx, &action);
        let error = &();
        let decision = match state.attempts.failed(verdict) {
            Next::Retry { delay, until } => {
                state.metrics.record(
                    &Event::Retry {
                        attempt,
                        delay,
                        error,
                        verdict,
                    },
                    |_| reason,
                );
                if let Some(began) = state.attempts.started() {
                    let policy = Arc::clone(&self.inner.policy);
                    arm(cfg, attempt_limit(&policy, began, until, state.own_timeout));
                }
                Decision::Retry(delay, kind_of(&action))
            }
            Next::GiveUp(give_up) => {
                state.metrics.record(
                    &Event::GaveUp {
                        attempt,
                        error,
                        reason: give_up,
                    },
                    |_| reason,
                );
                Decision::Stop
            }
        };
        DECISION.set(Some(decision));
        Ok(())
    }
}

impl ClassifyRetry for AwsRetry {
    fn classify_retry(&self, ctx: &InterceptorContext) -> RetryAction {
        self.classify_retry_v2(ctx, &RetryAction::NoActionIndicated)
    }

    fn classify_retry_v2(&self, _ctx: &InterceptorContext, previous: &RetryAction) -> RetryAction {
        match DECISION.take() {
            Some(Decision::Done) => previous.clone(),
            Some(Decision::Retry(delay, kind)) => {
                RetryAction::retryable_error_with_explicit_delay(kind, delay)
            }
            // Stopped by the policy, or no chain to ask (the interceptor
            // is not installed): never a retry the policy did not decide.
            Some(Decision::Stop) | None => RetryAction::RetryForbidden,
        }
    }

    fn name(&self) -> &'static str {
        NAME
    }

    fn priority(&self) -> RetryClassifierPriority {
        // After every classifier of the SDK's (the last runs at 20) and
        // most of the application's: the policy has the last word.
        (0..100).fold(
            RetryClassifierPriority::transient_error_classifier(),
            |priority, _| RetryClassifierPriority::run_after(priority),
        )
    }
}
