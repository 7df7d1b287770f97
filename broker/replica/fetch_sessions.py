"""Incremental fetch sessions (KIP-227): the broker's cache of what each fetcher last asked and was told.

Why: without sessions a follower names every partition it follows in every fetch, and the leader reads and
answers every one of them — at 3,000 partitions RF 3 that encoding and decoding was most of an acks=all
record's latency. With a session the fetcher names only the partitions whose fetch position changed, and the
leader answers only the partitions with something new: records, a moved high watermark, last stable offset or
log start offset, or an error. The rules are Kafka's (`FetchSession.scala`, `FetchManager.newContext`):

- a fetch with epoch 0 (INITIAL) is a full fetch: any session it names is closed, and after the answer a new
  session holding every partition it asked is created (session id > 0, next epoch 1) — when the cache has a
  free slot or may evict one; otherwise the answer carries session id 0 (sessionless, as before);
- epoch -1 (FINAL) closes the session it names and is answered sessionless;
- any other epoch is incremental: the session must exist (else FETCH_SESSION_ID_NOT_FOUND) and expect this epoch
  (else INVALID_FETCH_SESSION_EPOCH), and name its topics the same way (by name below FetchRequest v13, by id
  from v13; else FETCH_SESSION_TOPIC_ID_ERROR). Its partitions are added or updated, `forgotten_topics_data`
  removed; a session left empty is closed and that fetch answered sessionless (session id 0);
- the cache holds at most `max.incremental.fetch.session.cache.slots` sessions. A new one takes the slot of a
  session unused for `EVICTION_MS` first; else of the least valuable evictable one — a consumer's session may be
  evicted by a follower's (privileged) at any time, and any session older than `EVICTION_MS` by anyone; among
  those the smallest, consumers' before followers' — and only when that is worth less than the new session.
  As Kafka, a session's evictability and size are taken when it is last used (`touch`).

Memory: beyond Kafka, the partitions held by all sessions together are bounded, by max(20,000, 4 × the
partitions the broker knows) (the budget); a full fetch that would exceed it is answered
sessionless (after evicting what Kafka's rules allow), an incremental one that would is answered sessionless
and its session closed — both answers Kafka's clients handle by fetching in full. So a client opening sessions
flat out holds at most `slots` sessions and the budget's cached partitions (`tests/broker/test_fetch_sessions.py`).

What an incremental fetch reads (beyond Kafka, which reads every partition of the session each time): the
partitions it names, those marked dirty since the session's last fetch and every partition once per `sweep_ms`.
A session's partition watches the replica it was read from (`Partition.wake`: an append, a moved high watermark or
log start, a role change) and is marked dirty by it; one whose read left something to tell (records, an error, a
position below the end, a high watermark that moved during the read) stays dirty. A parked fetch waits on its
session (`wait_dirty`), not on each partition. The sweep (at most every quarter of replica.lag.time.max.ms) counts
a caught-up follower's quiet partitions as fetched, as Kafka's every fetch does (its place in the ISR), and tells
anything no wake reported (`tests/broker/test_fetch_session_reads.py`).

The eviction scan is linear in the sessions (at most `slots`, default 1,000) and runs only when the cache is
full. This module never does I/O; the Fetch handler (`kafka/handlers/fetch.py`) drives it.
"""

from __future__ import annotations

import asyncio
import random
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar

from kelp.clock import WallClockMs, monotonic_ms

from .results import FetchPartition

if TYPE_CHECKING:
    from .partition import Partition

__all__ = ["FetchSessionCache", "FetchSession", "CachedPartition", "SessionKey", "INVALID_SESSION_ID", "SWEEP_MS",
           "INITIAL_EPOCH", "FINAL_EPOCH", "EVICTION_MS", "next_epoch"]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000  # Kafka's KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
SWEEP_MS = 1_000  # see `new_context`: at most this long between two reads of a session's every partition
BUDGET_FLOOR = 20_000  # cached partitions over all sessions always allowed (about 6 MB at ~310 bytes each)
_MAX_INT = 0x7FFFFFFF

# A session's partition: (topic name below v13, the topic id's 16 bytes from v13; partition).
SessionKey = tuple[str | bytes, int]


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: FINAL stays FINAL, the int range wraps to 1 (0 means INITIAL)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_INT else epoch + 1


