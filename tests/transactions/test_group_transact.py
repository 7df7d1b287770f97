"""Transactions back to back and across rebalances: consume-transform-produce sessions bound to group members
keep going on three Kelp brokers, with both transaction versions, and the output holds each input once (issue 34).

Why: against Apache Kafka such a job finishes with every record exactly once; against Kelp a transactions v2
client got INVALID_TXN_STATE within seconds — the next transaction's first batch, started at the bumped epoch as
soon as EndTxn answered, reached a partition leader before the previous transaction's marker, and the marker
dropped the batch's verification guard. Here ten members (slots), each with its own transactional producer,
copy an input topic (12 partitions, RF 3, min ISR 2), fed at a steady rate, to an output topic (4 partitions),
committing their consumed offsets in each transaction; every `CHURN_MS` one slot's member leaves — cleanly, or
every other time as a crash with its transaction left open for the slot's next member to fence and abort — and
comes back half that later. The Java client 4.3.1 (transactions v2: Produce v12, EndTxn v5) runs with the
cooperative-sticky assignor and dynamic members (`bench/transactions/GroupTransact.java`), librdkafka (transactions v1)
with the range assignor and static members (group.instance.id); both runners are `bench.transactions.group_transact`'s,
which the bench's rebalancing case runs too. A third run has the Java members on the consumer group protocol
(KIP-848, `java-tv2-kip848`): their offsets go into the transactions with a member id and member epoch.
Once the group's committed offsets reach the input's end the members stop; then no client may have seen a
fatal error or INVALID_TXN_STATE, members must really have come and gone, and a read_committed reader of the
output must find every input value exactly once.

The sizes are environment variables (not KELP_*: brokers read those) so a long form runs by hand, with broker
SIGKILLs among the member changes (`GT_BROKER_KILLS`, one every `GT_KILL_EVERY_S`):

    GT_RECORDS=60000 GT_RATE=100 GT_BROKER_KILLS=6 GT_TIMEOUT=900 \
        .venv/bin/python -m pytest tests/transactions/test_group_transact.py -s -p no:cacheprovider
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

from bench.transactions.group_transact import Feeder, JavaRun, RdkafkaRun, committed_offsets, end_offsets, exactly_once
from kelp import kafka_tools
from tests.support.broker_process import BrokerStartError
from tests.support.cluster import Cluster
from tests.transactions.system_support import (
    CLUSTER_SETTINGS,
    create_topics,
    read_topic,
    wait_leaders_moved,
    wait_until,
)

RECORDS = int(os.environ.get("GT_RECORDS", "3000"))
RATE = int(os.environ.get("GT_RATE", "200"))  # input records per second: the run lasts about RECORDS / RATE s
MEMBERS = int(os.environ.get("GT_MEMBERS", "10"))
CHURN_MS = int(os.environ.get("GT_CHURN_MS", "2000"))
BROKER_KILLS = int(os.environ.get("GT_BROKER_KILLS", "0"))
KILL_EVERY_S = float(os.environ.get("GT_KILL_EVERY_S", "60"))
TEST_TIMEOUT = int(os.environ.get("GT_TIMEOUT", "240"))
INPUT, OUTPUT = "gt-input", "gt-output"
INPUT_PARTITIONS, OUTPUT_PARTITIONS = 12, 4

pytestmark = [pytest.mark.clients, pytest.mark.timeout(TEST_TIMEOUT)]


def _kill_a_broker(cluster: Cluster, k: int) -> None:
    """SIGKILL one broker (in turn), restart it on the same port (the clients' bootstrap list was written once:
    a member that joins later bootstraps from it), wait until the transactional topics are whole again."""
    victim = cluster.brokers[k % len(cluster.brokers)]
    port = victim.kafka_port
    victim.kill()
    wait_leaders_moved(cluster, victim.broker_id, (INPUT, OUTPUT, "__transaction_state", "__consumer_offsets"),
                       timeout=60)
    base = list(victim.extra_args)
    victim.extra_args = [*base, "--port", str(port)]  # the last --port wins
    try:
        victim.start()
    except BrokerStartError:  # the port was taken meanwhile: a new one (that broker drops out of the list)
        victim.extra_args = base
        victim.start()
    victim.extra_args = base
    for topic in (OUTPUT, "__transaction_state", "__consumer_offsets"):
        cluster.wait_fully_replicated(topic, timeout=120)


# java-tv2-kip848: the Java members use the consumer group protocol (KIP-848), so their transactions commit
# offsets (TxnOffsetCommit) with a member id and member epoch, across the broker's own reconciliations.
KIP848_SETTINGS = {"group.consumer.session.timeout.ms": 6000, "group.consumer.heartbeat.interval.ms": 1000}


@pytest.mark.parametrize("client", ["java-tv2", "java-tv2-kip848", "librdkafka-tv1"])
def test_group_transact_sessions_keep_going_through_rebalances(cluster_factory, tmp_path, client: str) -> None:
    java = client.startswith("java")
    kip848 = client.endswith("kip848")
    if java and shutil.which("java") is None:
        pytest.skip("java is not installed: the Java client cannot run")
    if java:
        kafka_tools.fetch()
    started = time.monotonic()
    cluster = cluster_factory(3, settings={**CLUSTER_SETTINGS, **(KIP848_SETTINGS if kip848 else {})})
    create_topics(cluster, {INPUT: INPUT_PARTITIONS, OUTPUT: OUTPUT_PARTITIONS})
    group = f"gt-{client}"
    feeder = Feeder(cluster.bootstrap, INPUT, INPUT_PARTITIONS, records=RECORDS, rate=RATE)
    common = dict(input_topic=INPUT, output_topic=OUTPUT, group=group, members=MEMBERS, churn_ms=CHURN_MS,
                  prefix=group)
    run = (JavaRun(cluster.bootstrap, assignor="cooperative-sticky", static=False, log_dir=tmp_path,
                   group_protocol="consumer" if kip848 else "classic", **common)
           if java else RdkafkaRun(cluster.bootstrap, assignor="range", static=True, **common))
    kills = 0
    next_kill = time.monotonic() + KILL_EVERY_S
    try:
        def drained() -> bool:
            status = run.status()
            if status.broken or run.exited():
                return True  # reported below
            nonlocal kills, next_kill
            if kills < BROKER_KILLS and time.monotonic() >= next_kill:
                _kill_a_broker(cluster, kills)
                kills += 1
                next_kill = time.monotonic() + KILL_EVERY_S
            if not feeder.done():
                return False
            ends = end_offsets(cluster.bootstrap, INPUT, INPUT_PARTITIONS)
            return committed_offsets(cluster.bootstrap, group, INPUT, INPUT_PARTITIONS) == ends

        wait_until("the group to commit every input offset", drained, timeout=TEST_TIMEOUT - 60, interval=0.5,
                   detail=run.describe)
        assert not feeder.errors, feeder.errors[:5]
        status = run.status()
        assert not status.broken and not run.exited(), run.describe()
        copied_at = time.monotonic()
        status = run.stop()
    finally:
        run.kill()
        feeder.stop()
    values = read_topic(cluster.bootstrap, OUTPUT, OUTPUT_PARTITIONS, isolation="read_committed",
                        expect_at_least=RECORDS, timeout=90)
    print(f"\ngroup transact ({client}): {RECORDS} records at {RATE}/s, {MEMBERS} members, churn every {CHURN_MS} ms,"
          f" {kills} broker kills; copied in {copied_at - started:.1f}s (cluster start included); commits "
          f"{status.commits}, aborts {status.aborts}, joins {status.joins}, leaves {status.leaves}, crashes "
          f"{status.crashes}, rebalances {status.rebalances}; errors {status.errors}; output {len(values)} values")
    assert status.fatal == 0 and status.invalid_txn_state == 0, f"{status.errors} {status.samples}"
    # members really came and went while transactions ran
    assert status.crashes >= 1 and status.leaves >= MEMBERS + 1 and status.joins >= MEMBERS + 2, status
    assert status.committed_records >= RECORDS, status
    problems = exactly_once(values, RECORDS)
    assert not problems, problems
