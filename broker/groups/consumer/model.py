"""A KIP-848 consumer group's state and the member reconciliation state machine (Kafka's CurrentAssignmentBuilder).

Why: in the consumer protocol a member moves to its target assignment in steps the broker decides, so that no
partition is ever owned by two members: a partition leaving a member is first *revoked* (the member stays at
its epoch, keeps only the partitions it keeps, and must heartbeat without the revoked ones to acknowledge),
and a partition reaches its new member only once no other member holds it (until then the member is
*unreleased*, at the new epoch, with the free part of its target). The group tracks who holds what
(`owners`, counting partitions pending revocation as still held) to decide "released".

Epochs: the group epoch moves on every change of membership, subscription or subscribed topics' partition
counts; the target assignment is computed at that epoch (`assignment_epoch`); a member's epoch reaches the
assignment epoch once it has revoked what it had to (its previous epoch is kept: a heartbeat carrying it, with
owned partitions within the current assignment, is a lost response, not a fenced member).

This module is pure (no timers, no I/O, no wire types): `next_assignment` computes a member's next state
without changing anything, so the coordinator can persist before it applies.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping, Protocol

from .assignors import Assignment

__all__ = ["MemberState", "ClassicMetadata", "ConsumerMember", "ConsumerGroup", "GroupStateName", "next_assignment",
           "LEAVE_EPOCH", "STATIC_LEAVE_EPOCH", "flatten", "subset", "member_topics"]

LEAVE_EPOCH = -1  # the member leaves the group
STATIC_LEAVE_EPOCH = -2  # a static member leaves for now; its instance id keeps its assignment until its session ends


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"  # must acknowledge the revocation of `revoking`
    UNRELEASED_PARTITIONS = "unreleased_partitions"  # waits for partitions another member still holds


class GroupStateName(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


def flatten(a: Mapping[str, frozenset[int]]) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in a.items() for p in ps}


def subset(owned: Mapping[str, frozenset[int]], of: Mapping[str, frozenset[int]]) -> bool:
    return all(ps <= of.get(t, frozenset()) for t, ps in owned.items())


def member_topics(m: ConsumerMember, resolved: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """The topic names a member subscribes to: its names and what its regex matched when last resolved."""
    names = frozenset(m.subscribed_topic_names)
    return names | resolved.get(m.subscribed_topic_regex, frozenset()) if m.subscribed_topic_regex else names


def _clean(a: Mapping[str, frozenset[int] | set[int]]) -> Assignment:
    return {t: frozenset(ps) for t, ps in a.items() if ps}


@dataclass(frozen=True)
class ClassicMetadata:
    """What a member speaking the classic protocol (JoinGroup/SyncGroup) inside a consumer group adds (KIP-848's
    mixed groups; Kafka's ClassicMemberMetadata): its session timeout and its protocols in preference order."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class ConsumerMember:
    """A member as the coordinator knows it; frozen so a change is a new value, applied after its write."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None  # RE2 syntax, matched against whole topic names (never "")
    server_assignor: str | None = None
    assigned: Assignment = field(default_factory=dict)  # usable now (what the member is told it has)
    revoking: Assignment = field(default_factory=dict)  # still held, to be given up (UNREVOKED_PARTITIONS)
    # KIP-1251: (topic id, partition) -> the member epoch at which the member got it, for every held partition
    # (persisted as AssignmentEpochs); a commit at an older member epoch is accepted for partitions assigned at or
    # before it. A partition without one (a record Kafka before 4.4 wrote) counts as got at the member's epoch.
    assigned_at: Mapping[tuple[str, int], int] = field(default_factory=dict)
    classic: ClassicMetadata | None = None  # set: a classic-protocol member (`consumer.migration`)

    def held(self) -> set[tuple[str, int]]:
        """Every partition this member may be consuming: assigned and pending revocation."""
        return flatten(self.assigned) | flatten(self.revoking)

    def committable(self, tp: tuple[str, int], epoch: int) -> bool:
        """Whether a commit at member epoch `epoch` (at most the member's) may write partition `tp`, as Kafka 4.4's
        assignment-epoch validator (KIP-1251): the member holds it and got it at or before `epoch`."""
        return tp in self.held() and self.assigned_at.get(tp, self.member_epoch) <= epoch


@dataclass
class ConsumerGroup:
    """A consumer-protocol group: members, epochs, the target assignment and who holds each partition."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> target at `assignment_epoch`
    owners: dict[tuple[str, int], str] = field(default_factory=dict)  # (topic id, partition) -> member id
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # Subscribed topics as last seen: name -> (topic id, partition count); a change bumps the group epoch.
    subscribed_topics: dict[str, tuple[str, int]] = field(default_factory=dict)
    assignor: str = ""  # the assignor that computed `target`
    # The members' regexes as last resolved: regex -> the topic names it matched (not persisted: resolved again
    # by the coordinator that loads the group). A member's topics are its names and its regex's topics.
    resolved_regexes: dict[str, frozenset[str]] = field(default_factory=dict)

    def subscribed_topic_names(self) -> set[str]:
        """The topic names its members subscribe to, by name or by regex (Kafka's subscribedTopicNames, whether the
        topics exist or not): OffsetDelete refuses these (GROUP_SUBSCRIBED_TO_TOPIC)."""
        return {t for m in self.members.values() for t in member_topics(m, self.resolved_regexes)}

    def regexes(self) -> set[str]:
        """The regexes members subscribe with."""
        return {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}

    @property
    def state(self) -> GroupStateName:
        if not self.members:
            return GroupStateName.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupStateName.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return GroupStateName.RECONCILING
        return GroupStateName.STABLE

    def put_member(self, member: ConsumerMember) -> None:
        """Replace (or add) a member, keeping `owners` and `static_members` true to it."""
        old = self.members.get(member.member_id)
        if old is not None:
            for tp in old.held():
                if self.owners.get(tp) == old.member_id:
                    del self.owners[tp]
        self.members[member.member_id] = member
        for tp in member.held():
            self.owners[tp] = member.member_id
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        """Forget a member: its partitions are free, its target gone, its instance id released."""
        old = self.members.pop(member_id, None)
        if old is None:
            return None
        for tp in old.held():
            if self.owners.get(tp) == member_id:
                del self.owners[tp]
        self.target.pop(member_id, None)
        if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]
        return old

    def held_by_other(self, member_id: str) -> Callable[[str, int], bool]:
        return lambda t, p: self.owners.get((t, p), member_id) != member_id


def next_assignment(member: ConsumerMember, *, target_epoch: int, target: Assignment,
                    held_by_other: Callable[[str, int], bool],
                    owned: Mapping[str, frozenset[int]] | None) -> ConsumerMember:
    """The member's next state (Kafka's CurrentAssignmentBuilder.build); `owned` is what the heartbeat says
    the member holds (None: not sent, unchanged)."""
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        # Stays until the member heartbeats without any partition it must give up.
        if owned is None or flatten(owned) & flatten(member.revoking):
            return member
        return _compute(member, member.member_epoch, member.assigned, target_epoch, target, held_by_other)
    if member.state is MemberState.STABLE and member.member_epoch == target_epoch:
        return member
    # STABLE behind the target, or UNRELEASED (its partitions may be free now, or the target moved).
    return _compute(member, member.member_epoch, member.assigned, target_epoch, target, held_by_other)


def _compute(member: ConsumerMember, epoch: int, assigned: Assignment, target_epoch: int, target: Assignment,
             held_by_other: Callable[[str, int], bool]) -> ConsumerMember:
    keep: dict[str, set[int]] = {}
    revoke: dict[str, set[int]] = {}
    grant: dict[str, set[int]] = {}
    unreleased = False
    for topic_id in set(assigned) | set(target):
        have = assigned.get(topic_id, frozenset())
        want = target.get(topic_id, frozenset())
        keep[topic_id] = set(have & want)
        revoke[topic_id] = set(have - want)
        for p in want - have:
            if held_by_other(topic_id, p):
                unreleased = True
            else:
                grant.setdefault(topic_id, set()).add(p)
    if any(revoke.values()):
        # Revoke first: the member keeps its epoch and only what it keeps; nothing new until it acknowledges.
        return replace(member, state=MemberState.UNREVOKED_PARTITIONS, member_epoch=epoch,
                       previous_member_epoch=member.previous_member_epoch if epoch == member.member_epoch
                       else member.member_epoch, assigned=_clean(keep), revoking=_clean(revoke),
                       assigned_at=_assigned_at(member, [keep, revoke], {}, epoch))
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    previous = member.member_epoch if target_epoch != member.member_epoch else member.previous_member_epoch
    at = _assigned_at(member, [keep], grant, target_epoch)
    for topic_id, ps in grant.items():
        keep.setdefault(topic_id, set()).update(ps)
    return replace(member, state=state, member_epoch=target_epoch, previous_member_epoch=previous,
                   assigned=_clean(keep), revoking={}, assigned_at=at)


def _assigned_at(member: ConsumerMember, held: list[dict[str, set[int]]], granted: dict[str, set[int]],
                 epoch: int) -> dict[tuple[str, int], int]:
    """The assignment epochs after a step: a partition held before keeps its own (one without is counted as
    assigned at `epoch`, the strict choice), a granted one is assigned at `epoch`, the member's epoch after it."""
    out = {(t, p): member.assigned_at.get((t, p), epoch) for part in held for t, ps in part.items() for p in ps}
    out.update({(t, p): epoch for t, ps in granted.items() for p in ps})
    return out


class TopicLike(Protocol):
    """One topic as the coordinator reads it."""

    @property
    def name(self) -> str: ...

    @property
    def topic_id(self) -> str: ...

    @property
    def partitions(self) -> int: ...


class TopicView(Protocol):
    """What the coordinator reads of the cluster's topics (the broker's TopicManager)."""

    def get(self, name: str) -> TopicLike | None: ...

    def name_of(self, topic_id: str) -> str | None: ...

    def list_topics(self) -> Iterable[TopicLike]: ...
