"""Kafka's error codes, the REST Proxy's, and the errors Kelp raises carrying them.

`ErrorCode` is the one table of Kafka protocol error codes Kelp produces or
interprets: the Kafka handlers answer with them, the HTTP API puts them in
`error_code`, and the clients (the Spark source, the CLI, the operator, the
replica fetcher) compare against them. Names and numbers are Kafka's
(org.apache.kafka.common.protocol.Errors); a test checks each against
kafka-python's table. Confluent's five-digit codes (the REST Proxy's
`RestErrorCode`, the Schema Registry's) are a namespace of their own, in
`kelp.rest_errors`; `RestErrorCode` is re-exported here for its importers.

The storage layer, the broker core and the HTTP API raise `KelpError`s; the
Kafka handlers put `code` in the response and log `str(exc)`, the HTTP API
returns `http_status` with a JSON body holding the message. A message names
what was wrong (topic, partition, limit) and, where it can, what to change.
"""

from __future__ import annotations

from enum import IntEnum, unique

from .rest_errors import RestErrorCode as RestErrorCode  # re-exported: the REST routes import it from here


@unique
class ErrorCode(IntEnum):
    """Kafka protocol error codes (the subset Kelp uses), with Kafka's names.

    An IntEnum: it goes on the wire, into JSON and into messages as the plain
    number, and compares equal to the int a response decoded.
    """

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INVALID_UPDATE_VERSION = 95
    UNKNOWN_TOPIC_ID = 100
    BROKER_ID_NOT_REGISTERED = 102
    # Kafka's Raft answers it to a request from another cluster's log; Kelp's brokers answer it to a metadata delivery
    # that does not extend the history they applied (MetadataDivergedError).
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    INELIGIBLE_REPLICA = 107
    # KIP-848 consumer groups: a heartbeat or commit with a member epoch the coordinator does not accept, a static
    # member's instance id still held by a live member, a ServerAssignor not in group.consumer.assignors.
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    # DescribeCluster (KIP-919): a broker asked for the controllers' endpoints, or for an endpoint type it lacks.
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    TRANSACTION_ABORTABLE = 120
    # KIP-932 share groups: an acknowledgement of a record the member does not hold; a share session unknown,
    # or asked with an epoch other than the next one.
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    INVALID_REGULAR_EXPRESSION = 128


class KelpError(Exception):
    """Base class: `code` is the Kafka protocol error code."""

    code: int = ErrorCode.UNKNOWN_SERVER_ERROR
    http_status: int = 500

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__class__.__name__)


class ConfigError(KelpError):
    code = ErrorCode.INVALID_CONFIG
    http_status = 400


