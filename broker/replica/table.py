"""The partition table: this broker's replicas by (topic, partition), and the lookups every path makes.

Why it exists: the leader's write path, the read path, the follower path, the ISR changes, the
purgatory and the jobs all find a replica the same way and check leadership the same way
(NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH with the same messages); they share
this one table instead of reaching into the manager. It also keeps the keys appended to since the
last checkpoint (`dirty`). Which replicas exist is the `ReplicaManager`'s decision (`apply_topic`):
a lookup that misses a replica placed here asks it through `on_missing`. This module must never
change a replica's role nor touch a log's files.
"""

from __future__ import annotations

from typing import Callable, Iterator

from kelp.errors import FencedLeaderEpochError, NotLeaderOrFollowerError, UnknownLeaderEpochError

from ..storage import Log
from ..topic_manager import TopicManager
from .partition import Partition

__all__ = ["PartitionTable"]


class PartitionTable:
    """This broker's `Partition`s, keyed by (topic, partition)."""

    def __init__(self, broker_id: int, topics: TopicManager) -> None:
        self.broker_id = broker_id
        self.topics = topics
        self.parts: dict[tuple[str, int], Partition] = {}
        self.dirty: set[tuple[str, int]] = set()  # appended to since the last checkpoint
        # Set by the manager: brings this broker's replicas of a topic in line with its partition states.
        self.on_missing: Callable[[str], None] = lambda _topic: None

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.parts.get((topic, partition))

    def values(self) -> list[Partition]:
        """A copy: callers may add or drop replicas while they walk it."""
        return list(self.parts.values())

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self.parts)

    def mark_dirty(self, topic: str, partition: int) -> None:
        self.dirty.add((topic, partition))

    def take_dirty(self) -> list[Log]:
        """The logs of the replicas appended to since the last call (to checkpoint)."""
        dirty, self.dirty = self.dirty, set()
        return [part.log for key in dirty if (part := self.parts.get(key)) is not None]

    def replica(self, topic: str, partition: int) -> Partition:
        """This broker's replica of the partition (made now if the metadata places one here and it is not yet),
        else NOT_LEADER_OR_FOLLOWER (UNKNOWN_TOPIC_OR_PARTITION for no such partition)."""
        part = self.parts.get((topic, partition))
        if part is not None:
            return part
        info = self.topics.check_partition(topic, partition)
        state = info.partition_states[partition]
        if self.broker_id in state.replicas:
            self.on_missing(topic)
            part = self.parts.get((topic, partition))
            if part is not None:
                return part
        raise NotLeaderOrFollowerError(
            f"topic '{topic}' partition {partition} has no replica on broker {self.broker_id} "
            f"(leader is broker {state.leader}); refresh metadata"
        )

    def leader(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Partition:
        """The replica, if this broker leads it (at `current_leader_epoch` when one is given) and is ready to."""
        part = self.replica(topic, partition)
        if current_leader_epoch >= 0:
            self.check_epoch(part, current_leader_epoch)
        if not part.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of topic '{topic}' partition {partition} "
                f"(leader is broker {part.leader}, epoch {part.leader_epoch}); refresh metadata"
            )
        if not part.leader_ready:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} takes the leadership of topic '{topic}' partition {partition} "
                f"(epoch {part.leader_epoch}) once the truncation of its log in flight completes; retry")
        return part

    @staticmethod
    def check_epoch(part: Partition, requested: int) -> None:
        if requested < part.leader_epoch:
            raise FencedLeaderEpochError(
                f"topic '{part.topic}' partition {part.partition}: request for leader epoch {requested}, "
                f"current is {part.leader_epoch}; refresh metadata"
            )
        if requested > part.leader_epoch:
            raise UnknownLeaderEpochError(
                f"topic '{part.topic}' partition {part.partition}: request for leader epoch {requested}, "
                f"broker {part.broker_id} knows only up to {part.leader_epoch} yet; retry"
            )