class CachedPartition:
    """One partition of a session: what the fetcher last asked (`req`) and what it was last told."""

    __slots__ = ("req", "high_watermark", "last_stable_offset", "log_start_offset", "key", "session", "watched")

    def __init__(self, req: FetchPartition, key: SessionKey | None = None) -> None:
        self.req = req  # req.topic is the topic's name (resolved again at each fetch when the session uses ids)
        self.high_watermark = -1  # -1: never told (a new partition is always answered)
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.key = key
        self.session: FetchSession | None = None  # set when its session is made
        self.watched: Partition | None = None  # the replica whose changes mark it dirty in its session

    def watch(self, part: Partition | None) -> None:
        """Be marked dirty in the session when `part` changes (its `wake`): appends, high watermark, role."""
        if part is self.watched:
            return
        if self.watched is not None:
            self.watched.unwatch(self)
        self.watched = part
        if part is not None:
            part.watch(self)

    def changed(self) -> None:
        """The watched replica changed: the next fetch of the session reads this partition (and a parked one wakes)."""
        if self.session is not None and self.key is not None:
            self.session.mark(self.key)

    def must_answer(self, error: int, hw: int, lso: int, log_start: int, has_records: bool) -> bool:
        """Kafka's CachedPartition.maybeUpdateResponseData, updating what the fetcher was told: records, a
        changed high watermark, last stable offset or log start offset, or an error (which forgets the high
        watermark, so the partition is answered again once the error is gone) — else the answer leaves it out."""
        must = has_records
        if error:
            self.high_watermark = -1
            return True
        if hw != self.high_watermark:
            self.high_watermark = hw
            must = True
        if lso != self.last_stable_offset:
            self.last_stable_offset = lso
            must = True
        if log_start != self.log_start_offset:
            self.log_start_offset = log_start
            must = True
        return must


