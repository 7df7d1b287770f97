"""Who may commit and fetch a consumer group's offsets: Kafka's ConsumerGroup.validateOffsetCommit and
validateOffsetFetch, for both kinds of members of a (possibly mixed) consumer group.

Why: a consumer-protocol member commits at its member epoch with OffsetCommit v9+ (an older epoch is judged per
partition, KIP-1251); a classic member inside a consumer group (KIP-848's mixed groups, `migration`) commits with
any OffsetCommit version at its generation, which is its member epoch, and a mismatch is ILLEGAL_GENERATION, not
STALE_MEMBER_EPOCH. Kept apart from the coordinator so its rules read in one place; pure: no I/O, no timers.
"""

from __future__ import annotations

from typing import Collection, Mapping

from kelp.errors import ErrorCode

from .model import ConsumerGroup

__all__ = ["commit_error", "fetch_error"]


def commit_error(group: ConsumerGroup, member_id: str, member_epoch: int, api_version: int,
                 partitions: Collection[tuple[str, int]], topic_ids: Mapping[str, str],
                 transactional: bool = False) -> int | dict[tuple[str, int], int]:
    """NONE or the error (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, UNSUPPORTED_VERSION below v9 for a
    consumer-protocol member, ILLEGAL_GENERATION for a classic one); at an older member epoch, per partition of
    `partitions` (NONE or STALE_MEMBER_EPOCH; `topic_ids`: name -> topic id of the ones that exist)."""
    if member_epoch < 0 and not group.members:
        return ErrorCode.NONE  # the admin client, or a consumer not in the group, commits to an empty group
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if member.classic is not None:
        return ErrorCode.NONE if member_epoch == member.member_epoch else ErrorCode.ILLEGAL_GENERATION
    if api_version < 9 and not transactional:
        return ErrorCode.UNSUPPORTED_VERSION
    if member_epoch > member.member_epoch:
        return ErrorCode.FENCED_MEMBER_EPOCH
    if member_epoch == member.member_epoch:
        return ErrorCode.NONE
    return {(n, p): ErrorCode.NONE if n in topic_ids and member.committable((topic_ids[n], p), member_epoch)
            else ErrorCode.STALE_MEMBER_EPOCH for n, p in partitions}


def fetch_error(group: ConsumerGroup, member_id: str | None, member_epoch: int) -> int:
    """NONE for a fetch without a member (the admin client, or a classic consumer that names none) or from a member
    at its epoch; UNKNOWN_MEMBER_ID, or STALE_MEMBER_EPOCH (ILLEGAL_GENERATION for a classic member) otherwise."""
    if member_id is None and member_epoch < 0:
        return ErrorCode.NONE
    member = group.members.get(member_id or "")
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if member_epoch != member.member_epoch:
        return ErrorCode.ILLEGAL_GENERATION if member.classic is not None else ErrorCode.STALE_MEMBER_EPOCH
    return ErrorCode.NONE
