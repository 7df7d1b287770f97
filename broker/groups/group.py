"""One consumer group's state: members, generation, protocol, committed offsets.

Why: the coordinator's rules (who may join, who is fenced, when a rebalance
completes) read and change this state; keeping it in one plain object makes
the transitions checkable in unit tests. The legal transitions are Kafka's:

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join, leave, expiry--> PreparingRebalance
    PreparingRebalance --no members left--> Empty
    any --delete / expired offsets--> Dead

This module must never await, do I/O or start timers: the coordinator owns
time and persistence.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["GroupState", "Member", "Group", "CommittedOffset", "IllegalStateTransition", "JoinResult", "SyncResult"]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY,
         GroupState.DEAD}
    ),
}


class IllegalStateTransition(RuntimeError):
    pass


@dataclass
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1


@dataclass
class JoinResult:
    """The answer to a JoinGroup (parked on its member until the rebalance completes)."""

    error: int
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass
class SyncResult:
    """The answer to a SyncGroup (parked on its member until the leader's assignment is stored)."""

    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # Futures of the JoinGroup / SyncGroup requests parked on this member.
    join_future: "asyncio.Future[JoinResult] | None" = None
    sync_future: "asyncio.Future[SyncResult] | None" = None
    heartbeat_deadline_ms: int = 0
    is_new: bool = True

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None and not self.join_future.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None and not self.sync_future.done()

    def answer_join(self, result: JoinResult) -> None:
        """Answer the JoinGroup parked on this member, if one is still waiting."""
        if self.join_future is not None and not self.join_future.done():
            self.join_future.set_result(result)

    def answer_sync(self, result: SyncResult) -> None:
        """Answer the SyncGroup parked on this member, if one is still waiting."""
        if self.sync_future is not None and not self.sync_future.done():
            self.sync_future.set_result(result)

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in self.protocols] == [(n, bytes(m)) for n, m in protocols]


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: set[str] = field(default_factory=set)  # got MEMBER_ID_REQUIRED, not joined yet
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    # Where each committed offset stands in `__consumer_offsets` (an append order): a transaction's offsets
    # replace a committed one only when they were written after it (Kafka's CommitRecordMetadataAndOffset.olderThan).
    offset_order: dict[tuple[str, int], int] = field(default_factory=dict)
    # TxnOffsetCommit's offsets per producer id, with their append order, until the transaction's marker.
    pending_txn_offsets: dict[int, dict[tuple[str, int], tuple[CommittedOffset, int]]] = field(default_factory=dict)
    state_timestamp_ms: int = -1
    # True while Kafka's InitialDelayedJoin runs: the join completes on the timer only.
    initial_delay_active: bool = False
    initial_delay_extend: bool = False  # a member arrived during the delay: extend once more

    # -- transitions ----------------------------------------------------
    def transition(self, new: GroupState, *, now_ms: int = -1) -> None:
        if self.state not in _VALID_PREVIOUS[new]:
            raise IllegalStateTransition(
                f"group '{self.group_id}' cannot go from {self.state.value} to {new.value}"
            )
        self.state = new
        self.state_timestamp_ms = now_ms

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    # -- members --------------------------------------------------------
    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return self.static_members.get(instance_id) if instance_id else None

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols ------------------------------------------------------
    def candidate_protocols(self) -> set[str]:
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Could a member with these protocols join (Kafka's `supportsProtocols`)?"""
        names = {n for n, _ in protocols}
        if not protocol_type or not names:
            return False
        if not self.members:
            return True
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol among those all support."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group '{self.group_id}': members share no protocol")
        votes: Counter[str] = Counter()
        for m in self.members.values():
            votes[next(n for n in m.protocol_names() if n in candidates)] += 1
        best = max(votes.values())
        # Deterministic tie-break: the leader's preference order.
        leader = self.members.get(self.leader_id or "")
        order = leader.protocol_names() if leader else sorted(votes)
        return next(n for n in order if votes.get(n) == best)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), or None if unknown."""
        if self.protocol_type != "consumer" or not self.protocol_name or not self.members:
            return None
        from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

        topics: set[str] = set()
        for m in self.members.values():
            try:
                sub = ConsumerProtocolSubscription.decode(m.metadata_for(self.protocol_name))
            except Exception:
                return None
            topics.update(sub.topics or [])
        return topics