class FetchSession:
    __slots__ = ("id", "privileged", "by_id", "partitions", "epoch", "created_ms", "last_used_ms", "cached_size",
                 "evictable_by_all", "evictable_by_privileged", "dirty", "swept_ms", "waiter", "closed")

    def __init__(self, session_id: int, privileged: bool, by_id: bool,
                 partitions: OrderedDict[SessionKey, CachedPartition], now: int) -> None:
        self.id = session_id
        self.privileged = privileged  # a follower's
        self.by_id = by_id  # its fetches name topics by id (FetchRequest v13+)
        self.partitions = partitions  # in the order the leader reads them; those answered with records move last
        self.epoch = next_epoch(INITIAL_EPOCH)  # the epoch the next incremental fetch must carry
        self.created_ms = now
        self.last_used_ms = now
        self.cached_size = 0  # the size counted in the cache's total (taken at the last touch, as Kafka)
        self.evictable_by_all = False
        self.evictable_by_privileged = False
        # The partitions the next incremental fetch reads beside those it names: their replica changed since
        # they were last read, or that read left something to tell (records, an error, a follower behind).
        self.dirty: dict[SessionKey, None] = {}
        self.swept_ms = now  # the last fetch that read every partition of the session
        self.waiter: asyncio.Future[None] | None = None  # a parked incremental fetch
        self.closed = False  # removed from the cache: a fetch still parked on it must not watch anything again
        for key, cached in partitions.items():
            cached.key = key
            cached.session = self

    def mark(self, key: SessionKey) -> None:
        self.dirty[key] = None
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take_dirty(self) -> list[SessionKey]:
        """The dirty partitions still in the session, in the order they became dirty; the set is emptied."""
        parts = self.partitions
        keys = [key for key in self.dirty if key in parts]
        self.dirty.clear()
        return keys

    async def wait_dirty(self, timeout: float) -> None:
        """Until a partition of the session is marked dirty, at most `timeout` seconds."""
        if self.dirty or timeout <= 0:
            return
        waiter = self.waiter = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(waiter, timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            self.waiter = None

    def watch(self, read: dict[SessionKey, tuple[Partition | None, bool]], *, keep_unclean: bool = True) -> None:
        """The partitions read watch the replicas read (each `wake` of one marks it dirty); with `keep_unclean`,
        those whose read left something to tell are dirty already (the next fetch reads them again)."""
        if self.closed:
            return
        parts = self.partitions
        for key, (part, clean) in read.items():
            cached = parts.get(key)
            if cached is None:
                continue
            cached.watch(part)
            if keep_unclean and not clean:
                self.dirty[key] = None

    def close(self) -> None:
        """Removed from the cache: its partitions no longer watch their replicas."""
        self.closed = True
        for cached in self.partitions.values():
            cached.watch(None)
        self.dirty.clear()

    def update(self, asked: Iterable[tuple[SessionKey, FetchPartition]], forgotten: Iterable[SessionKey]) -> None:
        """An incremental fetch: its partitions added or their fetch positions updated, the forgotten removed."""
        parts = self.partitions
        for key, req in asked:
            cached = parts.get(key)
            if cached is None:
                cached = parts[key] = CachedPartition(req, key)
                cached.session = self
            else:
                cached.req = req
        for key in forgotten:
            gone = parts.pop(key, None)
            if gone is not None:
                gone.watch(None)

    def moved_last(self, keys: Iterable[SessionKey]) -> None:
        """Partitions answered with records go last in the next read (Kafka's session does the same), so a few
        busy partitions early in the session cannot take every fetch's response bytes."""
        parts = self.partitions
        for key in keys:
            if key in parts:
                parts.move_to_end(key)


class FetchSessionCache:
    """This broker's fetch sessions, bounded in count (`slots`) and in the partitions they hold (`budget`)."""

    def __init__(self, slots: int, *, partitions_known: Callable[[], int] = lambda: 0,
                 budget_floor: int = BUDGET_FLOOR, clock_ms: WallClockMs = monotonic_ms,
                 eviction_ms: int = EVICTION_MS, sweep_ms: int = SWEEP_MS) -> None:
        self.slots = slots
        self.sweep_ms = sweep_ms  # an incremental fetch reads every partition of its session this often
        self.partitions_known = partitions_known  # the partitions the broker knows (counted only above the floor)
        self.budget_floor = budget_floor
        self.clock_ms = clock_ms
        self.eviction_ms = eviction_ms
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self.partitions = 0  # cached partitions over all sessions (as each was at its last touch)
        self.evictions = 0
        self._rng = random.Random()

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self.partitions -= session.cached_size
            session.close()
        return session

    def touch(self, session: FetchSession, now: int | None = None) -> None:
        """Kafka's FetchSessionCache.touch: the session becomes the most recently used, its size is counted
        again and its evictability taken (a young follower's session is evictable by nobody; a young
        consumer's by followers; any older than `eviction_ms` by anyone)."""
        now = self.clock_ms() if now is None else now
        session.last_used_ms = now
        self.sessions.move_to_end(session.id)
        self.partitions += len(session.partitions) - session.cached_size
        session.cached_size = len(session.partitions)
        old = now - session.created_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old
        session.evictable_by_all = old

    def within_budget(self, total: int) -> bool:
        """Whether `total` cached partitions are within max(floor, 4 × the partitions the broker knows)."""
        return total <= self.budget_floor or total <= 4 * self.partitions_known()

    def fits(self, session: FetchSession) -> bool:
        """Whether the partitions this (touched or about to be) session holds stay within the budget."""
        return self.within_budget(self.partitions - session.cached_size + len(session.partitions))

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        """Kafka's tryEvict: the least recently used session if stale, else the least valuable evictable one
        when it is worth no more than a new (privileged, size) session."""
        if not self.sessions:
            return False
        lru = next(iter(self.sessions.values()))
        if now - lru.last_used_ms > self.eviction_ms:
            self._evict(lru)
            return True
        victim: FetchSession | None = None
        for s in self.sessions.values():
            if not (s.evictable_by_privileged if privileged else s.evictable_by_all):
                continue
            if victim is None or (s.privileged, s.cached_size, s.id) < (victim.privileged, victim.cached_size,
                                                                         victim.id):
                victim = s
        # Kafka compares EvictableKey(privileged, size, id 0) of the new session with the victim's key.
        if victim is None or (privileged, size, 0) < (victim.privileged, victim.cached_size, victim.id):
            return False
        self._evict(victim)
        return True

    def _evict(self, session: FetchSession) -> None:
        self.remove(session.id)
        self.evictions += 1

    def create(self, privileged: bool, by_id: bool,
               partitions: OrderedDict[SessionKey, CachedPartition]) -> int:
        """Kafka's maybeCreateSession after a full fetch: the new session's id, or 0 (INVALID_SESSION_ID, the
        answer is sessionless) when no slot or no budget is free and Kafka's rules evict nothing for it."""
        now = self.clock_ms()
        size = len(partitions)
        while len(self.sessions) >= self.slots or not self.within_budget(self.partitions + size):
            if not self._try_evict(privileged, size, now):
                return INVALID_SESSION_ID
        session_id = self._new_id()
        session = self.sessions[session_id] = FetchSession(session_id, privileged, by_id, partitions, now)
        self.touch(session, now)
        return session_id

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, _MAX_INT)
            if session_id not in self.sessions:
                return session_id


