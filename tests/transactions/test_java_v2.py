"""A Kafka 4 Java producer runs transactions v2 (KIP-890 part 2) against Kelp; librdkafka keeps v1.

Kafka's `TransactionalMessageCopier` (kafka-tools 4.3.1's clients, the jars `kelp.kafka_tools` fetches) sees
`transaction.version` 2 finalized in ApiVersions and so runs every transaction the v2 way: its Produce v12
lets the partition leader add the output partition, its TxnOffsetCommit v5 has the offsets partition added,
and its EndTxn v5 bumps the epoch on every commit and abort. It copies a seeded topic, aborting a third of
its transactions (`--enable-random-aborts`), on one broker; a read_committed reader must then find every
input value exactly once, and the copier's producer epoch must have grown with its transactions (v1 keeps it).
A confluent-kafka (librdkafka, transactions v1) producer then commits on the same broker, its epoch unchanged.
"""

from __future__ import annotations

import json
import shutil
import urllib.request

import pytest

from kelp import kafka_tools
from tests.broker.helpers import create_topic_wire
from tests.support.broker_process import BrokerProcess
from tests.transactions.system_support import Copier, read_topic, wait_until

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

RECORDS, TXN_SIZE = 200, 20
SETTINGS = {"transaction.state.log.num.partitions": 1, "offsets.topic.num.partitions": 1,
            "group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 500}


def _describe(bp: BrokerProcess, transactional_id: str) -> dict:
    with urllib.request.urlopen(f"{bp.http_url}/admin/v1/transactions/{transactional_id}", timeout=10) as resp:
        return json.load(resp)


def test_a_kafka_4_producer_runs_transactions_v2_and_librdkafka_v1(tmp_path) -> None:
    if shutil.which("java") is None:
        pytest.skip("java is not installed: Kafka's TransactionalMessageCopier cannot run")
    from confluent_kafka import Producer

    kafka_tools.fetch()
    bp = BrokerProcess(tmp_path / "broker", settings=SETTINGS).start()
    copier: Copier | None = None
    try:
        assert create_topic_wire(bp.bootstrap, "tv2-in") == 0 and create_topic_wire(bp.bootstrap, "tv2-out") == 0
        seed = Producer({"bootstrap.servers": bp.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        for i in range(RECORDS):
            seed.produce("tv2-in", str(i).encode(), partition=0)
        assert seed.flush(30) == 0
        copier = Copier.start(bp.bootstrap, transactional_id="tv2-copier", group="tv2-group", input_topic="tv2-in",
                              input_partition=0, output_topic="tv2-out", transaction_size=TXN_SIZE,
                              transaction_timeout_ms=20000, log_dir=tmp_path, random_aborts=True)
        wait_until("the copier to finish", lambda: copier.done or copier.failed(), timeout=90, interval=0.1,
                   detail=copier.describe)
        assert copier.done, copier.describe()
        values = read_topic(bp.bootstrap, "tv2-out", 1, isolation="read_committed", timeout=30,
                            expect_at_least=RECORDS)
        assert sorted(int(v) for v in values) == list(range(RECORDS))  # each once: aborted copies left out
        copied = _describe(bp, "tv2-copier")
        # v2: one epoch bump per commit or abort (at least one transaction per TXN_SIZE records); v1 stays at 0
        assert copied["producer_epoch"] >= RECORDS // TXN_SIZE, copied

        v1 = Producer({"bootstrap.servers": bp.bootstrap, "transactional.id": "librdkafka-v1"})
        v1.init_transactions(30)
        v1.begin_transaction()
        v1.produce("tv2-out", b"from-librdkafka", partition=0)
        v1.commit_transaction(30)
        assert _describe(bp, "librdkafka-v1")["producer_epoch"] == 0
        after = read_topic(bp.bootstrap, "tv2-out", 1, isolation="read_committed", timeout=30,
                           expect_at_least=RECORDS + 1)
        assert after.count(b"from-librdkafka") == 1
    finally:
        if copier is not None:
            copier.kill()
        bp.kill()
