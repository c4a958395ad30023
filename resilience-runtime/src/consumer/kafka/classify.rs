//! `rdkafka` errors classified by the one classifier, after librdkafka's
//! own list of the errors it retries.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::retry::{Classify, Outcome, Reason, Verdict};

/// librdkafka's error codes, as librdkafka itself judges them when a
/// request fails (`rd_kafka_err_action` in `rdkafka_request.c`): the
/// codes it retries, directly or after refreshing its metadata, are
/// transient; every other code is permanent, as librdkafka's default
/// branch makes it.
///
/// | code | verdict | `reason` label |
/// |---|---|---|
/// | `_TRANSPORT` (broker transport failure), `_SSL`, `_ALL_BROKERS_DOWN`, `_RESOLVE` (DNS), `_DESTROY_BROKER`, `NETWORK_EXCEPTION` | [`Verdict::Transient`] | `network` |
/// | `_TIMED_OUT`, `_TIMED_OUT_QUEUE`, `_MSG_TIMED_OUT` (a produce librdkafka could not deliver within `message.timeout.ms`), `REQUEST_TIMED_OUT` | [`Verdict::Transient`] | `timeout` |
/// | `LEADER_NOT_AVAILABLE`, `NOT_LEADER_FOR_PARTITION`, `BROKER_NOT_AVAILABLE`, `REPLICA_NOT_AVAILABLE`, `COORDINATOR_NOT_AVAILABLE`, `NOT_COORDINATOR`, `_WAIT_COORD`, `COORDINATOR_LOAD_IN_PROGRESS`, `NOT_ENOUGH_REPLICAS`, `NOT_ENOUGH_REPLICAS_AFTER_APPEND`, `KAFKA_STORAGE_ERROR`, `INVALID_MSG` (a CRC mismatch) | [`Verdict::Transient`] | `5xx` (the broker's failure) |
/// | `_QUEUE_FULL` (the producer's local queue) | [`Verdict::Transient`] | none: back-pressure of this process |
/// | every other code: `MSG_SIZE_TOO_LARGE`, `TOPIC_AUTHORIZATION_FAILED`, `UNKNOWN_TOPIC_OR_PART` (a topic that does not exist, auto-creation off), `INVALID_TOPIC_EXCEPTION`, `_INVALID_ARG`, `_FATAL`… | [`Verdict::Permanent`] | none |
///
/// Three codes beyond `rd_kafka_err_action`'s table are transient for the
/// same reason as its transport errors: `_ALL_BROKERS_DOWN` and `_RESOLVE`
/// are the client's view of a cluster it cannot reach, `_QUEUE_FULL` is
/// a producer waiting for the cluster to drain its queue.
///
/// ```
/// use resilience::{Classify, Verdict};
/// use resilience::consumer::kafka::rdkafka::error::RDKafkaErrorCode;
///
/// assert_eq!(RDKafkaErrorCode::NotCoordinator.classify(), Verdict::Transient);
/// assert_eq!(RDKafkaErrorCode::MessageSizeTooLarge.classify(), Verdict::Permanent);
/// ```
impl Classify for RDKafkaErrorCode {
    fn classify(&self) -> Verdict {
        if self.reason().is_some() || *self == RDKafkaErrorCode::QueueFull {
            Verdict::Transient
        } else {
            Verdict::Permanent
        }
    }

    fn reason(&self) -> Option<Reason> {
        use RDKafkaErrorCode as C;
        match self {
            C::BrokerTransportFailure
            | C::SSL
            | C::AllBrokersDown
            | C::Resolve
            | C::DestroyBroker
            | C::NetworkException => Some(Reason::Network),
            C::OperationTimedOut | C::TimedOutQueue | C::MessageTimedOut | C::RequestTimedOut => {
                Some(Reason::Timeout)
            }
            C::LeaderNotAvailable
            | C::NotLeaderForPartition
            | C::BrokerNotAvailable
            | C::ReplicaNotAvailable
            | C::CoordinatorNotAvailable
            | C::NotCoordinator
            | C::WaitingForCoordinator
            | C::CoordinatorLoadInProgress
            | C::NotEnoughReplicas
            | C::NotEnoughReplicasAfterAppend
            | C::KafkaStorageError
            | C::InvalidMessage => Some(Reason::ServerError),
            _ => None,
        }
    }

    fn outcome(&self) -> Outcome {
        self.classify().outcome()
    }
}