class OffsetOutOfRangeError(KelpError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE
    http_status = 416


class CorruptRecordError(KelpError):
    code = ErrorCode.CORRUPT_MESSAGE
    http_status = 400


class UnknownTopicOrPartitionError(KelpError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    http_status = 404


class UnknownTopicIdError(KelpError):
    """A request named a topic by an id no topic has (KIP-516: Fetch v13+, DeleteTopics v6+)."""

    code = ErrorCode.UNKNOWN_TOPIC_ID
    http_status = 404


class InvalidFetchSizeError(KelpError):
    code = ErrorCode.INVALID_FETCH_SIZE
    http_status = 400


class LeaderNotAvailableError(KelpError):
    code = ErrorCode.LEADER_NOT_AVAILABLE
    http_status = 503


class NotLeaderOrFollowerError(KelpError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    http_status = 503


class RequestTimedOutError(KelpError):
    code = ErrorCode.REQUEST_TIMED_OUT
    http_status = 504


class RecordTooLargeError(KelpError):
    code = ErrorCode.MESSAGE_TOO_LARGE
    http_status = 413


class CoordinatorLoadInProgressError(KelpError):
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    http_status = 503


class CoordinatorNotAvailableError(KelpError):
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    http_status = 503


class NotCoordinatorError(KelpError):
    code = ErrorCode.NOT_COORDINATOR
    http_status = 503


class InvalidTopicError(KelpError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION
    http_status = 400


class RecordListTooLargeError(KelpError):
    code = ErrorCode.RECORD_LIST_TOO_LARGE
    http_status = 413


class NotEnoughReplicasError(KelpError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS
    http_status = 503


class InvalidRequiredAcksError(KelpError):
    code = ErrorCode.INVALID_REQUIRED_ACKS
    http_status = 400


class IllegalGenerationError(KelpError):
    code = ErrorCode.ILLEGAL_GENERATION
    http_status = 409


class InconsistentGroupProtocolError(KelpError):
    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    http_status = 409


class InvalidGroupIdError(KelpError):
    code = ErrorCode.INVALID_GROUP_ID
    http_status = 400


class UnknownMemberIdError(KelpError):
    code = ErrorCode.UNKNOWN_MEMBER_ID
    http_status = 404


class InvalidSessionTimeoutError(KelpError):
    code = ErrorCode.INVALID_SESSION_TIMEOUT
    http_status = 400


class RebalanceInProgressError(KelpError):
    code = ErrorCode.REBALANCE_IN_PROGRESS
    http_status = 409


class InvalidCommitOffsetSizeError(KelpError):
    code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    http_status = 400


class InvalidTimestampError(KelpError):
    code = ErrorCode.INVALID_TIMESTAMP
    http_status = 400


class UnsupportedVersionError(KelpError):
    code = ErrorCode.UNSUPPORTED_VERSION
    http_status = 400


class TopicAlreadyExistsError(KelpError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS
    http_status = 409


class InvalidPartitionsError(KelpError):
    code = ErrorCode.INVALID_PARTITIONS
    http_status = 400


class InvalidReplicationFactorError(KelpError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR
    http_status = 400


class InvalidRequestError(KelpError):
    code = ErrorCode.INVALID_REQUEST
    http_status = 400


class PolicyViolationError(KelpError):
    """A request the topic's policy forbids, e.g. deleting records of a compacted topic."""

    code = ErrorCode.POLICY_VIOLATION
    http_status = 400


class OutOfOrderSequenceError(KelpError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    http_status = 409


class DuplicateSequenceError(KelpError):
    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    http_status = 409


class InvalidProducerEpochError(KelpError):
    code = ErrorCode.INVALID_PRODUCER_EPOCH
    http_status = 409


class InvalidTxnStateError(KelpError):
    """A producer's batch does not fit its transaction's state (a plain batch while its transaction is open,
    or the reverse), as Kafka's ProducerAppendInfo refuses it."""

    code = ErrorCode.INVALID_TXN_STATE
    http_status = 409


class TxnVerificationError(KelpError):
    """A transactional batch the partition leader did not append because the transaction coordinator did not
    confirm its partition is in the transaction (KIP-890): the code is the one Kafka's ReplicaManager answers
    for the coordinator's (INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH, NOT_ENOUGH_REPLICAS for a retriable
    one, INVALID_PRODUCER_ID_MAPPING, TRANSACTION_ABORTABLE...)."""

    http_status = 409

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class TransactionCoordinatorFencedError(KelpError):
    """A transaction marker from a coordinator epoch older than one this partition has seen (a zombie coordinator)."""

    code = ErrorCode.TRANSACTION_COORDINATOR_FENCED
    http_status = 409


class UnknownProducerIdError(KelpError):
    code = ErrorCode.UNKNOWN_PRODUCER_ID
    http_status = 409


class NonEmptyGroupError(KelpError):
    code = ErrorCode.NON_EMPTY_GROUP
    http_status = 409


class GroupIdNotFoundError(KelpError):
    code = ErrorCode.GROUP_ID_NOT_FOUND
    http_status = 404


class TransactionalIdNotFoundError(KelpError):
    code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    http_status = 404


class MemberIdRequiredError(KelpError):
    code = ErrorCode.MEMBER_ID_REQUIRED
    http_status = 409


class FencedInstanceIdError(KelpError):
    code = ErrorCode.FENCED_INSTANCE_ID
    http_status = 409


class GroupSubscribedToTopicError(KelpError):
    code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    http_status = 409


class UnsupportedForMessageFormatError(KelpError):
    """A v0/v1 message set (magic 0 or 1): Kelp stores RecordBatch v2 only."""

    code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
    http_status = 400


class KafkaStorageError(KelpError):
    """The partition's log directory failed (I/O error); the replica is offline."""

    code = ErrorCode.KAFKA_STORAGE_ERROR
    http_status = 503


class UnsupportedCompressionTypeError(KelpError):
    """A batch or a topic config names a codec whose library this installation lacks."""

    code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    http_status = 400


class InvalidRecordError(KelpError):
    """A batch is well-formed on the wire but breaks a rule of the log (empty, bad offsets, no key on a compacted
    topic)."""

    code = ErrorCode.INVALID_RECORD
    http_status = 400


# -- cluster: controller, leadership, replication -------------------------------------


class StaleControllerEpochError(KelpError):
    """A request from a controller that has been deposed (its epoch is older than one already seen)."""

    code = ErrorCode.STALE_CONTROLLER_EPOCH
    http_status = 409


class MetadataDivergedError(KelpError):
    """A metadata delivery whose entries do not extend the history this broker applied: the controller's store lost
    entries (restored from an older copy, or its newest entries removed) and another history was written on top."""

    code = ErrorCode.INCONSISTENT_CLUSTER_ID
    http_status = 409


class NotEnoughReplicasAfterAppendError(KelpError):
    """The batch was written, but the in-sync replicas shrank below min.insync.replicas before it was replicated."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    http_status = 503


class NotControllerError(KelpError):
    code = ErrorCode.NOT_CONTROLLER
    http_status = 421


class ReassignmentInProgressError(KelpError):
    code = ErrorCode.REASSIGNMENT_IN_PROGRESS
    http_status = 409


class FencedLeaderEpochError(KelpError):
    """The request names an older leader epoch than this broker's: the client's metadata is stale."""

    code = ErrorCode.FENCED_LEADER_EPOCH
    http_status = 409


class UnknownLeaderEpochError(KelpError):
    """The request names a newer leader epoch than this broker knows yet."""

    code = ErrorCode.UNKNOWN_LEADER_EPOCH
    http_status = 409


class OffsetNotAvailableError(KelpError):
    """A new leader's high watermark has not yet reached the offset its epoch began at (KIP-207): the
    end offset it would answer could be lower than one a client already saw. Retriable."""

    code = ErrorCode.OFFSET_NOT_AVAILABLE
    http_status = 503


class PreferredLeaderNotAvailableError(KelpError):
    code = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    http_status = 503


class ElectionNotNeededError(KelpError):
    code = ErrorCode.ELECTION_NOT_NEEDED
    http_status = 409


class NoReassignmentInProgressError(KelpError):
    code = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    http_status = 404


class InvalidUpdateVersionError(KelpError):
    """An AlterPartition based on an older partition epoch than the controller's."""

    code = ErrorCode.INVALID_UPDATE_VERSION
    http_status = 409


class IneligibleReplicaError(KelpError):
    code = ErrorCode.INELIGIBLE_REPLICA
    http_status = 409


class BrokerIdNotRegisteredError(KelpError):
    code = ErrorCode.BROKER_ID_NOT_REGISTERED
    http_status = 503


class InvalidReplicaAssignmentError(KelpError):
    """A replica assignment (or its cancellation) that would leave a partition without a complete copy."""

    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    http_status = 409


# -- authorization (issue 20): Kafka's codes; over HTTP 403 (the principal is known, the action is not allowed)
class TopicAuthorizationFailedError(KelpError):
    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    http_status = 403


class GroupAuthorizationFailedError(KelpError):
    code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    http_status = 403


class ClusterAuthorizationFailedError(KelpError):
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    http_status = 403


class TransactionalIdAuthorizationFailedError(KelpError):
    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    http_status = 403


class SecurityDisabledError(KelpError):
    """An ACL operation on a broker without an authorizer (`authorizer.class.name` is empty)."""

    code = ErrorCode.SECURITY_DISABLED
    http_status = 409