# -- Kafka's FetchManager.newContext ---------------------------------------------------------------------------
class FetchContext:
    """How one fetch is read and answered: its partitions, and the session (if any) that filters the answer.

    `error`: a session error (answered alone, session id 0). `session`: an incremental fetch's session.
    `create`: a full fetch (epoch 0) whose answer may create a session. Otherwise sessionless."""

    __slots__ = ("error", "session", "create", "partitions")

    def __init__(self, partitions: list[tuple[SessionKey, FetchPartition]], *, error: int = 0,
                 session: FetchSession | None = None, create: bool = False) -> None:
        self.partitions = partitions
        self.error = error
        self.session = session
        self.create = create


FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106


def new_context(cache: FetchSessionCache, *, session_id: int, epoch: int, privileged: bool, by_id: bool,
                asked: list[tuple[SessionKey, FetchPartition]], forgotten: list[SessionKey]) -> FetchContext:
    """The context of a fetch carrying (`session_id`, `epoch`), as Kafka's FetchManager.newContext."""
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch: closes the session it names
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)
        return FetchContext(asked, create=epoch == INITIAL_EPOCH)
    session = cache.get(session_id)
    if session is None:
        return FetchContext([], error=FETCH_SESSION_ID_NOT_FOUND)
    if session.epoch != epoch:
        return FetchContext([], error=INVALID_FETCH_SESSION_EPOCH)
    if session.by_id != by_id:
        return FetchContext([], error=FETCH_SESSION_TOPIC_ID_ERROR)
    session.update(asked, forgotten)
    if not session.partitions or not cache.fits(session):
        cache.remove(session.id)  # emptied (Kafka), or over the cached-partition budget: answered sessionless
        return FetchContext(asked)
    cache.touch(session)
    session.epoch = next_epoch(session.epoch)
    parts = session.partitions
    if session.last_used_ms - session.swept_ms >= cache.sweep_ms:
        # Every partition, as Kafka reads them all at each fetch: a follower's caught-up partitions count as
        # fetched again (its place in the ISR: sweep_ms is well below replica.lag.time.max.ms), and a change no
        # `wake` reports (a log start moved by retention) is told within sweep_ms.
        session.swept_ms = session.last_used_ms
        session.dirty.clear()
        keys = list(parts)
    else:  # only the partitions named, and those whose replica changed or which had more to tell
        keys = session.take_dirty()
        if asked:
            seen = set(keys)
            keys.extend(key for key, _ in asked if key in parts and key not in seen)
    return FetchContext([(key, parts[key].req) for key in keys], session=session)


# One partition's answer as the handler encodes it: (partition, error, hw, lso, log start, records, aborted).
Answer = TypeVar("Answer", bound=tuple[int, int, int, int, int, Any, Any])


def finish(cache: FetchSessionCache, context: FetchContext, privileged: bool, by_id: bool,
           answers: list[tuple[SessionKey, Answer]],
           read: dict[SessionKey, tuple[Partition | None, bool]]) -> tuple[int, list[tuple[SessionKey, Answer]]]:
    """(the answer's session id, the partitions it carries): a full fetch may create a session holding what it was
    told; an incremental one carries only what changed (Kafka's Full/IncrementalFetchContext).

    `read`: for each partition read, the replica read (None: none) and whether the read left nothing to tell
    (no error, no records, the fetch position at the end of what may be read). The session's partitions watch
    those replicas; a partition that had more to tell stays dirty (read again by the next fetch)."""
    session = context.session
    if session is None:
        if not context.create:
            return INVALID_SESSION_ID, answers
        parts: OrderedDict[SessionKey, CachedPartition] = OrderedDict()
        for (key, req), (_, a) in zip(context.partitions, answers, strict=True):
            cached = parts[key] = CachedPartition(req, key)
            cached.must_answer(a[1], a[2], a[3], a[4], False)
        session_id = cache.create(privileged, by_id, parts)
        created = cache.get(session_id)
        if created is not None:
            created.watch(read)
        return session_id, answers
    out = []
    moved = []
    cached_of = session.partitions
    for key, a in answers:
        told = cached_of.get(key)
        if told is None:
            continue
        has_records = bool(a[5])
        if told.must_answer(a[1], a[2], a[3], a[4], has_records):
            out.append((key, a))
            if has_records:
                moved.append(key)
    session.moved_last(moved)
    session.watch(read)
    return session.id, out