/// `rdkafka`'s error, by its librdkafka code (see
/// [`RDKafkaErrorCode`'s verdicts](#impl-Classify-for-RDKafkaErrorCode)),
/// and for the variants without one:
///
/// | error | verdict |
/// |---|---|
/// | a variant with a code (`MessageProduction`, `MessageConsumption`, `ConsumerCommit`, `MetadataFetch`, `Global`…) | the code's |
/// | `Transaction` | transient when librdkafka marks the error retriable (`rd_kafka_error_is_retriable`), permanent otherwise |
/// | `Canceled` (the client was dropped before the operation completed) | [`Verdict::Ignored`]: the application is shutting the client down |
/// | `MessageConsumptionFatal`, `ClientConfig`, `ClientCreation`, `Subscription`, `Seek`, `PauseResume`, `Nul`, `PartitionEOF`… | [`Verdict::Permanent`] |
///
/// # One retrying layer with librdkafka's producer
///
/// librdkafka retries a produce by itself: `message.send.max.retries`
/// (`retries`, unbounded by default) within `message.timeout.ms`
/// (`delivery.timeout.ms`, 300 s by default), and with
/// `enable.idempotence = true` those retries are never written twice. The
/// error a `FutureProducer` delivery report brings back is what is left
/// once that loop gave up. **Keep librdkafka's loop, and no `#[retry]`
/// around a produce**: its resends are deduplicated by the broker, ours
/// would be new records (duplicates whenever the first one was written
/// but its answer lost), and each of our attempts would run librdkafka's
/// whole loop again. Bound that loop by the call's budget instead
/// (`message.timeout.ms` of about 5 s for a request path), and put only
/// `#[circuit_breaker]` around the produce, which counts the logical call
/// once. The dead-letter producer of [`Kafka`](super::Kafka) follows this
/// rule: its delivery report is awaited once, and a failure hands the
/// message back rather than retrying the produce.
///
/// A `#[retry]` fn whose error wraps a `KafkaError` is still allowed, for
/// a producer with librdkafka's loop turned off (`message.send.max.retries
/// = 0`), where ours is then the one layer; its `attempt_timeout` must be
/// longer than `message.timeout.ms`.
///
/// ```
/// use resilience::{Classify, Verdict};
/// use resilience::consumer::kafka::rdkafka::error::{KafkaError, RDKafkaErrorCode};
///
/// let down = KafkaError::MessageProduction(RDKafkaErrorCode::AllBrokersDown);
/// assert_eq!(down.classify(), Verdict::Transient);
/// let too_large = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
/// assert_eq!(too_large.classify(), Verdict::Permanent);
/// assert_eq!(KafkaError::Canceled.classify(), Verdict::Ignored);
/// ```
impl Classify for KafkaError {
    fn classify(&self) -> Verdict {
        match self {
            KafkaError::Canceled => Verdict::Ignored,
            KafkaError::MessageConsumptionFatal(_) => Verdict::Permanent,
            KafkaError::Transaction(error) => {
                if error.is_retriable() {
                    Verdict::Transient
                } else {
                    Verdict::Permanent
                }
            }
            other => other
                .rdkafka_error_code()
                .map_or(Verdict::Permanent, |code| code.classify()),
        }
    }

    fn reason(&self) -> Option<Reason> {
        match self {
            KafkaError::MessageConsumptionFatal(_) | KafkaError::Canceled => None,
            KafkaError::Transaction(error) => error.code().reason(),
            other => other.rdkafka_error_code().and_then(|code| code.reason()),
        }
    }

