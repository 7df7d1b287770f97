"""Incremental fetch sessions (KIP-227) as a client sees them on the wire, and the session cache's bounds.

Each case attacks one rule of Kafka's FetchSession.scala: an incremental fetch is answered only for the
partitions with news (records, high watermark, log start, errors) and never misses one; wrong epochs, unknown
sessions and a session switching between topic names and ids are answered with Kafka's errors; epoch -1
closes; the cache holds at most `max.incremental.fetch.session.cache.slots` sessions and evicts as Kafka does;
and a client opening sessions flat out makes the broker hold no more than that.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

from kafka.protocol.consumer import FetchRequest

from kelp.broker.replica.fetch_sessions import EVICTION_MS, CachedPartition, FetchPartition, FetchSessionCache
from tests.authorization.harness import InProcessBroker
from tests.authorization.matrix import produce

T = FetchRequest.FetchTopic
P = T.FetchPartition
F = FetchRequest.ForgottenTopic
NOT_FOUND, BAD_EPOCH, TOPIC_ID_ERROR = 70, 71, 106
V = 12  # by name (flexible); v13+ by id


def fetch(parts: dict[str, list[tuple[int, int]]], *, session: int = 0, epoch: int = 0, replica_id: int = -1,
          forgotten: dict[str, list[int]] | None = None, by_id: dict[str, uuid.UUID] | None = None,
          leader_epoch: int = -1) -> FetchRequest:
    """A fetch of (partition, offset) per topic, in session (`session`, `epoch`)."""
    def topic(name: str) -> dict[str, Any]:
        return {"topic_id": by_id[name]} if by_id else {"topic": name}
    return FetchRequest(
        replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        session_id=session, session_epoch=epoch, rack_id="",
        replica_state=FetchRequest.ReplicaState(replica_id=replica_id, replica_epoch=-1),
        forgotten_topics_data=[F(partitions=ps, **topic(t)) for t, ps in (forgotten or {}).items()],
        topics=[T(partitions=[P(partition=p, current_leader_epoch=leader_epoch, fetch_offset=o, last_fetched_epoch=-1,
                                log_start_offset=-1, partition_max_bytes=1 << 20) for p, o in ps], **topic(t))
                for t, ps in parts.items()])


def answered(resp: Any, by_id: bool = False) -> dict[tuple[Any, int], tuple[int, int, int, bool]]:
    """(topic, partition) -> (error, high watermark, log start, has records) of each partition answered."""
    return {(t.topic_id if by_id else t.topic, p.partition_index):
            (p.error_code, p.high_watermark, p.log_start_offset, bool(p.records))
            for t in resp.responses for p in t.partitions}


async def test_full_fetch_opens_a_session_and_incremental_fetches_carry_only_news(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path) as b:
        await b.parts.topics.create_topic("a", 3, 1)
        full = await b.call(fetch({"a": [(0, 0), (1, 0), (2, 0)]}), V)
        assert full.error_code == 0 and full.session_id > 0
        assert set(answered(full)) == {("a", 0), ("a", 1), ("a", 2)}  # a full fetch answers every partition
        sid = full.session_id
        quiet = await b.call(fetch({}, session=sid, epoch=1), V)
        assert (quiet.error_code, quiet.session_id, answered(quiet)) == (0, sid, {})
        await b.call(produce("a"), 9)  # partition 0 gets a record (and its high watermark moves)
        news = await b.call(fetch({}, session=sid, epoch=2), V)
        assert answered(news) == {("a", 0): (0, 1, 0, True)}
        # The session fetches partition 0 from its cached offset 0 until told otherwise: records again.
        again = await b.call(fetch({}, session=sid, epoch=3), V)
        assert answered(again) == {("a", 0): (0, 1, 0, True)}
        moved = await b.call(fetch({"a": [(0, 1)]}, session=sid, epoch=4), V)
        assert answered(moved) == {}  # at the end, high watermark already told: nothing
        # The log start moves (DeleteRecords): answered without records.
        await b.call(produce("a"), 9)
        seen = await b.call(fetch({"a": [(0, 2)]}, session=sid, epoch=5), V)
        assert answered(seen) == {("a", 0): (0, 2, 0, False)}  # the high watermark moved to 2
        await b.parts.replicas.delete_records("a", 0, 1)
        start = await b.call(fetch({}, session=sid, epoch=6), V)
        assert answered(start) == {("a", 0): (0, 2, 1, False)}
        # Forgotten partitions are no longer read; a re-added one is answered in full.
        await b.call(fetch({}, session=sid, epoch=7, forgotten={"a": [0]}), V)
        await b.call(produce("a"), 9)
        assert answered(await b.call(fetch({}, session=sid, epoch=8), V)) == {}
        back = await b.call(fetch({"a": [(0, 2)]}, session=sid, epoch=9), V)
        assert answered(back) == {("a", 0): (0, 3, 1, True)}


async def test_session_errors_are_kafkas(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path) as b:
        topics = b.parts.topics
        await topics.create_topic("a", 1, 1)
        sid = (await b.call(fetch({"a": [(0, 0)]}), V)).session_id
        wrong = await b.call(fetch({}, session=sid, epoch=5), V)
        assert (wrong.error_code, wrong.session_id, wrong.responses) == (BAD_EPOCH, 0, [])
        replay = await b.call(fetch({}, session=sid, epoch=1), V)
        assert replay.error_code == 0
        assert (await b.call(fetch({}, session=sid, epoch=1), V)).error_code == BAD_EPOCH  # an epoch used twice
        unknown = await b.call(fetch({}, session=sid + 1, epoch=1), V)
        assert (unknown.error_code, unknown.session_id) == (NOT_FOUND, 0)
        # A session opened naming topics by name may not go on naming them by id (nor the reverse).
        ids = {"a": uuid.UUID(hex=topics.get("a").topic_id)}
        assert (await b.call(fetch({}, session=sid, epoch=2, by_id=ids), 13)).error_code == TOPIC_ID_ERROR
        # Epoch -1 closes the session and is answered sessionless, in full.
        closing = await b.call(fetch({"a": [(0, 0)]}, session=sid, epoch=-1), V)
        assert (closing.error_code, closing.session_id, set(answered(closing))) == (0, 0, {("a", 0)})
        assert (await b.call(fetch({}, session=sid, epoch=2), V)).error_code == NOT_FOUND
        # A full fetch naming a session closes it and opens another.
        s1 = (await b.call(fetch({"a": [(0, 0)]}), V)).session_id
        s2 = (await b.call(fetch({"a": [(0, 0)]}, session=s1), V)).session_id
        assert s2 not in (0, s1)
        assert (await b.call(fetch({}, session=s1, epoch=1), V)).error_code == NOT_FOUND
        # Fetch v4-v6 have no sessions.
        assert len(b.parts.replicas.fetch_sessions) == 1


async def test_sessions_by_topic_id_answer_an_unknown_id_until_it_exists(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path) as b:
        topics = b.parts.topics
        await topics.create_topic("a", 1, 1)
        ghost = uuid.uuid4()
        ids = {"a": uuid.UUID(hex=topics.get("a").topic_id), "g": ghost}
        full = await b.call(fetch({"a": [(0, 0)], "g": [(0, 0)]}, by_id=ids), 13)
        assert answered(full, True)[(ghost, 0)][0] == 100  # UNKNOWN_TOPIC_ID
        again = await b.call(fetch({}, session=full.session_id, epoch=1, by_id=ids), 13)
        assert answered(again, True) == {(ghost, 0): (100, -1, -1, False)}  # errors are answered every time
        await b.call(produce("a"), 9)
        news = await b.call(fetch({}, session=full.session_id, epoch=2, by_id=ids), 13)
        assert set(answered(news, True)) == {(ids["a"], 0), (ghost, 0)}


async def test_a_partition_whose_error_went_away_is_answered_again(tmp_path: Path) -> None:
    """Kafka forgets the high watermark it told with an error: the partition is answered once the error is gone,
    even when nothing else about it changed."""
    async with InProcessBroker(tmp_path) as b:
        await b.parts.topics.create_topic("a", 1, 1)
        sid = (await b.call(fetch({"a": [(0, 0)]}), V)).session_id
        fenced = await b.call(fetch({"a": [(0, 0)]}, session=sid, epoch=1, leader_epoch=99), V)
        assert answered(fenced)[("a", 0)][0] != 0  # a leader epoch this leader does not have yet
        healed = await b.call(fetch({"a": [(0, 0)]}, session=sid, epoch=2), V)
        assert answered(healed) == {("a", 0): (0, 0, 0, False)}


def test_a_moved_high_watermark_alone_is_news() -> None:
    """Under an open transaction the high watermark moves while the last stable offset stays."""
    told = CachedPartition(FetchPartition("t", 0, 0, 1))
    assert told.must_answer(0, 5, 3, 0, False)
    assert not told.must_answer(0, 5, 3, 0, False)
    assert told.must_answer(0, 6, 3, 0, False)
    assert told.must_answer(0, 6, 4, 0, False)


async def test_partitions_answered_with_records_are_read_last_next_time(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path) as b:
        await b.parts.topics.create_topic("a", 3, 1)
        sid = (await b.call(fetch({"a": [(0, 0), (1, 0), (2, 0)]}), V)).session_id
        await b.call(produce("a"), 9)
        await b.call(fetch({}, session=sid, epoch=1), V)
        session = b.parts.replicas.fetch_sessions.get(sid)
        assert session is not None
        assert [p for _, p in session.partitions] == [1, 2, 0]


async def test_a_client_opening_sessions_flat_out_is_held_to_the_slots(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path, **{"max.incremental.fetch.session.cache.slots": 20}) as b:
        await b.parts.topics.create_topic("a", 8, 1)
        cache = b.parts.replicas.fetch_sessions
        ids = set()
        for _ in range(300):
            ids.add((await b.call(fetch({"a": [(p, 0) for p in range(8)]}), V)).session_id)
        assert len(cache) == 20 and cache.partitions == 20 * 8
        assert len(ids - {0}) == 20  # young consumers' sessions are evicted by nobody but followers
        # A follower's (privileged) full fetch takes a consumer's slot.
        follower = await b.call(fetch({"a": [(0, 0)]}, replica_id=7), 15)
        assert follower.session_id > 0 and len(cache) == 20


async def test_slots_zero_answers_every_fetch_sessionless(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path, **{"max.incremental.fetch.session.cache.slots": 0}) as b:
        await b.parts.topics.create_topic("a", 1, 1)
        assert (await b.call(fetch({"a": [(0, 0)]}), V)).session_id == 0


# -- the cache's eviction rules (Kafka's FetchSessionCache), on a clock the test moves -----------------------
def _parts(n: int) -> OrderedDict[tuple[str | bytes, int], CachedPartition]:
    return OrderedDict((("t", i), CachedPartition(FetchPartition("t", i, 0, 1))) for i in range(n))


def test_eviction_order_stale_first_then_smallest_evictable() -> None:
    now = [0]
    cache = FetchSessionCache(3, clock_ms=lambda: now[0])
    consumer_small = cache.create(False, False, _parts(1))
    consumer_big = cache.create(False, False, _parts(5))
    follower = cache.create(True, False, _parts(2))
    assert cache.create(False, False, _parts(9)) == 0  # all young: a consumer evicts nobody
    s = cache.create(True, False, _parts(3))  # a follower evicts the smallest consumer's
    assert s and cache.get(consumer_small) is None and cache.get(consumer_big) is not None
    now[0] = EVICTION_MS + 10  # all older than the eviction time, none touched since: all stale
    cache.touch(cache.sessions[follower])  # the follower's is used again
    assert cache.create(False, False, _parts(1)) > 0
    assert cache.get(consumer_big) is None  # the least recently used stale one went first
    assert cache.get(follower) is not None


def test_an_old_session_is_evictable_by_anyone_but_only_by_a_larger_one() -> None:
    now = [0]
    cache = FetchSessionCache(1, clock_ms=lambda: now[0])
    old = cache.create(True, False, _parts(4))
    now[0] = EVICTION_MS + 1
    cache.touch(cache.sessions[old])  # used just now: not stale, but older than the eviction time
    assert cache.create(False, False, _parts(3)) == 0  # a consumer's is worth less than a follower's
    assert cache.create(True, False, _parts(4)) == 0  # an equal one is worth no more (Kafka's EvictableKey)
    assert cache.create(True, False, _parts(5)) > 0 and cache.get(old) is None


def test_the_cached_partitions_stay_within_the_budget() -> None:
    cache = FetchSessionCache(100, budget_floor=10)
    assert cache.create(False, False, _parts(6)) > 0
    assert cache.create(False, False, _parts(6)) == 0  # 12 > 10 and nothing evictable
    assert cache.partitions == 6


async def test_an_incremental_fetch_growing_a_session_past_the_budget_closes_it(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path) as b:
        await b.parts.topics.create_topic("a", 8, 1)
        cache = b.parts.replicas.fetch_sessions
        cache.budget_floor, cache.partitions_known = 4, lambda: 1  # a budget of 4 cached partitions
        sid = (await b.call(fetch({"a": [(0, 0), (1, 0)]}), V)).session_id
        grown = await b.call(fetch({"a": [(p, 0) for p in range(2, 8)]}, session=sid, epoch=1), V)
        assert (grown.error_code, grown.session_id) == (0, 0)  # answered sessionless: the client starts over
        assert set(answered(grown)) == {("a", p) for p in range(2, 8)}
        assert len(b.parts.replicas.fetch_sessions) == 0
