"""`/admin/v1/transactions` and `/admin/v1/topics/{t}/partitions/{p}/producers` under an authorizer.

A transactional id initialised and Ongoing on a partition is listed (with a state filter) and described; a
hanging transaction (a producer id no coordinator knows) shows in the partition's producers with the last
stable offset it holds back. DESCRIBE on the transactional id and READ on the topic are needed, as Kafka's
DescribeTransactions / DescribeProducers; a list shows only describable ids.
"""

from __future__ import annotations

from aiohttp.test_utils import TestClient
from kafka.protocol.producer import AddPartitionsToTxnRequest, ProduceRequest

from kelp.records.build import build_batch
from kelp.records.record import Record
from tests.authorization.harness import InProcessBroker
from tests.authorization.test_acl_transactions import TID, coordinating_txn
from tests.authorization.test_http_security import ADMIN, ALICE, acl, broker, client  # noqa: F401

AP = AddPartitionsToTxnRequest


async def produce(b: InProcessBroker, data: bytes, tid: str | None = None) -> int:
    T = ProduceRequest.TopicProduceData
    resp = await b.call(ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=5000, topic_data=[
        T(name="secret", partition_data=[T.PartitionProduceData(index=0, records=data)])]), 9)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == 0, part
    return int(part.base_offset)


async def test_list_describe_and_producers(client: TestClient, broker: InProcessBroker) -> None:  # noqa: F811
    pid, epoch = await coordinating_txn(broker)
    added = await broker.call(AP(v3_and_below_transactional_id=TID, v3_and_below_producer_id=pid,
                                 v3_and_below_producer_epoch=epoch,
                                 v3_and_below_topics=[AP.AddPartitionsToTxnTopic(name="secret", partitions=[0])]), 3)
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    await produce(broker, build_batch([Record(b"k", b"plain")]))
    broker.parts.transactions.verifier = None  # a hanging transaction, which KIP-890's verification would refuse
    start = await produce(broker, build_batch([Record(b"k", b"hung")], producer_id=9090, producer_epoch=1,
                                              base_sequence=0, is_transactional=True, now_ms=5000), tid="lost")

    listed = await (await client.get("/admin/v1/transactions", headers=ADMIN)).json()
    [row] = listed["transactions"]
    assert (row["transactional_id"], row["producer_id"], row["state"], row["partitions"]) == (TID, pid, "Ongoing", 1)
    assert listed["coordinator"] == broker.parts.config.broker_id and row["start_ms"] > 0
    empty = await client.get("/admin/v1/transactions?state=Empty,CompleteCommit", headers=ADMIN)
    assert (await empty.json())["transactions"] == []
    bad = await client.get("/admin/v1/transactions?state=Sleeping", headers=ADMIN)
    assert bad.status == 400 and "Sleeping" in (await bad.json())["message"]

    d = await (await client.get(f"/admin/v1/transactions/{TID}", headers=ADMIN)).json()
    assert (d["state"], d["producer_id"], d["producer_epoch"], d["timeout_ms"], d["partitions"]) \
        == ("Ongoing", pid, epoch, 60000, [{"topic": "secret", "partition": 0}])
    missing = await client.get("/admin/v1/transactions/nobody", headers=ADMIN)
    assert missing.status == 404 and (await missing.json())["error_code"] == 105

    p = await (await client.get("/admin/v1/topics/secret/partitions/0/producers", headers=ADMIN)).json()
    assert (p["last_stable_offset"], p["high_watermark"]) == (start, start + 1)
    assert [(x["producer_id"], x["producer_epoch"], x["last_sequence"], x["last_timestamp"], x["coordinator_epoch"],
             x["current_txn_start_offset"]) for x in p["producers"]] == [(9090, 1, 0, 5000, -1, start)]
    assert (await client.get("/admin/v1/topics/secret/partitions/7/producers", headers=ADMIN)).status == 404

    # Alice: nothing without ACLs, then exactly what DESCRIBE on the id and READ on the topic allow.
    assert (await (await client.get("/admin/v1/transactions", headers=ALICE)).json())["transactions"] == []
    refused = await client.get(f"/admin/v1/transactions/{TID}", headers=ALICE)
    assert refused.status == 403 and (await refused.json())["error_code"] == 53
    refused = await client.get("/admin/v1/topics/secret/partitions/0/producers", headers=ALICE)
    assert refused.status == 403 and (await refused.json())["error_code"] == 29
    await broker.parts.acls.create([acl("TRANSACTIONAL_ID", TID, "DESCRIBE"), acl("TOPIC", "secret", "READ")])
    assert len((await (await client.get("/admin/v1/transactions", headers=ALICE)).json())["transactions"]) == 1
    assert (await client.get(f"/admin/v1/transactions/{TID}", headers=ALICE)).status == 200
    assert (await client.get("/admin/v1/topics/secret/partitions/0/producers", headers=ALICE)).status == 200
