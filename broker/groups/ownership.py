"""Which `__consumer_offsets` partitions this broker coordinates, and since which leader epoch.

Why: in a cluster the coordinator of a group is the leader of the group's
`__consumer_offsets` partition, and leadership moves. Leadership events can
arrive out of order relative to each other (a resignation for an old epoch
after a newer election), and an asynchronous load may finish after the
partition was lost again. This bookkeeping decides, per partition, whether an
event is current or stale, and hands out a token per leadership term so a
load or an append that started under one term can tell that the term ended.

This module must never await, do I/O or touch group state: the coordinator
acts on its answers.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass

__all__ = ["PartitionOwnership", "PartitionState"]


class PartitionState(enum.Enum):
    LOADING = "loading"  # leader, replaying the partition: group requests get COORDINATOR_LOAD_IN_PROGRESS
    OWNED = "owned"  # leader, loaded: this broker coordinates the partition's groups
    RESIGNED = "resigned"  # not (or no longer) the leader: NOT_COORDINATOR


@dataclass
class _Term:
    epoch: int
    state: PartitionState
    token: int


class PartitionOwnership:
    """Per-partition leadership terms; each accepted election or resignation starts a new term (token)."""

    def __init__(self) -> None:
        self._terms: dict[int, _Term] = {}
        self._tokens = itertools.count(1)

    def begin_load(self, partition: int, epoch: int) -> int | None:
        """An election at `epoch`: the new term's token if a load must start, else None.

        None for a stale election (older than an epoch already seen) and for one
        that continues a term already loading or owned (the cached state stays valid:
        no resignation came in between).
        """
        term = self._terms.get(partition)
        if term is not None and epoch < term.epoch:
            return None
        if term is not None and term.state is not PartitionState.RESIGNED:
            term.epoch = epoch
            return None
        token = next(self._tokens)
        self._terms[partition] = _Term(epoch, PartitionState.LOADING, token)
        return token

    def finish_load(self, partition: int, token: int) -> bool:
        """The load of term `token` completed: owned now, unless the term ended meanwhile (False)."""
        term = self._terms.get(partition)
        if term is None or term.token != token or term.state is not PartitionState.LOADING:
            return False
        term.state = PartitionState.OWNED
        return True

    def resign(self, partition: int, epoch: int) -> bool:
        """A resignation at `epoch`: True when it ends a loading/owned term (its groups must go).

        A resignation older than the newest epoch seen is stale and ignored.
        """
        term = self._terms.get(partition)
        if term is not None and epoch < term.epoch:
            return False
        ended = term is not None and term.state is not PartitionState.RESIGNED
        self._terms[partition] = _Term(epoch, PartitionState.RESIGNED, next(self._tokens))
        return ended

    def state(self, partition: int) -> PartitionState:
        term = self._terms.get(partition)
        return PartitionState.RESIGNED if term is None else term.state

    def token(self, partition: int) -> int | None:
        """The current term's token while loading or owned; None when not the leader."""
        term = self._terms.get(partition)
        if term is None or term.state is PartitionState.RESIGNED:
            return None
        return term.token

    def epoch(self, partition: int) -> int | None:
        term = self._terms.get(partition)
        return None if term is None else term.epoch

    def owned(self) -> set[int]:
        return {p for p, t in self._terms.items() if t.state is PartitionState.OWNED}

    def loading(self) -> set[int]:
        return {p for p, t in self._terms.items() if t.state is PartitionState.LOADING}
