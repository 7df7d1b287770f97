"""Kafka Connect's exactly-once source support (KIP-618) on three Kelp brokers, through a worker SIGKILL.

Why: a Connect 4.3.1 distributed worker with `exactly.once.source.support=enabled` runs each source task's
batches as transactions (transactions v2: the epoch bumps on every commit) with the task's offsets written
in the same transaction, one right after the other — the busiest back-to-back transactional producer there
is. Against Kelp before issue 34's fix the task died after about 54 of them (its next transaction's first
batch refused INVALID_TXN_STATE: the verification guard dropped by the previous transaction's marker). Here a
FileStreamSource task copies a file of `LINES` lines, `BATCH` lines a poll (`transaction.boundary=poll`:
one transaction each, so at least `LINES / BATCH` = 600 transactions), to a 2-partition topic (RF 3, min
ISR 2); a third of the way in the worker is SIGKILLed (its open transaction left for its successor to fence)
and a new worker of the same group takes over from the offsets committed in the transactions. The task must
never be FAILED, and a read_committed reader must find every line exactly once.

Sizes are environment variables (CONNECT_EOS_LINES, CONNECT_EOS_BATCH) so a long form runs by hand.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from kelp import kafka_connect
from tests.connect.support import Worker
from tests.support.cluster import Cluster
from tests.transactions.system_support import CLUSTER_SETTINGS, TopicReader, create_topics, read_topic, wait_until

LINES = int(os.environ.get("CONNECT_EOS_LINES", "6000"))
BATCH = int(os.environ.get("CONNECT_EOS_BATCH", "10"))
TOPIC, PARTITIONS, GROUP, CONNECTOR = "eos-lines", 2, "connect-eos", "lines"

pytestmark = [pytest.mark.clients, pytest.mark.timeout(int(os.environ.get("CONNECT_EOS_TIMEOUT", "300")))]


def lines(values: list[bytes]) -> list[bytes]:
    """The real lines among `values` (not the fillers)."""
    return [v for v in values if v.startswith(b"line-")]


def _task_states(worker: Worker) -> list[str]:
    status = worker.status(CONNECTOR)
    return [t["state"] for t in (status or {}).get("tasks", [])]


def _assert_task_alive(worker: Worker) -> None:
    status = worker.status(CONNECTOR)
    for task in (status or {}).get("tasks", []):
        assert task["state"] != "FAILED", f"the source task died:\n{task.get('trace', '')[:3000]}"


def _producer_epoch(cluster: Cluster) -> int:
    """The task's transactional producer epoch (`<group>-<connector>-0`): with transactions v2 it grows by one
    per transaction (and per InitProducerId)."""
    try:
        return int(cluster.admin(f"/admin/v1/transactions/{GROUP}-{CONNECTOR}-0")["producer_epoch"])
    except AssertionError:
        return -1


def test_exactly_once_source_survives_back_to_back_transactions_and_a_worker_kill(cluster_factory,
                                                                                  tmp_path: Path) -> None:
    if shutil.which("java") is None:
        pytest.skip("java is not installed: Kafka Connect cannot run")
    kafka_connect.fetch()
    started = time.monotonic()
    cluster = cluster_factory(3, settings=CLUSTER_SETTINGS)
    create_topics(cluster, {TOPIC: PARTITIONS})
    source = tmp_path / "lines.txt"
    # FileStreamSourceTask returns at most batch.size lines a poll and reads more only while the file has more:
    # the lines left in its buffer at the end of the file wait for the file to grow (Kafka's behaviour too).
    # Filler lines after the real ones carry every real line out.
    source.write_text("".join(f"line-{i}\n" for i in range(LINES)) + "".join(f"filler-{i}\n" for i in range(300)))
    extra = {"exactly.once.source.support": "enabled", "config.storage.replication.factor": 3,
             "offset.storage.replication.factor": 3, "status.storage.replication.factor": 3}
    worker = Worker(tmp_path, cluster.bootstrap, group=GROUP, extra=extra, name="worker-1")
    replacement: Worker | None = None
    concurrent = TopicReader(cluster.bootstrap, TOPIC, PARTITIONS, isolation="read_committed")
    try:
        worker.start()
        worker.wait_ready()
        worker.rest(f"/connectors/{CONNECTOR}/config", "PUT", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "tasks.max": "1",
            "file": str(source), "topic": TOPIC, "batch.size": str(BATCH),
            "exactly.once.support": "required", "transaction.boundary": "poll"})

        def progressed(worker: Worker, epoch: int) -> bool:
            _assert_task_alive(worker)
            return _producer_epoch(cluster) >= epoch

        kill_at = LINES // BATCH // 3
        wait_until(f"{kill_at} transactions", lambda: progressed(worker, kill_at), timeout=150,
                 detail=worker.log_tail)
        assert _task_states(worker) == ["RUNNING"]
        epoch_at_kill = _producer_epoch(cluster)
        worker.kill()
        replacement = Worker(tmp_path, cluster.bootstrap, group=GROUP, extra=extra, name="worker-2")
        replacement.start()
        replacement.wait_ready()
        w = replacement

        def copied() -> bool:
            _assert_task_alive(w)
            return len(lines(concurrent.values)) >= LINES and _task_states(w) == ["RUNNING"]

        wait_until(f"{LINES} lines under read_committed", copied, timeout=200,
                 detail=lambda: f"(read {len(lines(concurrent.values))}, task {_task_states(w)}, producer epoch "
                                f"{_producer_epoch(cluster)}) {w.log_tail()}")
        _assert_task_alive(replacement)
        final_epoch = _producer_epoch(cluster)
    finally:
        for w in (worker, replacement):
            if w is not None:
                w.kill()
        for b in cluster.brokers:  # kept for the post-mortem (the worker logs are in tmp_path too)
            (tmp_path / f"broker-{b.broker_id}.log").write_text(b.log_text())
    during = concurrent.finish(expect_at_least=LINES, timeout=60)
    everything = read_topic(cluster.bootstrap, TOPIC, PARTITIONS, isolation="read_committed", expect_at_least=LINES,
                            timeout=90)
    fillers = Counter(v for v in everything if v.startswith(b"filler-"))
    assert all(n == 1 for n in fillers.values()), f"filler lines twice: {[v for v, n in fillers.items() if n > 1]}"
    values, during = lines(everything), lines(during)
    print(f"\nconnect exactly-once: {LINES} lines, {BATCH} a transaction; worker SIGKILLed at producer epoch "
          f"{epoch_at_kill}, final epoch {final_epoch}; {time.monotonic() - started:.1f}s (cluster start "
          f"included); read_committed {len(values)} values (concurrently {len(during)})")
    assert final_epoch >= LINES // BATCH, "fewer transactions than polls: the test did not run them back to back"
    expected = {f"line-{i}".encode() for i in range(LINES)}
    for name, seen in (("read_committed", Counter(values)), ("concurrent read_committed", Counter(during))):
        missing = expected - seen.keys()
        duplicates = {v: n for v, n in seen.items() if n > 1}
        assert not missing, f"{name}: {len(missing)} lines lost, e.g. {sorted(missing)[:10]}"
        assert not duplicates, f"{name}: {len(duplicates)} lines twice, e.g. {list(duplicates.items())[:10]}"
        assert seen.keys() == expected, f"{name}: values never written: {sorted(seen.keys() - expected)[:10]}"
