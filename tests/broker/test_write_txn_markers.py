"""WriteTxnMarkers (API 27) as a transaction coordinator uses it: per-partition answers with Kafka's codes,
several markers per request, and the group coordinator told when markers land in `__consumer_offsets`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import ProduceRequest, WriteTxnMarkersRequest

from kelp.errors import ErrorCode
from kelp.records.build import build_batch
from kelp.records.record import Record
from tests.authorization.harness import InProcessBroker

M = WriteTxnMarkersRequest.WritableTxnMarker


def marker(pid: int, epoch: int, commit: bool, topics: dict[str, list[int]], coordinator_epoch: int = 0) -> M:
    return M(producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=coordinator_epoch,
             topics=[M.WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in topics.items()])


def codes(resp) -> list[dict[tuple[str, int], int]]:
    return [{(t.name, p.partition_index): p.error_code for t in m.topics for p in t.partitions}
            for m in resp.markers]


@pytest.fixture
async def b(tmp_path: Path):
    # Transactional data written below any client (no coordinator knows it): without KIP-890's verification.
    async with InProcessBroker(tmp_path, **{"offsets.topic.num.partitions": 3,
                                            "transaction.partition.verification.enable": False}) as broker:
        await broker.parts.topics.create_topic("t", 2, 1)
        yield broker


async def test_each_partition_gets_kafkas_answer(b: InProcessBroker) -> None:
    T = ProduceRequest.TopicProduceData
    data = build_batch([Record(b"k", b"v")], producer_id=11, producer_epoch=3, base_sequence=0, is_transactional=True)
    produced = await b.call(ProduceRequest(transactional_id="tx", acks=1, timeout_ms=5000, topic_data=[
        T(name="t", partition_data=[T.PartitionProduceData(index=0, records=data)])]), 9)
    assert produced.responses[0].partition_responses[0].error_code == 0
    req = WriteTxnMarkersRequest(markers=[
        marker(11, 2, False, {"t": [0]}),  # an older producer epoch than its data's
        marker(11, 3, False, {"t": [0, 1, 7], "nope": [0]}, coordinator_epoch=4),
        marker(11, 3, True, {"t": [0]}, coordinator_epoch=3),  # a zombie coordinator
    ])
    for version in (1, 2):
        resp = await b.call(req, version)
        assert [m.producer_id for m in resp.markers] == [11, 11, 11]
        first, second, third = codes(resp)
        assert first == {("t", 0): ErrorCode.INVALID_PRODUCER_EPOCH}
        if version == 1:  # the abort itself is written once; v2's repeat finds the transaction closed already
            assert second == {("t", 0): 0, ("t", 1): 0, ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert third == {("t", 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}
    part = b.parts.replicas.get_partition("t", 0)
    assert part is not None and part.producers.ongoing_transactions() == {}
    assert [t.producer_id for t in part.log.collect_aborted_txns(0, part.log.log_end_offset)] == [11]


async def test_markers_in_consumer_offsets_reach_the_group_coordinator(b: InProcessBroker, monkeypatch) -> None:
    for _ in range(200):  # the offsets topic is created on the first FindCoordinator, then led here
        found = await b.call(FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]), 4)
        if found.coordinators[0].error_code == 0 and b.parts.groups.check_group("g") == 0:
            break
        await asyncio.sleep(0.02)
    offsets = b.parts.topics.get("__consumer_offsets")
    assert offsets is not None and offsets.partitions >= 2
    last = offsets.partitions - 1
    calls: list[tuple[int, list[int], bool]] = []
    monkeypatch.setattr(b.parts.groups, "handle_txn_completion",
                        lambda pid, partitions, commit: calls.append((pid, sorted(partitions), commit)))
    resp = await b.call(WriteTxnMarkersRequest(markers=[
        marker(21, 0, True, {"__consumer_offsets": [0, last], "t": [1]}),
        marker(22, 0, False, {"t": [0]}),
    ]), 1)
    assert codes(resp) == [{("__consumer_offsets", 0): 0, ("__consumer_offsets", last): 0, ("t", 1): 0},
                           {("t", 0): 0}]
    assert calls == [(21, [0, last], True)]  # only markers written to offsets partitions, once per marker
