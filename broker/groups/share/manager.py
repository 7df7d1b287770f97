"""The share-partitions this broker leads and the share sessions of the members fetching from them.

Why: ShareFetch and ShareAcknowledge reach the leader of each partition (Kafka's SharePartitionManager); the
leader keeps one `SharePartition` per (group, topic, partition), recovered from `__share_group_state` the first
time it is needed (or started where the group's `share.auto.offset.reset` says: the log's end by default,
Kafka's `latest`; written at once so a restart keeps that start), acquires records for fetches, applies
acknowledgements only once their snapshot is in `__share_group_state` (one write at a time per
share-partition, so a later snapshot always holds the earlier ones), and returns records whose acquisition lock
ran out. A share session (per group and member: epoch 0 opens it, -1 closes it and releases what the member
holds, every other request must carry the next epoch) remembers which partitions the member fetches, as
Kafka's ShareSessionCache does.

Leadership is the log's: when this broker stops leading a partition, its share-partitions are dropped (the
next leader recovers them from the state topic).

This module must never speak the wire protocol or read partition logs: the handler reads the records and hands
their batch boundaries to `acquire`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Sequence

from kelp.clock import WallClockMs, wall_clock_ms
from kelp.errors import ErrorCode, KelpError

from ..coordinator_config import Scheduler
from .partition import AckBatch, AckError, Acquired, SharePartition
from .state_log import ShareStateLog, StateKey

__all__ = ["ShareConfig", "ShareSession", "SharePartitions", "SessionError"]

log = logging.getLogger("kelp.broker.groups.share")
TopicPartition = tuple[str, int]  # (topic id hex, partition)


@dataclass(frozen=True)
class ShareConfig:
    lock_duration_ms: int = 30000  # group.share.record.lock.duration.ms
    session_idle_ms: int = 45000  # group.share.session.timeout.ms: a share session unused this long is closed
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    max_record_locks: int = 2000  # group.share.partition.max.record.locks


@dataclass
class ShareSession:
    next_epoch: int
    partitions: set[TopicPartition] = field(default_factory=set)
    timer: object | None = None


class SessionError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class _Entry:
    sp: SharePartition
    writing: asyncio.Lock = field(default_factory=asyncio.Lock)
    timer: object | None = None
    timer_at: int | None = None


class SharePartitions:
    """See the module docstring."""

    def __init__(self, state: ShareStateLog, config: ShareConfig, *, scheduler: Scheduler,
                 clock_ms: WallClockMs = wall_clock_ms, config_of: Callable[[str], ShareConfig] | None = None) -> None:
        self.state = state
        self.config = config
        # A group's settings: the broker's (`config`) with the group's own configs over them (its GROUP config
        # resource), read at each use so a change applies to the next fetch, session and lock.
        self.config_of: Callable[[str], ShareConfig] = config_of or (lambda _group: config)
        self.scheduler = scheduler
        self.clock_ms = clock_ms
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._entries: dict[StateKey, _Entry] = {}
        self._init: dict[StateKey, asyncio.Task[_Entry]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._waiters: set[asyncio.Future[None]] = set()

    # -- a fetch with nothing to read waits for a change (bounded by its MaxWaitMs) -------------------------
    async def wait_for_change(self, timeout_ms: int) -> None:
        """Return when any share-partition here gives records back (acknowledged, released, expired) or after
        `timeout_ms`: a fetch whose partitions are all full of in-flight records must not spin."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(fut)
        try:
            await asyncio.wait_for(fut, timeout_ms / 1000.0)
        except asyncio.TimeoutError:
            pass
        finally:
            self._waiters.discard(fut)

    def _changed(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # -- sessions -------------------------------------------------------------------------------------------
    def open_or_continue(self, group: str, member: str, epoch: int) -> ShareSession:
        """The member's session for a request of `epoch` (0 opens a new one); raises SessionError."""
        key = (group, member)
        if epoch == 0:
            old = self.sessions.pop(key, None)
            if old is not None:
                self._release(group, member, old.partitions)
            session = self.sessions[key] = ShareSession(next_epoch=1)
            self._touch(key, session)
            return session
        found = self.sessions.get(key)
        if found is None:
            raise SessionError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                               f"no share session for member {member} of group {group}")
        session = found
        if epoch == -1:
            return session
        if epoch != session.next_epoch:
            raise SessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                               f"share session epoch {epoch} is not the expected {session.next_epoch}")
        session.next_epoch = 1 if session.next_epoch >= 2**31 - 1 else session.next_epoch + 1
        self._touch(key, session)
        return session

    def _touch(self, key: tuple[str, str], session: ShareSession) -> None:
        """A session unused for `session_idle_ms` is closed (its member crashed, or left through another broker's
        coordinator): what it holds goes back before its locks run out, and the session does not stay forever."""
        cancel = getattr(session.timer, "cancel", None)
        if cancel is not None:
            cancel()
        session.timer = self.scheduler.call_later(self.config_of(key[0]).session_idle_ms,
                                                  lambda: self._idle(key, session))

    def _idle(self, key: tuple[str, str], session: ShareSession) -> None:
        if self.sessions.get(key) is session:
            log.info("share session of member %s of group %s closed after %d ms unused", key[1], key[0],
                     self.config_of(key[0]).session_idle_ms)
            self.close(*key)

    def close(self, group: str, member: str) -> None:
        """The member closed its session (epoch -1): what it holds goes back to the others."""
        session = self.sessions.pop((group, member), None)
        if session is not None:
            cancel = getattr(session.timer, "cancel", None)
            if cancel is not None:
                cancel()
            self._release(group, member, session.partitions)

    def member_gone(self, group: str, member: str) -> None:
        """The coordinator removed the member (left, or its session timed out)."""
        self.close(group, member)

    def _release(self, group: str, member: str, partitions: set[TopicPartition]) -> None:
        for tid, p in partitions:
            entry = self._entries.get((group, tid, p))
            if entry is not None and entry.sp.release_member(member):
                self._persist_later((group, tid, p), entry)
                self._changed()

    # -- share-partitions -----------------------------------------------------------------------------------
    def peek(self, key: StateKey) -> SharePartition | None:
        entry = self._entries.get(key)
        return entry.sp if entry is not None else None

    async def get(self, key: StateKey, *, log_start: int, log_end: int,
                  initial: Callable[[], Awaitable[int]] | None = None) -> SharePartition:
        """The share-partition, recovered from its snapshot or started at `initial()` (the group's
        share.auto.offset.reset; without it `log_end`), then written."""
        entry = self._entries.get(key)
        if entry is None:
            task = self._init.get(key)
            if task is None:
                task = self._init[key] = asyncio.get_running_loop().create_task(
                    self._recover(key, log_end, initial), name=f"share-partition-{key}")
                task.add_done_callback(functools.partial(self._init_done, key))
            entry = await asyncio.shield(task)
        entry.sp.move_start(log_start)
        entry.sp.delivery_limit = self.config_of(key[0]).delivery_count_limit  # the group's, as it is now
        return entry.sp

    def _init_done(self, key: StateKey, _task: "asyncio.Task[_Entry]") -> None:
        self._init.pop(key, None)

    async def _recover(self, key: StateKey, log_end: int, initial: Callable[[], Awaitable[int]] | None) -> _Entry:
        snap = await self.state.read(key)
        cfg = self.config_of(key[0])
        if snap is not None:
            sp = SharePartition.recovered(snap[0], snap[1], delivery_limit=cfg.delivery_count_limit,
                                          max_in_flight=cfg.max_record_locks)
        else:
            start = await initial() if initial is not None else log_end
            sp = SharePartition(start=start, delivery_limit=cfg.delivery_count_limit,
                                max_in_flight=cfg.max_record_locks)
            await self.state.write(key, sp.start, [])
        entry = self._entries.setdefault(key, _Entry(sp))
        log.info("share-partition %s: start offset %d (%s)", key, entry.sp.start,
                 "recovered" if snap is not None else "new")
        return entry

    def acquire(self, key: StateKey, member: str, batches: Sequence[tuple[int, int, bool]], *,
                high_watermark: int, max_records: int) -> list[Acquired]:
        entry = self._entries.get(key)
        if entry is None:
            return []
        now = self.clock_ms()
        got = entry.sp.acquire(member, batches, high_watermark=high_watermark, max_records=max_records,
                               now_ms=now, lock_ms=self.config_of(key[0]).lock_duration_ms)
        if got:
            self._arm(key, entry)
        return got

    async def acknowledge(self, key: StateKey, member: str, batches: Sequence[AckBatch]) -> tuple[int, str | None]:
        """Apply a request's acknowledgements of one partition once written; (error code, message)."""
        entry = self._entries.get(key)
        if entry is None:
            return ErrorCode.INVALID_RECORD_STATE, "no records of this partition are acquired here"
        try:
            changes = entry.sp.prepare(member, batches)
        except AckError as exc:
            return exc.code, str(exc)
        async with entry.writing:
            if self._entries.get(key) is not entry:  # reset or deleted while this waited: those records are gone
                entry.sp.abort(changes)
                return ErrorCode.INVALID_RECORD_STATE, "the share-partition was reset or deleted"
            start, state = entry.sp.state_batches(changes)
            try:
                await self.state.write(key, start, state)
            except KelpError as exc:
                entry.sp.abort(changes)
                log.warning("share-partition %s: acknowledgement not written, refused: %s", key, exc)
                return exc.code, str(exc)
            except Exception:
                entry.sp.abort(changes)
                raise
            entry.sp.commit(changes)
        self._changed()
        return ErrorCode.NONE, None

    async def reset(self, key: StateKey, start: int) -> None:
        """AlterShareGroupOffsets on this broker, the partition's leader: the share-partition starts over at
        `start` (its snapshot written first), whatever was in flight forgotten; the next fetch recovers it."""
        await self._replace(key, lambda: self.state.write(key, start, []))
        log.info("share-partition %s: start offset reset to %d", key, start)

    async def delete(self, key: StateKey) -> None:
        """DeleteGroups / DeleteShareGroupOffsets on this broker, the partition's leader: the share-partition's
        state is tombstoned (Kafka's DeleteShareGroupState) and forgotten; a later fetch starts it anew."""
        await self._replace(key, lambda: self.state.delete(key))
        log.info("share-partition %s: state deleted", key)

    async def _replace(self, key: StateKey, write: Callable[[], Awaitable[None]]) -> None:
        """Write what replaces a share-partition's state, then forget the loaded one, with nothing of the old
        written after it: a recovery under way is waited for, the write is made under the share-partition's write
        lock, and an acknowledgement or release waiting for that lock finds the share-partition gone."""
        entry: _Entry | None = None
        while entry is None:
            task = self._init.get(key)
            if task is not None:
                try:
                    await asyncio.shield(task)
                except Exception:  # its error is its fetch's; the write below decides this one
                    pass
            entry = self._entries.get(key)
            if entry is None:
                await write()
                if key not in self._init and key not in self._entries:
                    return
                # a fetch recovered the share-partition while this wrote (maybe from what was there before): again
        async with entry.writing:
            await write()
            if self._entries.get(key) is entry:
                del self._entries[key]
            cancel = getattr(entry.timer, "cancel", None)
            if cancel is not None:
                cancel()
        self._changed()

    def groups_partitions(self, group: str) -> set[TopicPartition]:
        """The share-partitions of `group` this broker has loaded."""
        return {(tid, p) for g, tid, p in self._entries if g == group}

    async def start_and_lag(self, key: StateKey, *, high_watermark: int) -> tuple[int, int] | None:
        """(start offset, lag) of a share-partition as DescribeShareGroupOffsets reports it, None if it has no
        state: the lag is what is not delivered-and-done yet, Kafka's high watermark - start - the window's
        acknowledged and archived records."""
        entry = self._entries.get(key)
        if entry is not None:
            start, batches = entry.sp.state_batches()
        else:
            snap = await self.state.read(key)
            if snap is None:
                return None
            start, batches = snap
        done = sum(b.last - max(b.first, start) + 1 for b in batches if b.state in (2, 4) and b.last >= start)
        return start, max(high_watermark - start - done, 0)

    # -- acquisition locks ----------------------------------------------------------------------------------
    def _arm(self, key: StateKey, entry: _Entry) -> None:
        due = entry.sp.next_deadline()
        if due is None or (entry.timer_at is not None and entry.timer_at <= due):
            return
        cancel = getattr(entry.timer, "cancel", None)
        if cancel is not None:
            cancel()
        entry.timer_at = due
        entry.timer = self.scheduler.call_later(due - self.clock_ms(), lambda: self._expire(key))

    def _expire(self, key: StateKey) -> None:
        entry = self._entries.get(key)
        if entry is None:
            return
        entry.timer = entry.timer_at = None
        if entry.sp.expire(self.clock_ms()):
            self._persist_later(key, entry)
            self._changed()
        self._arm(key, entry)

    def _persist_later(self, key: StateKey, entry: _Entry) -> None:
        """Write the share-partition's state after a change no request waits for (lock expiry, release)."""
        async def write() -> None:
            async with entry.writing:
                if self._entries.get(key) is not entry:
                    return  # reset or deleted since: what replaced it stands
                start, state = entry.sp.state_batches()
                try:
                    await self.state.write(key, start, state)
                except Exception as exc:  # the in-memory state stands; the next write carries it
                    log.warning("share-partition %s: state not written: %s", key, exc)

        task = asyncio.get_running_loop().create_task(write(), name=f"share-state-{key}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def on_leadership(self, topic_id: str | None, partition: int, is_leader: bool) -> None:
        """The log's leadership moved: a partition no longer led here loses its share-partitions."""
        if is_leader or topic_id is None:
            return
        for key in [k for k in self._entries if k[1] == topic_id and k[2] == partition]:
            entry = self._entries.pop(key)
            cancel = getattr(entry.timer, "cancel", None)
            if cancel is not None:
                cancel()

    async def stop(self) -> None:
        for entry in self._entries.values():
            cancel = getattr(entry.timer, "cancel", None)
            if cancel is not None:
                cancel()
        self._entries.clear()
        for session in self.sessions.values():
            cancel = getattr(session.timer, "cancel", None)
            if cancel is not None:
                cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
