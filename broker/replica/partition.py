"""One partition replica on this broker: its role, ISR, follower progress and high watermark.

Why: Kafka's `Partition` is where replication's rules meet one log. As
leader it tracks each follower's log end offset (from its fetches) and when
it was last caught up, computes the high watermark as the minimum log end
offset over the in-sync replicas (never moving it backwards), decides when a
follower may join the ISR and when a lagging one must leave (the change
itself goes through the controller; while one is in flight the high
watermark respects the larger ISR, KIP-497), and completes `acks=all`
produces once the high watermark passes them — as Kafka's DelayedProduce,
only while it still leads at the leader epoch the batch was appended under:
a leadership or epoch change fails them with NOT_LEADER_OR_FOLLOWER, since
the batch may have been truncated. As follower it only follows the leader's
high watermark. Both roles know the last stable offset (`last_stable_offset`,
from the producer state's undecided transactions and the high watermark).

Single-threaded (the event loop): no locks. This module does no I/O: the
caller runs log appends, truncation and epoch checkpoints (`busy` is the
worker-thread job, if any, changing this replica's log or producer state).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from kelp.errors import KelpError, NotLeaderOrFollowerError, OffsetNotAvailableError

from ..metadata.model import NO_LEADER, PartitionState
from ..storage import Log
from .producer_state import ProducerStateManager

__all__ = ["Partition", "ReplicaProgress", "LogStartWaker"]

class SessionWatcher(Protocol):
    def changed(self) -> None: ...


_NO_PROGRESS: dict[int, "ReplicaProgress"] = {}  # a follower's, or a lone replica's: shared, never written to


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows of one follower."""

    log_end_offset: int = -1           # unknown until its first fetch under this leader epoch
    last_caught_up_ms: int = 0         # last time its fetch reached the leader's log end
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = -1    # the leader's log end offset at its previous fetch
    # As its last fetch said: DeleteRecords waits for the ISR's (Kafka's low watermark).
    log_start_offset: int = -1


