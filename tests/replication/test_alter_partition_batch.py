"""ISR changes batched: one AlterPartition request in flight per broker, each item judged and answered alone.

The controller's `alter_partitions` must judge every item exactly as `alter_partition` does (stale epochs,
ineligible replicas, unknown partitions refused one by one, an applied retry answered) and write the accepted
ones as one decision; the broker's batcher must keep one request in flight, put everything that queued
meanwhile in the next, give every caller its own outcome, spread an unknown outcome to all of a request's
callers, and fall back to single items when the controller predates the batch (a rolling upgrade).
"""

from __future__ import annotations

import asyncio

import pytest

from kelp.broker.cluster.alter_partition_batcher import MAX_ITEMS, AlterPartitionBatcher
from kelp.broker.cluster.routing import error_for
from kelp.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidUpdateVersionError,
    KelpError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from tests.replication.test_controller import Harness


def _item(state, topic: str, p: int, isr: list[int], **over) -> dict:
    return {"topic": topic, "partition": p, "leader_epoch": state.leader_epoch,
            "partition_epoch": state.partition_epoch, "isr": isr, **over}


async def test_a_batch_judges_each_item_alone_and_writes_the_accepted_ones_in_one_entry() -> None:
    h = Harness(4)
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={p: [0, 1, 2] for p in range(6)})
    s = [h.state("t", p) for p in range(6)]
    await c.broker_requests.alter_partition(topic="t", partition=5, leader=0, leader_epoch=s[5].leader_epoch,
                                            partition_epoch=s[5].partition_epoch, isr=[0, 1])
    del h.alive[2]
    await c._on_liveness(dict(h.alive))  # 2 leaves every ISR: partition epochs move
    s = [h.state("t", p) for p in range(6)]
    appends = h.store.appends
    answer = await c.broker_requests.alter_partitions(leader=0, partitions=[
        _item(s[0], "t", 0, [0]),                                   # a shrink: accepted
        _item(s[1], "t", 1, [0, 1], leader_epoch=s[1].leader_epoch - 1),  # a deposed leader's: fenced
        _item(s[2], "t", 2, [0, 1, 2]),                             # 2 is dead: ineligible
        _item(s[3], "t", 9, [0]),                                   # no such partition
        _item(s[4], "t", 4, [0], partition_epoch=s[4].partition_epoch - 1),  # stale, another ISR: refused
        _item(s[5], "t", 5, [0, 1], partition_epoch=s[5].partition_epoch - 1),  # an applied retry: answered
        _item(s[0], "t", 0, [0], partition_epoch=s[0].partition_epoch + 1),  # after the first item: current
    ])
    codes = [r["error_code"] for r in answer["results"]]
    assert codes == [0, FencedLeaderEpochError.code, IneligibleReplicaError.code, UnknownTopicOrPartitionError.code,
                     InvalidUpdateVersionError.code, 0, 0]
    assert "2" in answer["results"][2]["message"] and "9" in answer["results"][3]["message"]
    assert h.store.appends == appends + 1  # the accepted change, one entry
    after = [h.state("t", p) for p in range(6)]
    assert after[0].isr == (0,) and after[0].partition_epoch == s[0].partition_epoch + 1
    assert answer["results"][0]["state"]["isr"] == [0] == answer["results"][6]["state"]["isr"]
    assert after[1:] == s[1:]  # nothing refused changed
    assert answer["results"][5]["state"]["isr"] == [0, 1]
    assert answer["metadata_offset"] == c.state.image.offset


async def test_a_batch_of_refusals_only_writes_nothing() -> None:
    h = Harness()
    c = await h.start()
    await c.topic_admin.create_topic(name="t", assignments={0: [0, 1, 2]})
    s = h.state("t")
    appends = h.store.appends
    answer = await c.broker_requests.alter_partitions(leader=1, partitions=[_item(s, "t", 0, [1])])
    assert [r["error_code"] for r in answer["results"]] == [NotLeaderOrFollowerError.code]
    assert h.store.appends == appends and h.state("t") == s


class _Controller:
    """A stand-in for the controller behind the batcher: records each request; the first waits on `gate`."""

    def __init__(self) -> None:
        self.batches: list[list[dict]] = []
        self.singles: list[dict] = []
        self.gate = asyncio.Event()
        self.first_sent = asyncio.Event()
        self.fail: BaseException | None = None

    async def send_batch(self, items):
        self.batches.append(list(items))
        self.first_sent.set()
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return {"results": [{"error_code": 0, "state": {"replicas": [0, 1], "leader": 0, "leader_epoch": 1,
                                                        "isr": i["isr"]}}
                            if i["partition"] % 7 else
                            {"error_code": FencedLeaderEpochError.code, "message": f"p{i['partition']} fenced"}
                            for i in items],
                "metadata_offset": 42}

    async def send_one(self, item):
        self.singles.append(item)
        return {"replicas": [0, 1], "leader": 0, "leader_epoch": 1, "isr": item["isr"], "metadata_offset": 7}


def _req(p: int) -> dict:
    return {"topic": "t", "partition": p, "leader_epoch": 1, "partition_epoch": 1, "isr": [0, p % 3]}


