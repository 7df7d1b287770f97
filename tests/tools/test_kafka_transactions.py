"""`kafka-transactions` (Kafka's TransactionsCommand, kafka-tools 4.3.1) against Kelp: list, describe,
describe-producers, find-hanging and abort of a hanging transaction.

The hanging transaction is made as Kafka's own find-hanging test makes one: a transactional batch written
straight to a partition by a producer id no coordinator knows (its last write an hour ago), so nothing will
ever end it and it holds the partition's last stable offset back. find-hanging (by broker and by partition)
finds it, abort ends it with an ABORT marker the admin client writes itself (DescribeProducers, then
WriteTxnMarkers to the leader), the LSO reaches the log end and a read_committed consumer reads past it. A
real transactional producer (confluent-kafka) meanwhile shows in list and describe, and is not hanging.
`kelp transactions` (the HTTP API) and /metrics (the LSO lag, the coordinator's counters) agree.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from kelp.cli.main import main
from tests.broker.helpers import create_topic_wire
from tests.support.hanging_txn import (
    HANGING_PID,
    latest,
    open_hanging_transaction,
    produce_plain,
    read_committed,
    rows,
)

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

TXNS = "org.apache.kafka.tools.TransactionsCommand"
TOPIC, OTHER, TID = "hang", "txn-other", "tools-tx"


def txns(tools, *args: str) -> tuple:
    """A run_parallel call: the tool takes --bootstrap-server before its command."""
    return (TXNS, "--bootstrap-server", tools.bootstrap, *args, {"bootstrap": False})


def kelp_json(capsys: pytest.CaptureFixture, http_url: str, *argv: str) -> object:
    """`kelp ... --json` in-process against the broker's HTTP API."""
    capsys.readouterr()
    assert main([*argv, "--http", http_url, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def metric(http_url: str, line_start: str) -> float:
    """The value of the /metrics sample whose line starts with `line_start` (name and labels)."""
    with urllib.request.urlopen(f"{http_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    [value] = [line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(line_start)]
    return float(value)


def test_find_hanging_and_abort(tools, tools_broker, capsys) -> None:
    from confluent_kafka import Producer

    assert create_topic_wire(tools_broker.bootstrap, TOPIC) == 0
    assert create_topic_wire(tools_broker.bootstrap, OTHER) == 0
    produce_plain(tools_broker.bootstrap, TOPIC, b"before")                  # offset 0
    start = open_hanging_transaction(tools_broker.bootstrap, TOPIC)         # offsets 1-2, never ended
    produce_plain(tools_broker.bootstrap, TOPIC, b"after")                   # offset 3
    assert start == 1 and latest(tools_broker.bootstrap, TOPIC, read_committed=True) == 1

    producer = Producer({"bootstrap.servers": tools_broker.bootstrap, "transactional.id": TID,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(OTHER, b"in-flight")
    assert producer.flush(30) == 0

    broker = str(tools_broker.broker_id)
    listed, described, producers, by_broker, by_partition = tools.run_parallel(
        txns(tools, "list"), txns(tools, "describe", "--transactional-id", TID),
        txns(tools, "describe-producers", "--topic", TOPIC, "--partition", "0"),
        txns(tools, "find-hanging", "--broker-id", broker),
        txns(tools, "find-hanging", "--topic", TOPIC, "--partition", "0"))
    [row] = [r for r in rows(listed.ok()) if r["TransactionalId"] == TID]
    assert (row["Coordinator"], row["TransactionState"]) == (broker, "Ongoing")
    [desc] = rows(described.ok())
    assert (desc["TransactionalId"], desc["TransactionState"], desc["TopicPartitions"], desc["ProducerId"]) \
        == (TID, "Ongoing", f"{OTHER}-0", row["ProducerId"])
    assert int(desc["TransactionTimeoutMs"]) == 60000 and int(desc["TransactionDurationMs"]) >= 0
    [hung] = [r for r in rows(producers.ok()) if r["ProducerId"] == str(HANGING_PID)]
    assert (hung["ProducerEpoch"], hung["LatestCoordinatorEpoch"], hung["LastSequence"],
            hung["CurrentTransactionStartOffset"]) == ("0", "-1", "1", "1")
    for found in (by_broker, by_partition):
        [h] = rows(found.ok())  # the confluent producer's transaction is known to its coordinator: not hanging
        assert (h["Topic"], h["Partition"], h["ProducerId"], h["StartOffset"]) == (TOPIC, "0", str(HANGING_PID), "1")
        assert int(h["Duration(min)"]) >= 59

    # `kelp transactions` (the HTTP API) agrees with the tool.
    [mine] = kelp_json(capsys, tools_broker.http_url, "transactions", "list", "--state", "Ongoing")
    assert (mine["transactional_id"], mine["producer_id"], mine["coordinator"]) == (TID, int(row["ProducerId"]),
                                                                                    tools_broker.broker_id)
    d = kelp_json(capsys, tools_broker.http_url, "transactions", "describe", TID)
    assert (d["state"], d["partitions"]) == ("Ongoing", [{"topic": OTHER, "partition": 0}])
    p = kelp_json(capsys, tools_broker.http_url, "transactions", "producers", TOPIC, "0")
    assert (p["last_stable_offset"], p["high_watermark"]) == (1, 4)
    assert [(x["producer_id"], x["current_txn_start_offset"]) for x in p["producers"]] == [(HANGING_PID, 1)]
    capsys.readouterr()
    assert main(["transactions", "producers", TOPIC, "0", "--http", tools_broker.http_url]) == 0
    assert "Last stable offset: 1" in capsys.readouterr().out

    lag = f'kelp_partition_lso_lag{{partition="0",topic="{TOPIC}"}}'
    assert metric(tools_broker.http_url, lag) == 3  # records 1-3 wait behind the hanging transaction
    assert metric(tools_broker.http_url, "kelp_transactions_ongoing ") == 1
    assert metric(tools_broker.http_url, "kelp_transactions_started_total ") == 1

    [aborted] = tools.run_parallel(txns(tools, "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "1"))
    aborted.ok()
    assert aborted.stdout.strip() == ""
    deadline = time.monotonic() + 10
    while latest(tools_broker.bootstrap, TOPIC, read_committed=True) != 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert latest(tools_broker.bootstrap, TOPIC, read_committed=True) == 5  # the marker at 4; the LSO past it
    assert read_committed(tools_broker.bootstrap, TOPIC, want=2) == [b"before", b"after"]

    producer.commit_transaction(30)
    assert metric(tools_broker.http_url, lag) == 0
    assert metric(tools_broker.http_url, "kelp_transactions_ongoing ") == 0
    deadline = time.monotonic() + 10  # CompleteCommit is written after the markers, once EndTxn was answered
    while metric(tools_broker.http_url, "kelp_transactions_committed_total ") != 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert metric(tools_broker.http_url, "kelp_transactions_committed_total ") == 1
    after, missing = tools.run_parallel(
        txns(tools, "find-hanging", "--topic", TOPIC),
        txns(tools, "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "1"))
    assert rows(after.ok()) == []
    assert missing.returncode == 1 and "Could not find any open transactions starting at offset 1" in missing.stderr
