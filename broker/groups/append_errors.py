"""Which Kafka error a client gets when writing to `__consumer_offsets` failed.

Why: commits and group-metadata writes go through the replica manager, whose
errors are about a partition of an internal topic the client never named.
Kafka translates them (GroupMetadataManager.storeOffsets / storeGroup) into
coordinator errors that tell the client what to do: COORDINATOR_NOT_AVAILABLE
(retry, maybe elsewhere) while too few replicas are in sync or the write timed
out, NOT_COORDINATOR (find the coordinator again) when this broker is no longer
the partition's leader, and UNKNOWN_SERVER_ERROR for anything else.

This module must never do I/O; it is a pure mapping.
"""

from __future__ import annotations

from kelp.errors import ErrorCode

__all__ = ["commit_error_code", "group_write_error_code"]

_RETRY_ELSEWHERE = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.REQUEST_TIMED_OUT,
})
_MOVED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR})
_TOO_LARGE = frozenset({ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE})


def _kafka_code(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None)
    return code if isinstance(code, int) else None


def group_write_error_code(exc: BaseException) -> int:
    """The error for a failed group-metadata write (SyncGroup's assignment, a deletion).

    An exception that carries no Kafka error code (an OSError from the disk, a
    bug) is reported as COORDINATOR_NOT_AVAILABLE: the client retries, and the
    broker log has the traceback.
    """
    code = _kafka_code(exc)
    if code is None or code in _RETRY_ELSEWHERE:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in _MOVED:
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.UNKNOWN_SERVER_ERROR


def commit_error_code(exc: BaseException) -> int:
    """The error for a failed offset commit: as for group writes, but an oversized batch is the commit's fault."""
    code = _kafka_code(exc)
    if code in _TOO_LARGE:
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    if code == ErrorCode.INVALID_PRODUCER_EPOCH:  # a transactional commit of a producer whose epoch moved on
        return code
    return group_write_error_code(exc)
