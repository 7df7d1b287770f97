"""Partition moves decided by the controller: reassignment (start, complete, cancel) and preferred leaders.

Why: moving replicas is a multi-step protocol (add the new replicas, wait until they are in sync, move
leadership into the target set, drop the old ones — or revert on cancel) whose rules live in
`elections`; this mixin applies them to requests and to the periodic re-check that completes moves
deferred for want of an eligible leader. Mixed into `controller.Controller` (lock, image, `_append`,
`_answer`, `_eligible`, `_partition_state`, `_check_replica_list`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Iterable, Mapping

from kelp.errors import (
    ElectionNotNeededError,
    ErrorCode,
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
    PreferredLeaderNotAvailableError,
    ReassignmentInProgressError,
)

from .elections import RevertRefused, complete_reassignment, revert_reassignment
from .metadata_image import partition_record
from .model import PartitionState, TopicState

__all__ = ["PartitionMoves"]

log = logging.getLogger("kelp.broker.controller")


class PartitionMoves:
    _lock: asyncio.Lock

    if TYPE_CHECKING:  # defined by `TopicAdmin` and `Controller`, beside which this is mixed in; for the type checker
        @property
        def topics(self) -> Mapping[str, TopicState]: ...

        def _topic(self, name: str) -> TopicState: ...

        def _partition_state(self, topic: str, partition: int) -> tuple[TopicState, PartitionState]: ...

        def _check_replica_list(self, name: str, p: int, replicas: list[int]) -> None: ...

        def _check_fresh(self) -> None: ...

        def _eligible(self) -> frozenset[int]: ...

        async def _append(self, records: list[dict], *, unknown_outcome: type[Exception] = ...) -> None: ...

        async def _commit(self, states: Iterable[TopicState]) -> None: ...

        def _answer(self, doc: dict) -> dict: ...

    async def reassign(self, *, topic: str, partition: int, replicas: list[int] | None) -> dict:
        """Start moving a partition to `replicas` (None cancels a running move)."""
        async with self._lock:
            self._check_fresh()
            t, state = self._partition_state(topic, partition)
            if replicas is None:
                if not state.reassigning:
                    raise NoReassignmentInProgressError(f"{topic}-{partition} has no reassignment in progress")
                try:
                    new_state = revert_reassignment(topic, partition, state, self._eligible())
                except RevertRefused as exc:
                    raise InvalidReplicaAssignmentError(str(exc)) from None
                await self._append([partition_record(t, partition, new_state)])
                log.info("%s-%d: reassignment cancelled, back to %s (ISR %s, leader %d)", topic, partition,
                         list(new_state.replicas), list(new_state.isr), new_state.leader)
                return self._answer(new_state.to_json())
            target = tuple(int(r) for r in replicas)
            self._check_replica_list(topic, partition, list(target))
            if state.reassigning:
                raise ReassignmentInProgressError(
                    f"{topic}-{partition} is already moving to {list(state.target_replicas)}; cancel it first")
            if set(target) == set(state.replicas) and target[0] == state.replicas[0]:
                return self._answer(state.to_json())
            original = state.replicas
            union = target + tuple(r for r in original if r not in target)
            adding = tuple(r for r in target if r not in original)
            removing = tuple(r for r in original if r not in target)
            new_state = replace(state, replicas=union, adding=adding, removing=removing,
                                original=original if adding or removing else (),
                                partition_epoch=state.partition_epoch + 1)
            new_state = complete_reassignment(topic, partition, new_state, self._eligible())
            await self._append([partition_record(t, partition, new_state)])
            log.info("%s-%d: reassignment %s -> %s started (adding %s, removing %s)", topic, partition,
                     list(original), list(target), list(adding), list(removing))
            return self._answer(new_state.to_json())

    async def elect_preferred_leaders(self, *, topic: str | None = None, partitions: list[int] | None = None) -> dict:
        """Move leadership to each partition's first replica where it is alive and in sync."""
        async with self._lock:
            self._check_fresh()
            eligible = self._eligible()
            results: dict[str, int] = {}
            changed = []
            names = [topic] if topic is not None else sorted(self.topics)
            for name in names:
                t = self._topic(name)
                new = t
                for p, state in enumerate(t.partition_states):
                    if partitions is not None and p not in partitions:
                        continue
                    preferred = state.target_replicas[0]
                    key = f"{name}-{p}"
                    if state.leader == preferred:
                        results[key] = ElectionNotNeededError.code
                        continue
                    if preferred not in state.isr or preferred not in eligible:
                        results[key] = PreferredLeaderNotAvailableError.code
                        continue
                    new = new.with_partition(p, replace(state, leader=preferred, leader_epoch=state.leader_epoch + 1,
                                                        partition_epoch=state.partition_epoch + 1))
                    results[key] = ErrorCode.NONE
                if new is not t:
                    changed.append(new)
            await self._commit(changed)
            return self._answer({"results": results})

    def reassignments(self) -> list[dict]:
        out = []
        for t in self.topics.values():
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
        async with self._lock:
            eligible = self._eligible()
            changed = []
            for t in list(self.topics.values()):
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
                self._check_fresh()
                await self._commit(changed)