class Partition:
    # Slots, and no collection until it holds something: 10,000 idle partitions held 10,000 of each of two
    # empty sets and a list (about 0.5 KB a partition with the instance dict, issue 38).
    __slots__ = ("topic", "partition", "log", "broker_id", "producers", "_waiters", "_acks", "_low_watermark_waiters",
                 "min_insync_replicas", "leader", "leader_epoch", "partition_epoch", "applied", "replicas", "isr",
                 "pending_isr", "progress", "epoch_start_offset", "leader_ready", "busy", "truncations",
                 "snapshot_base", "_watchers")

    def __init__(self, topic: str, partition: int, log: Log, *, broker_id: int, min_insync_replicas: int = 1) -> None:
        self.topic = topic
        self.partition = partition
        self.log = log
        self.broker_id = broker_id
        self.producers = ProducerStateManager(topic, partition)
        self._waiters: set[asyncio.Future[None]] | None = None   # `waiters`, made by its first parked fetch
        # acks=all waits: (offset the HW must reach, leader epoch of the append, future); None while there is none
        self._acks: list[tuple[int, int, asyncio.Future[None]]] | None = None
        # DeleteRecords waiting for followers' log starts (`low_watermark_waiters`, made by the first)
        self._low_watermark_waiters: set[asyncio.Future[None]] | None = None
        self.min_insync_replicas = min_insync_replicas
        self.leader = broker_id                               # a lone broker leads its partitions
        self.leader_epoch = 0
        self.partition_epoch = 0
        # The metadata state last taken (the image shares unchanged ones between versions: `is` says unchanged).
        self.applied: PartitionState | None = None
        self.replicas: tuple[int, ...] = (broker_id,)
        self.isr: tuple[int, ...] = (broker_id,)
        self.pending_isr: tuple[int, ...] | None = None       # an AlterPartition whose outcome is not known yet
        self.progress: dict[int, ReplicaProgress] = _NO_PROGRESS  # replaced (never changed in place) by leaders
        self.epoch_start_offset = 0                           # log end offset when this leader epoch began
        # False from taking leadership until its epoch is recorded at the final log end (a truncation in a
        # worker thread may still be moving it): meanwhile nothing is served as leader.
        self.leader_ready = True
        # A worker-thread job on the log / producer state (done with None, or with what it failed with).
        self.busy: asyncio.Task[BaseException | None] | None = None
        self.truncations = 0                                  # of those jobs, how many move the log end
        self.snapshot_base = -1                               # the segment base last snapshotted (producer state)
        # The fetch sessions' partitions reading this replica (`fetch_sessions.CachedPartition`), told of each
        # `wake` so an incremental fetch reads only what changed; None while there is none.
        self._watchers: set[SessionWatcher] | None = None

    @property
    def waiters(self) -> set[asyncio.Future[None]]:
        """Parked fetches (woken by appends and HW moves)."""
        if self._waiters is None:
            self._waiters = set()
        return self._waiters

    @property
    def low_watermark_waiters(self) -> set[asyncio.Future[None]]:
        if self._low_watermark_waiters is None:
            self._low_watermark_waiters = set()
        return self._low_watermark_waiters

    # -- role -----------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.leader == self.broker_id

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the high watermark must respect: while an expansion is in flight, the larger one (KIP-497)."""
        if self.pending_isr is None:
            return self.isr
        return tuple(dict.fromkeys(self.isr + self.pending_isr))

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def state_matches(self, state: PartitionState) -> bool:
        return (state.leader, state.leader_epoch, state.partition_epoch) == (
            self.leader, self.leader_epoch, self.partition_epoch)

    def become_leader(self, state: PartitionState, now_ms: int) -> None:
        """Take the role; `start_epoch` completes it once the log end is final (no truncation in flight)."""
        self.leader = self.broker_id
        # A wait from before this leadership (another epoch) must not complete under it: its batch may be gone.
        self.fail_acks(NotLeaderOrFollowerError(
            f"partition {self.name}: leader epoch moved to {state.leader_epoch} before the batch was replicated"))
        self.leader_epoch = state.leader_epoch
        self._take(state)
        # Every follower starts unknown and counts as caught up now: one that never fetches leaves the ISR
        # after the lag time.
        self.progress = {r: ReplicaProgress(last_caught_up_ms=now_ms, last_fetch_ms=now_ms)
                         for r in state.replicas if r != self.broker_id} or _NO_PROGRESS
        self.pending_isr = None
        self.leader_ready = False

    def start_epoch(self, log_end_offset: int) -> None:
        """The leader's epoch begins at `log_end_offset` (the log end once any truncation landed)."""
        self.epoch_start_offset = log_end_offset
        self.leader_ready = True

    def become_follower(self, state: PartitionState, error: KelpError) -> None:
        self.leader = state.leader
        self.leader_epoch = state.leader_epoch
        self._take(state)
        self.progress = _NO_PROGRESS
        self.pending_isr = None
        self.fail_acks(error)

    def update_state(self, state: PartitionState, now_ms: int) -> None:
        """Same leader and epoch, newer partition epoch: ISR or replica set changed (AlterPartition, reassignment).

        A newer partition epoch is the outcome of any ISR change in flight (committed, or overtaken by
        another change): as Kafka, the committed state replaces the pending one.
        """
        self._take(state)
        self.pending_isr = None
        if self.is_leader:
            if self.progress is _NO_PROGRESS:
                self.progress = {}  # its own, to change in place
            for r in state.replicas:
                if r != self.broker_id and r not in self.progress:
                    self.progress[r] = ReplicaProgress(last_caught_up_ms=now_ms, last_fetch_ms=now_ms)
            for r in list(self.progress):
                if r not in state.replicas:
                    del self.progress[r]

    def _take(self, state: PartitionState) -> None:
        self.applied = state
        self.partition_epoch = state.partition_epoch
        self.replicas = state.replicas
        self.isr = state.isr

    # -- leader: follower progress, ISR, high watermark -------------------
    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int,
                              log_start_offset: int = -1) -> tuple[int, ...] | None:
        """A follower fetched from `fetch_offset` (its log end). Returns an expanded ISR to ask for, if it caught up."""
        prog = self.progress.get(replica_id)
        if prog is None:
            return None
        leo = self.log.log_end_offset
        prog.log_end_offset = fetch_offset
        if log_start_offset > prog.log_start_offset:
            prog.log_start_offset = log_start_offset
            self.wake_low_watermark()
        if fetch_offset >= leo:
            prog.last_caught_up_ms = now_ms
        elif prog.last_fetch_leader_leo >= 0 and fetch_offset >= prog.last_fetch_leader_leo:
            prog.last_caught_up_ms = prog.last_fetch_ms  # it has what we had at its previous fetch
        prog.last_fetch_ms = now_ms
        prog.last_fetch_leader_leo = leo
        if (replica_id not in self.isr and self.pending_isr is None
                and fetch_offset >= self.high_watermark and fetch_offset >= self.epoch_start_offset):
            return self.isr + (replica_id,)
        return None

    def out_of_sync(self, now_ms: int, lag_ms: int) -> tuple[int, ...]:
        """ISR followers not caught up within `lag_ms` (Kafka's replica.lag.time.max.ms)."""
        out = []
        for r in self.isr:
            if r == self.broker_id:
                continue
            prog = self.progress.get(r)
            if prog is None or now_ms - prog.last_caught_up_ms > lag_ms:
                out.append(r)
        return tuple(out)

    def maybe_advance_high_watermark(self) -> bool:
        """HW = min log end offset over the (maximal) ISR; never backwards. True if it moved."""
        lg = self.log
        if not self.is_leader:
            return False
        new_hw = lg.log_end_offset
        for r in self.maximal_isr:
            if r == self.broker_id:
                continue
            prog = self.progress.get(r)
            leo = prog.log_end_offset if prog is not None else -1
            if leo < new_hw:
                new_hw = leo
        if new_hw > lg.high_watermark:
            lg.high_watermark = new_hw
            if lg.first_unstable_offset is not None:
                self.publish_unstable()
            return True
        return False

    # -- transactions ---------------------------------------------------
    @property
    def last_stable_offset(self) -> int:
        """LSO = min(first offset of a transaction not decided and replicated yet, high watermark): what a
        read_committed consumer may read below (Kafka's `UnifiedLog.lastStableOffset`)."""
        hw = self.log.high_watermark
        first = self.producers.first_unstable_offset(hw)
        return hw if first is None or first > hw else first

    def publish_unstable(self) -> None:
        """Tell the log where undecided transactions start (the cleaner stops there)."""
        self.log.first_unstable_offset = self.producers.first_unstable_offset(self.log.high_watermark)

    def require_end_offset_known(self) -> None:
        """Kafka's rule (KIP-207): until a new leader's high watermark reaches the offset its epoch began
        at, its "latest" (or an offset by time) could be below one a client already saw from the old
        leader; such lookups get OFFSET_NOT_AVAILABLE, which clients retry."""
        if self.high_watermark < self.epoch_start_offset:
            raise OffsetNotAvailableError(
                f"partition {self.name}: the new leader's high watermark {self.high_watermark} has not reached "
                f"the start of its epoch {self.leader_epoch} at offset {self.epoch_start_offset} yet")

    def follow_high_watermark(self, leader_hw: int) -> bool:
        lg = self.log
        new_hw = min(leader_hw, lg.log_end_offset)
        if new_hw > lg.high_watermark:
            lg.high_watermark = new_hw
            if lg.first_unstable_offset is not None:
                self.publish_unstable()
            return True
        return False

    # -- waiting ----------------------------------------------------------
    def add_ack_waiter(self, offset: int, leader_epoch: int, fut: asyncio.Future[None]) -> None:
        """Complete `fut` once the high watermark reaches `offset`, if this replica still leads at `leader_epoch`.

        Registered under another epoch (leadership moved between the append and the wait), or while not
        leading, it fails at once: the batch may be gone.
        """
        if not self.is_leader or leader_epoch != self.leader_epoch:
            fut.set_exception(NotLeaderOrFollowerError(
                f"partition {self.name}: appended under leader epoch {leader_epoch}, but this broker "
                + (f"now leads at epoch {self.leader_epoch}" if self.is_leader else
                   f"no longer leads (leader is broker {self.leader}, epoch {self.leader_epoch})")
                + "; the batch may have been truncated"))
            return
        if self._acks is None:
            self._acks = []
        self._acks.append((offset, leader_epoch, fut))

    def discard_ack_waiter(self, fut: asyncio.Future[None]) -> None:
        if self._acks:
            self._acks = [a for a in self._acks if a[2] is not fut] or None

    def resolve_acks(self) -> None:
        if not self._acks:
            return
        if not self.is_leader or not self.leader_ready:
            return  # `become_follower` / `become_leader` fail them; a leader finishing a truncation answers later
        hw = self.log.high_watermark
        keep = []
        for offset, epoch, fut in self._acks:
            if fut.done():
                continue
            if epoch != self.leader_epoch:
                fut.set_exception(NotLeaderOrFollowerError(
                    f"partition {self.name}: leader epoch moved from {epoch} to {self.leader_epoch} before the "
                    "batch was replicated"))
            elif offset <= hw:
                fut.set_result(None)
            else:
                keep.append((offset, epoch, fut))
        self._acks = keep or None

    def fail_acks(self, error: KelpError) -> None:
        acks, self._acks = self._acks or (), None
        for _offset, _epoch, fut in acks:
            if not fut.done():
                fut.set_exception(error)

    def watch(self, watcher: "SessionWatcher") -> None:
        if self._watchers is None:
            self._watchers = set()
        self._watchers.add(watcher)

    def unwatch(self, watcher: "SessionWatcher") -> None:
        if self._watchers:
            self._watchers.discard(watcher)
            if not self._watchers:
                self._watchers = None

    def wake(self) -> None:
        """Something a fetch reads moved (log end, high watermark, role): parked fetches, the fetch sessions
        reading this replica and the acks=all waits are told."""
        _complete_all(self._waiters)
        if self._watchers:
            for watcher in self._watchers:
                watcher.changed()
        self.resolve_acks()

    def low_watermark(self) -> int:
        """The lowest log start over the in-sync replicas (-1 while a follower's is unknown): Kafka's low watermark."""
        starts = [self.log.log_start_offset]
        for r in self.isr:
            if r != self.broker_id:
                prog = self.progress.get(r)
                starts.append(prog.log_start_offset if prog is not None else -1)
        return min(starts)

    def wake_low_watermark(self) -> None:
        _complete_all(self._low_watermark_waiters)

    def describe_replicas(self) -> dict[int, int]:
        """Replica id -> log end offset as this broker knows it (-1 unknown); for reassignment progress."""
        out = {self.broker_id: self.log.log_end_offset}
        for r, prog in self.progress.items():
            out[r] = prog.log_end_offset
        return out


class LogStartWaker:
    """A log's start moved (retention, DeleteRecords; maybe in a worker thread): its replica (`Log.owner`) wakes on
    the loop, so the fetch sessions reading it tell their fetchers at the next fetch, as Kafka's do."""

    __slots__ = ("loop",)

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    def take_loop(self) -> None:
        if self.loop is None:
            try:
                self.loop = asyncio.get_running_loop()
            except RuntimeError:
                pass

    def __call__(self, owner: object) -> None:
        loop = self.loop
        if not isinstance(owner, Partition) or loop is None or loop.is_closed():
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            owner.wake()
            return
        try:
            loop.call_soon_threadsafe(owner.wake)
        except RuntimeError:  # the loop closed meanwhile: nobody to tell
            pass


def _complete_all(waiters: set[asyncio.Future[None]] | None) -> None:
    if waiters:
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        waiters.clear()


def leaderless(state: PartitionState) -> bool:
    return state.leader == NO_LEADER

