"""Kafka's own exactly-once check on three Kelp brokers: TransactionalMessageCopier under SIGKILLed brokers.

Why: this is how Apache Kafka's system test (tests/kafkatest/tests/core/transactions_test.py, the
`hard_bounce` / `brokers` case) tests transactions, with Kafka's own Java client doing the copying: the input
topic (2 partitions, RF 3, min ISR 2) is seeded with the values 0..N-1; one TransactionalMessageCopier per
input partition (transactional ids `copier-0`, `copier-1`, `--use-group-metadata`, small transactions) copies
it to the output topic (3 partitions) committing its consumer offsets in each transaction — and, unlike
Kafka's test, with `--enable-random-aborts`: a third of the transactions are aborted and copied again from
the committed offsets, so the output holds aborted records that read_committed must skip; meanwhile brokers
are SIGKILLed and restarted — the leader of a copier's `__transaction_state` partition (its transaction
coordinator), the leader of an output partition and the copiers' group coordinator, in turn — and, as
Kafka's `clients` bounce does, a copier is SIGKILLed and started again (its successor's InitProducerId
fences it and aborts its open transaction; it resumes from the offsets its transactions committed). Then a
read_committed reader of the output (one running all along, as in Kafka's test, and one started at the end)
must find every input value exactly once; a read_uncommitted reader may also see aborted copies (counted
and printed, not asserted).

Sizes are parameters (environment variables, not KELP_*: brokers read those as settings) so `make test`
runs a small form and a longer one runs by hand:

    TXN_SYS_RECORDS=60000 TXN_SYS_KILLS=8 TXN_SYS_COPIER_KILLS=3 TXN_SYS_TIMEOUT=900 \
        nice -n 5 .venv/bin/python -m pytest tests/transactions/test_exactly_once_system.py -s \
        --basetemp=/tmp/pt-txn-sys -p no:cacheprovider
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter

import pytest

from kelp import kafka_tools
from tests.support.cluster import Cluster
from tests.transactions.system_support import (
    CLUSTER_SETTINGS,
    Copier,
    TopicReader,
    coordinator_of,
    create_topics,
    group_coordinator_of,
    list_transactions,
    read_topic,
    resume,
    wait_leaders_moved,
    wait_until,
)
from tests.transactions.system_support import pause as pause_broker

RECORDS = int(os.environ.get("TXN_SYS_RECORDS", "5000"))
KILLS = int(os.environ.get("TXN_SYS_KILLS", "3"))
COPIER_KILLS = int(os.environ.get("TXN_SYS_COPIER_KILLS", "1"))
TEST_TIMEOUT = int(os.environ.get("TXN_SYS_TIMEOUT", "240"))
TRANSACTION_SIZE = int(os.environ.get("TXN_SYS_TXN_SIZE", "20"))
RANDOM_ABORTS = os.environ.get("TXN_SYS_RANDOM_ABORTS", "1") == "1"
INPUT, OUTPUT, GROUP = "input-topic", "output-topic", "transactions-test-consumer-group"
INPUT_PARTITIONS, OUTPUT_PARTITIONS = 2, 3

pytestmark = [pytest.mark.clients, pytest.mark.timeout(TEST_TIMEOUT)]


def _seed(cluster: Cluster) -> None:
    from confluent_kafka import Producer

    errors: list[str] = []
    p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 20})
    for i in range(RECORDS):
        p.produce(INPUT, str(i).encode(), partition=i % INPUT_PARTITIONS,
                  on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0 and not errors, errors[:5]


class Copiers:
    """The running copiers, one per input partition; `copied` counts across restarts."""

    def __init__(self, cluster: Cluster, log_dir) -> None:
        self.cluster = cluster
        self.log_dir = log_dir
        self.carried = 0
        self.restarts = 0
        self.all = [self._start(p) for p in range(INPUT_PARTITIONS)]

    def _start(self, partition: int) -> Copier:
        # The brokers running now: a restarted broker listens on a new ephemeral port.
        return Copier.start(self.cluster.bootstrap, transactional_id=f"copier-{partition}", group=GROUP,
                            input_topic=INPUT, input_partition=partition, output_topic=OUTPUT,
                            transaction_size=TRANSACTION_SIZE,
                            transaction_timeout_ms=40000, log_dir=self.log_dir,
                            log_name=f"copier-{partition}.{self.restarts}", random_aborts=RANDOM_ABORTS)

    @property
    def copied(self) -> int:
        return self.carried + sum(c.processed for c in self.all)

    def done(self) -> bool:
        return all(c.done for c in self.all)

    def failed(self) -> bool:
        return any(c.failed() for c in self.all)

    def describe(self) -> str:
        return "; ".join(c.describe() for c in self.all)

    def restart(self, partition: int) -> None:
        """SIGKILL the copier of `partition` and start its successor (same transactional id)."""
        old = self.all[partition]
        old.kill()
        self.carried += old.processed
        self.restarts += 1
        self.all[partition] = self._start(partition)

    def kill(self) -> None:
        for c in self.all:
            c.kill()


def _kill_and_restart(cluster: Cluster, victim: int, copiers: Copiers, *, pause: bool = False) -> dict:
    """SIGKILL `victim` (SIGSTOP with `pause`), wait for its partitions to move, restart it (SIGCONT), wait for
    the cluster to be whole again (every partition of the transactional topics in sync) and the copiers to go
    on."""
    before = copiers.copied
    killed_at = time.monotonic()
    if pause:
        pause_broker(cluster, victim)
    else:
        cluster[victim].kill()
    try:
        wait_leaders_moved(cluster, victim, (INPUT, OUTPUT, "__transaction_state"), timeout=30)
    finally:
        if pause:
            resume(cluster, victim)
    if not pause:
        cluster[victim].start()
    for topic in (OUTPUT, "__transaction_state", "__consumer_offsets"):
        cluster.wait_fully_replicated(topic, timeout=60)
    wait_until("the copiers to make progress after the kill", lambda: copiers.copied > before or copiers.done(),
               timeout=90, detail=copiers.describe)
    return {"broker": victim, "seconds": round(time.monotonic() - killed_at, 1)}


TARGETS = tuple(os.environ.get("TXN_SYS_TARGETS", "coordinator,output leader,group coordinator").split(","))


def _schedule() -> list[str]:
    """Broker kills rotate over TARGETS; a copier kill follows every group coordinator kill (the successor
    reads the offsets committed through the transactions), the rest come last."""
    events: list[str] = []
    copier_kills = COPIER_KILLS
    for k in range(KILLS):
        events.append(TARGETS[k % len(TARGETS)])
        if events[-1] == "group coordinator" and copier_kills:
            events.append("copier")
            copier_kills -= 1
    return events + ["copier"] * copier_kills


def test_copier_copies_every_record_exactly_once_while_brokers_are_killed(cluster_factory, tmp_path) -> None:
    if shutil.which("java") is None:
        pytest.skip("java is not installed: Kafka's TransactionalMessageCopier cannot run")
    kafka_tools.fetch()
    started = time.monotonic()
    cluster = cluster_factory(3, settings=CLUSTER_SETTINGS)
    create_topics(cluster, {INPUT: INPUT_PARTITIONS, OUTPUT: OUTPUT_PARTITIONS})
    _seed(cluster)
    concurrent = TopicReader(cluster.bootstrap, OUTPUT, OUTPUT_PARTITIONS, isolation="read_committed")
    copiers = Copiers(cluster, tmp_path)  # bootstrap: all three brokers, the copiers outlive any one of them
    kills: list[dict] = []
    schedule = _schedule()
    try:
        for k, target in enumerate(schedule):
            # Kill mid-copy: wait until the copiers passed the next share of the work.
            share = RECORDS * (k + 1) // (len(schedule) + 2)
            wait_until(f"{share} records copied", lambda s=share: copiers.copied >= s or copiers.failed(),
                       timeout=120, detail=copiers.describe)
            assert not copiers.failed(), copiers.describe()
            at = copiers.copied
            rounds = sum(1 for e in kills if e["target"] == target)  # earlier kills of this kind
            if target == "copier":
                partition = rounds % INPUT_PARTITIONS
                copiers.restart(partition)
                kills.append({"target": target, "at_copied": at, "copier": partition})
                continue
            if target in ("coordinator", "paused coordinator"):  # the transaction coordinator of a copier
                victim = coordinator_of(cluster, copiers.all[rounds % INPUT_PARTITIONS].transactional_id)
            elif target == "output leader":  # of an output partition a copier writes (output = input partition)
                victim = int(cluster.topic(OUTPUT)["partitions"][rounds % INPUT_PARTITIONS]["leader"])
            else:  # the group coordinator: the copiers' offsets are committed through their transactions
                victim = group_coordinator_of(cluster, GROUP)
            assert victim >= 0
            kills.append({"target": target, "at_copied": at,
                          **_kill_and_restart(cluster, victim, copiers, pause=target.startswith("paused"))})
        wait_until("every copier to finish", lambda: copiers.done() or copiers.failed(), timeout=180, interval=0.2,
                   detail=copiers.describe)
        assert copiers.done(), copiers.describe()
    finally:
        copiers.kill()
    copied_at = time.monotonic()
    during = concurrent.finish(expect_at_least=RECORDS, timeout=90)
    for b in cluster.brokers:  # kept for the post-mortem of any run (the test's summary line names the kills)
        (cluster.root / f"broker-{b.broker_id}.log").write_text(b.log_text())
    committed = read_topic(cluster.bootstrap, OUTPUT, OUTPUT_PARTITIONS, isolation="read_committed",
                           expect_at_least=RECORDS, timeout=90)
    uncommitted = read_topic(cluster.bootstrap, OUTPUT, OUTPUT_PARTITIONS, isolation="read_uncommitted",
                             expect_at_least=RECORDS, timeout=90)
    expected = {str(i).encode() for i in range(RECORDS)}
    counts, concurrent_counts = Counter(committed), Counter(during)
    print(f"\nexactly-once system test: {RECORDS} records, transaction size {TRANSACTION_SIZE}, random aborts "
          f"{RANDOM_ABORTS}, kills {kills}; "
          f"copy {copied_at - started:.1f}s (cluster start included), total {time.monotonic() - started:.1f}s; "
          f"read_committed {len(committed)} values (concurrently {len(during)}), "
          f"read_uncommitted {len(uncommitted)} values "
          f"({len(uncommitted) - len(set(uncommitted))} aborted duplicates)")
    # Kafka's own admin tool sees each copier's id once, at its coordinator, with a producer id of its own
    # (ids come from per-broker blocks: the coordinators of the two ids may differ and moved during the kills).
    listed = {r["TransactionalId"]: r for r in list_transactions(cluster.bootstrap)}
    copier_ids = [f"copier-{p}" for p in range(INPUT_PARTITIONS)]
    print("kafka-transactions list: " + "; ".join(f"{t} {r['ProducerId']}@{r['Coordinator']} {r['TransactionState']}"
                                                 for t, r in sorted(listed.items())))
    assert all(tid in listed for tid in copier_ids), listed
    assert len({listed[tid]["ProducerId"] for tid in copier_ids}) == INPUT_PARTITIONS, listed
    for tid in copier_ids:
        assert int(listed[tid]["Coordinator"]) == coordinator_of(cluster, tid), listed
        assert listed[tid]["TransactionState"] in ("CompleteCommit", "CompleteAbort", "Empty"), listed
    for name, seen in (("read_committed", counts), ("concurrent read_committed", concurrent_counts)):
        missing = expected - seen.keys()
        duplicates = {v: n for v, n in seen.items() if n > 1}
        unknown = seen.keys() - expected
        assert not missing, f"{name}: {len(missing)} input values lost, e.g. {sorted(missing)[:10]}"
        assert not duplicates, f"{name}: {len(duplicates)} values seen more than once, e.g. " \
                               f"{list(duplicates.items())[:10]}"
        assert not unknown, f"{name}: values never produced: {sorted(unknown)[:10]}"
    assert [k["target"] for k in kills] == schedule
