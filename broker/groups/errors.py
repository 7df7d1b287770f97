"""The Kafka error codes the group coordinator and its store answer with.

Why: every part of the coordinator (the rebalance state machine, the offsets
store, the lookup) answers with these codes, and the handlers copy them into
responses unchanged; one leaf module lets each part import them without
importing the others. `group_coordinator` re-exports `Errors` for the
handlers. Failed writes to `__consumer_offsets` are mapped by `append_errors`.

This module must never import another module of this package or hold logic:
it is a table of numbers (org.apache.kafka.common.protocol.Errors).
"""

from __future__ import annotations

__all__ = ["Errors"]


class Errors:
    """Kafka error codes the coordinator answers with."""

    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    UNKNOWN_SERVER_ERROR = -1
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    FENCED_INSTANCE_ID = 82
    GROUP_MAX_SIZE_REACHED = 81
    GROUP_SUBSCRIBED_TO_TOPIC = 86
