"""Partition moves decided by the controller: reassignment (start, complete, cancel) and preferred leaders.

Why: moving replicas is a multi-step protocol (add the new replicas, wait until they are in sync, move leadership
into the target set, drop the old ones — or revert on cancel) whose rules live in `metadata.elections`; this object
applies them to requests and to the periodic re-check that completes moves deferred for want of an eligible leader.
Composed by `core.Controller`, which gives it the shared state (`state`) and the one fenced write path (`writer`).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from kelp.errors import (
    ElectionNotNeededError,
    ErrorCode,
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
    PreferredLeaderNotAvailableError,
    ReassignmentInProgressError,
)

from ...metadata.controller_answers import ElectionAnswer, PartitionAnswer, Reassignment
from ...metadata.elections import RevertRefused, complete_reassignment, revert_reassignment
from ...metadata.model import PartitionState, TopicState
from ...metadata.records import partition_record
from .state import ControllerState
from .writer import MetadataWriter

__all__ = ["PartitionMoves"]

log = logging.getLogger("kelp.broker.controller")

MAX_BALANCE_ELECTIONS = 1000  # per leader-balance pass (KRaft's maxElectionsPerImbalance); more: another pass at once


class PartitionMoves:
    """Reassignments and preferred-leader elections, on the controller."""

    def __init__(self, state: ControllerState, writer: MetadataWriter) -> None:
        self.state = state
        self.writer = writer

    async def reassign(self, *, topic: str, partition: int, replicas: list[int] | None) -> PartitionAnswer:
        """Start moving a partition to `replicas` (None cancels a running move)."""
        async with self.state.lock:
            self.writer.check_fresh()
            t, state = self.state.partition_state(topic, partition)
            if replicas is None:
                if not state.reassigning:
                    raise NoReassignmentInProgressError(f"{topic}-{partition} has no reassignment in progress")
                try:
                    new_state = revert_reassignment(topic, partition, state, self.state.eligible())
                except RevertRefused as exc:
                    raise InvalidReplicaAssignmentError(str(exc)) from None
                await self.writer.append([partition_record(t, partition, new_state)])
                log.info("%s-%d: reassignment cancelled, back to %s (ISR %s, leader %d)", topic, partition,
                         list(new_state.replicas), list(new_state.isr), new_state.leader)
                return self.state.partition_answer(new_state)
            target = tuple(int(r) for r in replicas)
            self.state.check_replica_list(topic, partition, list(target))
            if state.reassigning:
                raise ReassignmentInProgressError(
                    f"{topic}-{partition} is already moving to {list(state.target_replicas)}; cancel it first")
            if set(target) == set(state.replicas) and target[0] == state.replicas[0]:
                return self.state.partition_answer(state)
            original = state.replicas
            union = target + tuple(r for r in original if r not in target)
            adding = tuple(r for r in target if r not in original)
            self.state.check_new_replicas(topic, partition, list(adding))
            removing = tuple(r for r in original if r not in target)
            new_state = replace(state, replicas=union, adding=adding, removing=removing,
                                original=original if adding or removing else (),
                                partition_epoch=state.partition_epoch + 1)
            new_state = complete_reassignment(topic, partition, new_state, self.state.eligible())
            await self.writer.append([partition_record(t, partition, new_state)])
            log.info("%s-%d: reassignment %s -> %s started (adding %s, removing %s)", topic, partition,
                     list(original), list(target), list(adding), list(removing))
            return self.state.partition_answer(new_state)

    async def elect_preferred_leaders(self, *, topic: str | None = None,
                                      partitions: list[int] | None = None) -> ElectionAnswer:
        """Move leadership to each partition's first replica where it is alive and in sync."""
        async with self.state.lock:
            self.writer.check_fresh()
            eligible, leaving = self.state.eligible(), self.state.decommissioned()
            results: dict[str, int] = {}
            changed: list[TopicState] = []
            names = [topic] if topic is not None else sorted(self.state.topics)
            for name in names:
                t = self.state.topic(name)
                new = t
                for p, state in enumerate(t.partition_states):
                    if partitions is not None and p not in partitions:
                        continue
                    code, elected = _preferred(state, eligible, leaving)
                    results[f"{name}-{p}"] = code
                    if elected is not None:
                        new = new.with_partition(p, elected)
                if new is not t:
                    changed.append(new)
            await self.writer.commit(changed)
            return {"results": results, "metadata_offset": self.state.image.offset}

    async def balance_leaders(self, *, limit: int = MAX_BALANCE_ELECTIONS) -> bool:
        """`auto.leader.rebalance.enable`: elect the preferred replica of every partition led by another where the
        preferred one is alive, in sync, not decommissioned and no reassignment runs — at most `limit` of them,
        as KRaft's `maybeBalancePartitionLeaders`. True when more were left for the next pass (the caller runs it
        again at once). A broker that came back after a failure otherwise leads nothing until an operator or an
        admin asks (`elect_preferred_leaders`), and one broker serves every client of the partitions it took over.
        """
        async with self.state.lock:
            self.writer.check_fresh()
            eligible, leaving = self.state.eligible(), self.state.decommissioned()
            changed: list[TopicState] = []
            elected = 0
            for name in sorted(self.state.topics):
                t = self.state.topics[name]
                new = t
                for p, state in enumerate(t.partition_states):
                    if state.reassigning or state.leader == state.target_replicas[0]:
                        continue
                    if elected >= limit:
                        await self.writer.commit(changed + ([new] if new is not t else []))
                        return True
                    _, to = _preferred(state, eligible, leaving)
                    if to is not None:
                        new = new.with_partition(p, to)
                        elected += 1
                if new is not t:
                    changed.append(new)
            if elected:
                log.info("leader balance: %d partition(s) back to their preferred leader", elected)
            await self.writer.commit(changed)
            return False

    def reassignments(self) -> list[Reassignment]:
        out: list[Reassignment] = []
        for t in self.state.topics.values():
            for p, s in enumerate(t.partition_states):
                if s.reassigning:
                    out.append({"topic": t.name, "partition": p, "replicas": list(s.replicas),
                                "adding": list(s.adding), "removing": list(s.removing), "isr": list(s.isr),
                                "leader": s.leader})
        return out

    async def periodic(self) -> None:
        """Re-check reassignments that can complete (a target replica caught up while nothing else changed).

        Run by the liveness watch every couple of seconds.
        """
        async with self.state.lock:
            eligible = self.state.eligible()
            changed: list[TopicState] = []
            for t in list(self.state.topics.values()):
                new = t
                for p, s in enumerate(t.partition_states):
                    if not s.reassigning:
                        continue
                    s2 = complete_reassignment(t.name, p, s, eligible)
                    if s2 is not s:
                        new = new.with_partition(p, s2)
                if new is not t:
                    changed.append(new)
            if changed:
                self.writer.check_fresh()
                await self.writer.commit(changed)


def _preferred(state: PartitionState, eligible: frozenset[int],
               leaving: frozenset[int]) -> tuple[int, PartitionState | None]:
    """A preferred-leader election of one partition: (its result code, the partition afterwards or None)."""
    preferred = state.target_replicas[0]
    if state.leader == preferred:
        return ElectionNotNeededError.code, None
    if preferred not in state.isr or preferred not in eligible or preferred in leaving:
        return PreferredLeaderNotAvailableError.code, None  # a decommissioned one does not take leadership back
    return ErrorCode.NONE, replace(state, leader=preferred, leader_epoch=state.leader_epoch + 1,
                                   partition_epoch=state.partition_epoch + 1)