    fn outcome(&self) -> Outcome {
        self.classify().outcome()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RDKafkaErrorCode as C;

    /// librdkafka 2.12.1 (the source `rdkafka-sys` 4.10 bundles),
    /// `rd_kafka_err_action` in `src/rdkafka_request.c`: its default
    /// branch gives `REFRESH` (retried once the metadata is refreshed) to
    /// `LEADER_NOT_AVAILABLE`, `NOT_LEADER_FOR_PARTITION`,
    /// `BROKER_NOT_AVAILABLE`, `REPLICA_NOT_AVAILABLE`,
    /// `COORDINATOR_NOT_AVAILABLE`, `NOT_COORDINATOR`, `_WAIT_COORD`,
    /// `_DESTROY_BROKER`; `RETRY` to `KAFKA_STORAGE_ERROR`, `_TRANSPORT`,
    /// `_SSL`, `_TIMED_OUT`, `REQUEST_TIMED_OUT`,
    /// `NOT_ENOUGH_REPLICAS_AFTER_APPEND`, `NOT_ENOUGH_REPLICAS`,
    /// `INVALID_MSG`, `_TIMED_OUT_QUEUE`, `COORDINATOR_LOAD_IN_PROGRESS`;
    /// `PERMANENT` to `_PURGE_INFLIGHT`, `_BAD_MSG`, `_DESTROY`,
    /// `INVALID_SESSION_TIMEOUT`, `_UNSUPPORTED_FEATURE`, `_PURGE_QUEUE`
    /// and every other code.
    #[test]
    fn librdkafkas_retried_codes_are_transient_and_the_rest_permanent() {
        let retried = [
            C::LeaderNotAvailable,
            C::NotLeaderForPartition,
            C::BrokerNotAvailable,
            C::ReplicaNotAvailable,
            C::CoordinatorNotAvailable,
            C::NotCoordinator,
            C::WaitingForCoordinator,
            C::DestroyBroker,
            C::KafkaStorageError,
            C::BrokerTransportFailure,
            C::SSL,
            C::OperationTimedOut,
            C::RequestTimedOut,
            C::NotEnoughReplicasAfterAppend,
            C::NotEnoughReplicas,
            C::InvalidMessage,
            C::TimedOutQueue,
            C::CoordinatorLoadInProgress,
        ];
        for code in retried {
            assert_eq!(code.classify(), Verdict::Transient, "{code:?}");
            assert!(code.reason().is_some(), "{code:?} has a reason");
        }
        let permanent = [
            C::PurgeInflight,
            C::BadMessage,
            C::BrokerDestroy,
            C::InvalidSessionTimeout,
            C::UnsupportedFeature,
            C::PurgeQueue,
            // Answers a second attempt repeats word for word.
            C::MessageSizeTooLarge,
            C::TopicAuthorizationFailed,
            C::GroupAuthorizationFailed,
            C::ClusterAuthorizationFailed,
            C::SaslAuthenticationFailed,
            C::UnknownTopicOrPartition,
            C::UnknownTopic,
            C::InvalidTopic,
            C::InvalidArgument,
            C::Fatal,
        ];
        for code in permanent {
            assert_eq!(code.classify(), Verdict::Permanent, "{code:?}");
            assert_eq!(code.outcome(), Outcome::Success, "{code:?}: an answer");
        }
    }

    /// The client-side views of a cluster it cannot reach, beside
    /// librdkafka's list: all brokers down, DNS, a
    /// produce not delivered within `message.timeout.ms`, a full local
    /// queue.
    #[test]
    fn an_unreachable_cluster_is_transient_and_a_failure() {
        for (code, reason) in [
            (C::AllBrokersDown, Some(Reason::Network)),
            (C::Resolve, Some(Reason::Network)),
            (C::NetworkException, Some(Reason::Network)),
            (C::MessageTimedOut, Some(Reason::Timeout)),
            (C::QueueFull, None),
        ] {
            assert_eq!(code.classify(), Verdict::Transient, "{code:?}");
            assert_eq!(code.outcome(), Outcome::Failure, "{code:?}");
            assert_eq!(code.reason(), reason, "{code:?}");
        }
    }

    #[test]
    fn kafka_errors_take_their_codes_verdict() {
        let produce = KafkaError::MessageProduction(C::NotEnoughReplicas);
        assert_eq!(produce.classify(), Verdict::Transient);
        assert_eq!(produce.reason(), Some(Reason::ServerError));
        let consume = KafkaError::MessageConsumption(C::BrokerTransportFailure);
        assert_eq!(consume.classify(), Verdict::Transient);
        assert_eq!(consume.reason(), Some(Reason::Network));
        assert_eq!(
            KafkaError::ConsumerCommit(C::RebalanceInProgress).classify(),
            Verdict::Permanent
        );
        assert_eq!(
            KafkaError::MessageConsumptionFatal(C::BrokerTransportFailure).classify(),
            Verdict::Permanent,
            "librdkafka says it will not recover"
        );
        assert_eq!(KafkaError::Canceled.classify(), Verdict::Ignored);
        assert_eq!(KafkaError::Canceled.outcome(), Outcome::Ignored);
        assert_eq!(
            KafkaError::ClientCreation("bad".into()).classify(),
            Verdict::Permanent
        );
    }
}