async def test_thousands_of_isr_changes_take_a_few_requests_and_each_caller_gets_its_own_outcome() -> None:
    ctl = _Controller()
    b = AlterPartitionBatcher(ctl.send_batch, ctl.send_one, error_for)
    first = asyncio.ensure_future(b.submit(_req(1)))
    await asyncio.wait_for(ctl.first_sent.wait(), 5)
    rest = [asyncio.ensure_future(b.submit(_req(p))) for p in range(2, 3001)]  # queued while the first is out
    await asyncio.sleep(0)
    assert len(ctl.batches) == 1  # one request in flight, never two
    ctl.gate.set()
    outcomes = await asyncio.wait_for(asyncio.gather(first, *rest, return_exceptions=True), 10)
    assert [len(x) for x in ctl.batches] == [1, MAX_ITEMS, MAX_ITEMS, 999]
    assert b.requests == 4 and not ctl.singles
    for p, out in zip(range(1, 3001), outcomes, strict=True):
        if p % 7:
            assert out == {"replicas": [0, 1], "leader": 0, "leader_epoch": 1, "isr": [0, p % 3],
                           "metadata_offset": 42}
        else:
            assert isinstance(out, FencedLeaderEpochError) and str(out) == f"p{p} fenced"


async def test_an_unknown_outcome_reaches_every_caller_of_that_request_and_the_next_request_goes_out() -> None:
    ctl = _Controller()
    ctl.fail = RequestTimedOutError("no controller answered 'alter_partitions' within 10s")
    b = AlterPartitionBatcher(ctl.send_batch, ctl.send_one, error_for)
    calls = [asyncio.ensure_future(b.submit(_req(p))) for p in range(1, 4)]
    ctl.gate.set()
    outcomes = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 5)
    assert all(isinstance(o, RequestTimedOutError) for o in outcomes)
    ctl.fail = None
    assert (await asyncio.wait_for(b.submit(_req(1)), 5))["isr"] == [0, 1]  # the batcher is not stuck


async def test_a_controller_without_the_batch_operation_gets_the_items_one_by_one() -> None:
    """A rolling upgrade: the controller still runs the version before `alter_partitions` (HTTP 404)."""
    ctl = _Controller()
    ctl.fail = error_for(404, "unknown controller operation 'alter_partitions'")
    ctl.gate.set()
    b = AlterPartitionBatcher(ctl.send_batch, ctl.send_one, error_for)
    outcomes = await asyncio.wait_for(asyncio.gather(*(b.submit(_req(p)) for p in (1, 2, 3))), 5)
    assert [o["isr"] for o in outcomes] == [[0, 1], [0, 2], [0, 0]]
    assert [i["partition"] for i in ctl.singles] == [1, 2, 3]


async def test_a_caller_cancelled_while_queued_is_not_sent_and_the_others_are() -> None:
    ctl = _Controller()
    b = AlterPartitionBatcher(ctl.send_batch, ctl.send_one, error_for)
    first = asyncio.ensure_future(b.submit(_req(1)))
    await asyncio.wait_for(ctl.first_sent.wait(), 5)
    gone, kept = asyncio.ensure_future(b.submit(_req(2))), asyncio.ensure_future(b.submit(_req(3)))
    await asyncio.sleep(0)
    gone.cancel()
    ctl.gate.set()
    await asyncio.wait_for(asyncio.gather(first, kept), 5)
    assert [[i["partition"] for i in batch] for batch in ctl.batches] == [[1], [3]]
    with pytest.raises(asyncio.CancelledError):
        await gone


async def test_a_malformed_answer_is_an_unknown_outcome_not_a_wrong_one() -> None:
    ctl = _Controller()
    ctl.gate.set()

    async def short(items):
        return {"results": [], "metadata_offset": 1}

    b = AlterPartitionBatcher(short, ctl.send_one, error_for)
    with pytest.raises(KelpError, match="0 results for 1 items"):
        await asyncio.wait_for(b.submit(_req(1)), 5)


async def test_the_control_plane_route_judges_a_batch_and_refuses_a_malformed_item_by_name(tmp_path) -> None:
    """Over HTTP (the path every broker but the controller's own takes): a malformed item is a 400 naming it and
    nothing is judged; a good batch is answered item by item."""
    from aiohttp.test_utils import TestClient, TestServer

    from kelp.broker.http.app import build_http_app
    from tests.authorization.harness import InProcessBroker

    async with InProcessBroker(tmp_path, **{"authorizer.class.name": ""}) as b:
        await b.parts.topics.create_topic("t", 2, 1)
        async with TestClient(TestServer(build_http_app(b.broker))) as client:
            path = "/cluster/v1/controller/alter_partitions"
            state = b.broker.cluster.state.controller.state.partition_state("t", 0)[1]
            good = {"topic": "t", "partition": 0, "leader_epoch": state.leader_epoch,
                    "partition_epoch": state.partition_epoch, "isr": [state.leader]}
            for bad, named in (({**good, "isr": "0"}, "partitions[1]"), ({**good, "extra": 1}, "partitions[1]"),
                               ({**good, "partition": -1}, "partitions[1]")):
                r = await client.post(path, json={"leader": state.leader, "partitions": [good, bad]})
                body = await r.json()
                assert r.status == 400 and named in body["message"], body
            r = await client.post(path, json={"leader": state.leader, "partitions": [good, {**good, "partition": 5}]})
            body = await r.json()
            assert r.status == 200, body
            assert [x["error_code"] for x in body["results"]] == [0, UnknownTopicOrPartitionError.code]
            assert body["results"][0]["state"]["isr"] == [state.leader]
