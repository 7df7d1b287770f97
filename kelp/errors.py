"""Errors Kelp raises, each carrying the Kafka error code a client understands.

The storage layer, the broker core and the HTTP API raise these; the Kafka
handlers put `code` in the response and log `str(exc)`, the HTTP API returns
`http_status` with a JSON body holding the message. A message names what was
wrong (topic, partition, limit) and, where it can, what to change.
"""

from __future__ import annotations


class KelpError(Exception):
    """Base class: `code` is the Kafka protocol error code."""

    code: int = -1  # UNKNOWN_SERVER_ERROR
    http_status: int = 500

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__class__.__name__)


class ConfigError(KelpError):
    code = 40  # INVALID_CONFIG
    http_status = 400


class OffsetOutOfRangeError(KelpError):
    code = 1
    http_status = 416


class CorruptRecordError(KelpError):
    code = 2  # CORRUPT_MESSAGE
    http_status = 400


class UnknownTopicOrPartitionError(KelpError):
    code = 3
    http_status = 404


class InvalidFetchSizeError(KelpError):
    code = 4
    http_status = 400


class LeaderNotAvailableError(KelpError):
    code = 5
    http_status = 503


class NotLeaderOrFollowerError(KelpError):
    code = 6
    http_status = 503


class RequestTimedOutError(KelpError):
    code = 7
    http_status = 504


class RecordTooLargeError(KelpError):
    code = 10  # MESSAGE_TOO_LARGE
    http_status = 413


class CoordinatorLoadInProgressError(KelpError):
    code = 14
    http_status = 503


class CoordinatorNotAvailableError(KelpError):
    code = 15
    http_status = 503


class NotCoordinatorError(KelpError):
    code = 16
    http_status = 503


class InvalidTopicError(KelpError):
    code = 17  # INVALID_TOPIC_EXCEPTION
    http_status = 400


class RecordListTooLargeError(KelpError):
    code = 18
    http_status = 413


class NotEnoughReplicasError(KelpError):
    code = 19
    http_status = 503


class InvalidRequiredAcksError(KelpError):
    code = 21
    http_status = 400


class IllegalGenerationError(KelpError):
    code = 22
    http_status = 409


class InconsistentGroupProtocolError(KelpError):
    code = 23
    http_status = 409


class InvalidGroupIdError(KelpError):
    code = 24
    http_status = 400


class UnknownMemberIdError(KelpError):
    code = 25
    http_status = 404


class InvalidSessionTimeoutError(KelpError):
    code = 26
    http_status = 400


class RebalanceInProgressError(KelpError):
    code = 27
    http_status = 409


class InvalidCommitOffsetSizeError(KelpError):
    code = 28
    http_status = 400


class InvalidTimestampError(KelpError):
    code = 32
    http_status = 400


class UnsupportedVersionError(KelpError):
    code = 35
    http_status = 400


class TopicAlreadyExistsError(KelpError):
    code = 36
    http_status = 409


class InvalidPartitionsError(KelpError):
    code = 37
    http_status = 400


class InvalidReplicationFactorError(KelpError):
    code = 38
    http_status = 400


class InvalidRequestError(KelpError):
    code = 42
    http_status = 400


class PolicyViolationError(KelpError):
    code = 44  # POLICY_VIOLATION: e.g. deleting records of a compacted topic
    http_status = 400


class OutOfOrderSequenceError(KelpError):
    code = 45
    http_status = 409


class DuplicateSequenceError(KelpError):
    code = 46
    http_status = 409


class InvalidProducerEpochError(KelpError):
    code = 47
    http_status = 409


class UnknownProducerIdError(KelpError):
    code = 59
    http_status = 409


class NonEmptyGroupError(KelpError):
    code = 68
    http_status = 409


class GroupIdNotFoundError(KelpError):
    code = 69
    http_status = 404


class MemberIdRequiredError(KelpError):
    code = 79
    http_status = 409


class FencedInstanceIdError(KelpError):
    code = 82
    http_status = 409


class GroupSubscribedToTopicError(KelpError):
    code = 86
    http_status = 409


class UnsupportedForMessageFormatError(KelpError):
    """A v0/v1 message set (magic 0 or 1): Kelp stores RecordBatch v2 only."""

    code = 43
    http_status = 400


class KafkaStorageError(KelpError):
    """The partition's log directory failed (I/O error); the replica is offline."""

    code = 56
    http_status = 503


class UnsupportedCompressionTypeError(KelpError):
    """A batch or a topic config names a codec whose library this installation lacks."""

    code = 76  # UNSUPPORTED_COMPRESSION_TYPE
    http_status = 400


class InvalidRecordError(KelpError):
    """A batch is well-formed on the wire but breaks a rule of the log (empty, bad offsets, no key on a compacted
    topic)."""

    code = 87  # INVALID_RECORD
    http_status = 400


# -- cluster: controller, leadership, replication -------------------------------------


class StaleControllerEpochError(KelpError):
    """A request from a controller that has been deposed (its epoch is older than one already seen)."""

    code = 11
    http_status = 409


class NotEnoughReplicasAfterAppendError(KelpError):
    """The batch was written, but the in-sync replicas shrank below min.insync.replicas before it was replicated."""

    code = 20
    http_status = 503


class NotControllerError(KelpError):
    code = 41
    http_status = 421


class ReassignmentInProgressError(KelpError):
    code = 60
    http_status = 409


class FencedLeaderEpochError(KelpError):
    """The request names an older leader epoch than this broker's: the client's metadata is stale."""

    code = 74
    http_status = 409


class UnknownLeaderEpochError(KelpError):
    """The request names a newer leader epoch than this broker knows yet."""

    code = 75
    http_status = 409


class OffsetNotAvailableError(KelpError):
    """A new leader's high watermark has not yet reached the offset its epoch began at (KIP-207): the
    end offset it would answer could be lower than one a client already saw. Retriable."""

    code = 78
    http_status = 503


class PreferredLeaderNotAvailableError(KelpError):
    code = 80
    http_status = 503


class ElectionNotNeededError(KelpError):
    code = 84
    http_status = 409


class NoReassignmentInProgressError(KelpError):
    code = 85
    http_status = 404


class InvalidUpdateVersionError(KelpError):
    """An AlterPartition based on an older partition epoch than the controller's."""

    code = 95
    http_status = 409


class IneligibleReplicaError(KelpError):
    code = 107
    http_status = 409


class BrokerIdNotRegisteredError(KelpError):
    code = 102
    http_status = 503


class InvalidReplicaAssignmentError(KelpError):
    """A replica assignment (or its cancellation) that would leave a partition without a complete copy."""

    code = 39
    http_status = 409
