"""Deleting a share group, or its offsets on some topics: DeleteGroups and DeleteShareGroupOffsets (KIP-932).

Why: `kafka-share-groups --delete` (DeleteGroups) and `--delete-offsets` (DeleteShareGroupOffsets) remove what a
share group remembers: every share-partition's state in `__share_group_state`, tombstoned as Kafka's
DeleteShareGroupState does, so the group (or the topic, for it) starts again from `share.auto.offset.reset`.
Kafka's rules: only a group without members (NON_EMPTY_GROUP), only a share group (GROUP_ID_NOT_FOUND); a topic
the group has no state for is UNKNOWN_TOPIC_OR_PARTITION ("There is no offset information to delete.").

Kafka's coordinator keeps the list of a group's initialised share-partitions in its own records; Kelp finds them in
`__share_group_state` itself (`ShareStateLog.group_keys`, one read per broker leading state partitions). Each
share-partition is deleted on its topic-partition's leader (here, or over the control plane: `POST
/cluster/v1/share-state/delete`), which forgets what it has loaded in the same step (`SharePartitions.delete`), so
an acknowledgement or a fetch racing the deletion never writes the old state back.

This module must never speak the wire protocol.
"""

from __future__ import annotations

from collections.abc import Iterable

from kelp.errors import ErrorCode, KelpError, NotLeaderOrFollowerError

from ...parts import BrokerParts
from . import share_groups_of
from .state_log import StateKey, StateUnavailable, key_json

__all__ = ["delete_here", "delete_share_group", "delete_share_partitions", "is_share_group", "NO_OFFSETS"]

NO_OFFSETS = "There is no offset information to delete."


async def delete_here(parts: BrokerParts, key: StateKey) -> None:
    """Delete one share-partition's state on its leader (this broker; else NOT_LEADER_OR_FOLLOWER)."""
    name = parts.topics.name_of(key[1])
    part = parts.replicas.get_partition(name, key[2]) if name is not None else None
    if part is None or not part.is_leader:
        raise NotLeaderOrFollowerError(f"this broker does not lead partition {key[2]} of topic id {key[1]}")
    await share_groups_of(parts).partitions.delete(key)


async def delete_share_partitions(parts: BrokerParts, keys: Iterable[StateKey]) -> dict[StateKey, int]:
    """Delete each share-partition's state where its topic-partition is led; an error code per key."""
    sg = share_groups_of(parts)
    out: dict[StateKey, int] = {}
    for key in sorted(keys):
        name = parts.topics.name_of(key[1])
        try:
            if name is None:  # its topic is gone: the state goes where it is kept
                await sg.partitions.state.delete(key)
            else:
                url = sg.partitions.state.broker_url(name, key[2])
                if url is None:
                    await delete_here(parts, key)
                else:
                    await sg.partitions.state.remote(url, "delete", key_json(key))
            out[key] = ErrorCode.NONE
        except KelpError as exc:
            out[key] = _retriable(exc)
    return out


def _retriable(exc: KelpError) -> int:
    """The error an admin client retries for state that cannot be reached now (Kafka's persister answers)."""
    return ErrorCode.COORDINATOR_NOT_AVAILABLE if isinstance(exc, StateUnavailable) else exc.code


async def is_share_group(parts: BrokerParts, group: str) -> tuple[int, set[StateKey]]:
    """(error, the group's share-partitions with state): GROUP_ID_NOT_FOUND when it is no share group here (no
    member known and no state), NON_EMPTY_GROUP when it has members; COORDINATOR_NOT_AVAILABLE while its state
    cannot be read."""
    sg = share_groups_of(parts)
    known = sg.membership.describe(group)
    if known is not None and known.members:
        return ErrorCode.NON_EMPTY_GROUP, set()
    try:
        keys = await sg.partitions.state.group_keys(group)
    except KelpError as exc:
        return _retriable(exc), set()
    if known is None and not keys:
        return ErrorCode.GROUP_ID_NOT_FOUND, set()
    return ErrorCode.NONE, keys


async def delete_share_group(parts: BrokerParts, group: str) -> int:
    """DeleteGroups of a share group this broker coordinates: every share-partition's state, then the group."""
    code, keys = await is_share_group(parts, group)
    if code != ErrorCode.NONE:
        return code
    errors = [c for c in (await delete_share_partitions(parts, keys)).values() if c != ErrorCode.NONE]
    if errors:
        return errors[0]
    # its records tombstoned in __consumer_offsets; a member that joined meanwhile keeps its (new) group
    return await share_groups_of(parts).membership.delete_group(group)
