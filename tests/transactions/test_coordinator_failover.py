"""The transaction coordinator on three Kelp brokers with confluent-kafka: failover mid-transaction, timeouts.

Why: the coordinator's own tests run it in one process; what a producer relies on is that a transaction
survives its coordinator's broker dying (SIGKILL) between produce and commit — the new leader of the id's
`__transaction_state` partition loads the Ongoing state and either completes the commit or the client
aborts and retries, never half of it — and that a producer which begins and never commits has its
transaction aborted by the coordinator after `transaction.timeout.ms`, so the partition's last stable
offset moves on and read_committed consumers see later data. Each case runs on a cluster of its own.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, Producer

from tests.support.cluster import Cluster
from tests.transactions.system_support import CLUSTER_SETTINGS, coordinator_of, pause, read_topic, resume, wait_until

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]

TOPIC = "out"
PARTITIONS = 2
TIMEOUT_S = 60


def _cluster(cluster_factory) -> Cluster:
    cluster = cluster_factory(3, settings=CLUSTER_SETTINGS)
    cluster.admin("/admin/v1/topics", "POST", {"name": TOPIC, "partitions": PARTITIONS, "replication_factor": 3,
                                               "configs": {"min.insync.replicas": "2"}})
    return cluster


def _producer(cluster: Cluster, tid: str, **extra: object) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "linger.ms": 5,
                     "transaction.timeout.ms": 30000, **extra})


def _transaction(p: Producer, values: list[bytes]) -> None:
    p.begin_transaction()
    for i, v in enumerate(values):
        p.produce(TOPIC, v, partition=i % PARTITIONS)
    assert p.flush(TIMEOUT_S) == 0


def test_coordinator_killed_before_commit_the_transaction_is_all_or_nothing(cluster_factory) -> None:
    cluster = _cluster(cluster_factory)
    tid = "failover-app"
    p = _producer(cluster, tid)
    p.init_transactions(TIMEOUT_S)
    _transaction(p, [f"first-{i}".encode() for i in range(50)])
    p.commit_transaction(TIMEOUT_S)

    values = [f"second-{i}".encode() for i in range(100)]
    _transaction(p, values)
    coordinator = coordinator_of(cluster, tid)
    cluster[coordinator].kill()
    outcome = "committed"
    try:
        p.commit_transaction(TIMEOUT_S)
    except KafkaException as exc:
        err = exc.args[0]
        assert err.txn_requires_abort() or err.retriable(), err
        outcome = f"aborted ({err.str()}) and retried"
        if err.txn_requires_abort():
            p.abort_transaction(TIMEOUT_S)
            _transaction(p, values)
        p.commit_transaction(TIMEOUT_S)
    new = coordinator_of(cluster, tid)
    assert new not in (-1, coordinator)
    print(f"\ncoordinator {coordinator} killed before commit: {outcome}; coordinator now {new}")

    # After the failover, the coordinator still serves the id: one more transaction commits.
    _transaction(p, [b"third"])
    p.commit_transaction(TIMEOUT_S)
    expected = [f"first-{i}".encode() for i in range(50)] + values + [b"third"]
    seen = read_topic(cluster.bootstrap, TOPIC, PARTITIONS, isolation="read_committed", expect_at_least=len(expected))
    assert sorted(seen) == sorted(expected)

    # The killed broker comes back as a follower of everything and serves the same committed view.
    cluster[coordinator].start()
    cluster.wait_fully_replicated(TOPIC, timeout=60)
    cluster.wait_fully_replicated("__transaction_state", timeout=60)
    again = read_topic(cluster[coordinator].bootstrap, TOPIC, PARTITIONS, isolation="read_committed",
                       expect_at_least=len(expected))
    assert sorted(again) == sorted(expected)
    p.flush(5)


def test_coordinator_killed_between_commit_and_its_markers_completes_the_commit(cluster_factory) -> None:
    """The coordinator dies right after answering EndTxn: the new one loads PrepareCommit and writes markers."""
    cluster = _cluster(cluster_factory)
    tid = "prepared-app"
    p = _producer(cluster, tid)
    p.init_transactions(TIMEOUT_S)
    values = [f"v-{i}".encode() for i in range(40)]
    _transaction(p, values)
    coordinator = coordinator_of(cluster, tid)
    p.commit_transaction(TIMEOUT_S)
    cluster[coordinator].kill()
    seen = read_topic(cluster.bootstrap, TOPIC, PARTITIONS, isolation="read_committed", expect_at_least=len(values))
    assert sorted(seen) == sorted(values)
    p2 = _producer(cluster, tid)  # a new producer of the id: the new coordinator fences p and serves p2
    p2.init_transactions(TIMEOUT_S)
    _transaction(p2, [b"after"])
    p2.commit_transaction(TIMEOUT_S)
    seen = read_topic(cluster.bootstrap, TOPIC, PARTITIONS, isolation="read_committed",
                      expect_at_least=len(values) + 1)
    assert sorted(seen) == sorted([*values, b"after"])


@pytest.mark.parametrize("kill_coordinator", [False, True], ids=["coordinator-stays", "coordinator-killed"])
def test_a_transaction_never_committed_is_aborted_after_its_timeout(cluster_factory, kill_coordinator) -> None:
    cluster = _cluster(cluster_factory)
    tid = "forgetful-app"
    hanging = _producer(cluster, tid, **{"transaction.timeout.ms": 4000})
    hanging.init_transactions(TIMEOUT_S)
    _transaction(hanging, [b"never-committed-0", b"never-committed-1"])
    began = time.monotonic()
    if kill_coordinator:  # the next coordinator loads the Ongoing transaction and times it out itself
        cluster[coordinator_of(cluster, tid)].kill()

    later = _producer(cluster, "punctual-app")
    later.init_transactions(TIMEOUT_S)
    _transaction(later, [b"later-0", b"later-1"])
    later.commit_transaction(TIMEOUT_S)

    # read_committed stops at the hanging transaction's first offset until the coordinator aborts it.
    seen = read_topic(cluster.bootstrap, TOPIC, PARTITIONS, isolation="read_committed", expect_at_least=2,
                      timeout=45)
    waited = time.monotonic() - began
    assert sorted(seen) == [b"later-0", b"later-1"], seen
    assert waited >= 3.0, f"the transaction was aborted after {waited:.1f}s, before its 4 s timeout"
    print(f"\nthe open transaction was aborted and later data visible after {waited:.1f}s "
          f"(kill_coordinator={kill_coordinator})")

    # Its producer was fenced by the abort (the epoch was bumped): committing now fails for good.
    with pytest.raises(KafkaException) as caught:
        hanging.commit_transaction(TIMEOUT_S)
    err = caught.value.args[0]
    assert err.fatal() or err.txn_requires_abort(), err
    everything = read_topic(cluster.bootstrap, TOPIC, PARTITIONS, isolation="read_uncommitted", expect_at_least=4)
    assert sorted(everything) == [b"later-0", b"later-1", b"never-committed-0", b"never-committed-1"]
    wait_until("the read_committed view to stay the same", lambda: sorted(
        read_topic(cluster.bootstrap, TOPIC, PARTITIONS, isolation="read_committed", expect_at_least=2))
        == [b"later-0", b"later-1"], timeout=30)


def test_markers_reach_the_new_leader_of_a_partition_whose_leader_stalled(cluster_factory) -> None:
    """A partition leader stalls (SIGSTOP) between produce and commit, then the coordinator dies: the next
    coordinator loads PrepareCommit and writes the marker on the partition's new leader."""
    cluster = _cluster(cluster_factory)
    tid = "stalled-leader-app"
    p = _producer(cluster, tid, **{"socket.timeout.ms": 10000})
    p.init_transactions(TIMEOUT_S)
    coordinator = coordinator_of(cluster, tid)
    partitions = cluster.topic(TOPIC)["partitions"]
    stalled = next((q["leader"] for q in partitions if q["leader"] != coordinator), None)
    if stalled is None:  # the coordinator leads both partitions: move nothing, stall the other broker leading none
        pytest.skip("the coordinator leads every partition of the topic")
    values = [f"v-{i}".encode() for i in range(20)]
    _transaction(p, values)
    pause(cluster, stalled)
    try:
        p.commit_transaction(TIMEOUT_S)
        cluster[coordinator].kill()
    finally:
        resume(cluster, stalled)
    seen = read_topic(cluster.bootstrap, TOPIC, PARTITIONS, isolation="read_committed", expect_at_least=len(values),
                      timeout=60)
    assert sorted(seen) == sorted(values)


def test_a_stalled_coordinator_that_wakes_up_cannot_undo_its_successors_work(cluster_factory) -> None:
    """The coordinator stalls (SIGSTOP) with the producer's EndTxn unanswered; the client finds the new
    coordinator and commits there; the old one wakes up later and must neither abort nor duplicate it."""
    cluster = _cluster(cluster_factory)
    tid = "zombie-coordinator-app"
    p = _producer(cluster, tid, **{"socket.timeout.ms": 8000})
    p.init_transactions(TIMEOUT_S)
    values = [f"v-{i}".encode() for i in range(20)]
    _transaction(p, values)
    coordinator = coordinator_of(cluster, tid)
    pause(cluster, coordinator)
    try:
        wait_until("a new coordinator", lambda: coordinator_of(cluster, tid) not in (-1, coordinator), timeout=30)
        try:
            p.commit_transaction(TIMEOUT_S)
        except KafkaException as exc:
            err = exc.args[0]
            assert err.txn_requires_abort() or err.retriable(), err
            if err.txn_requires_abort():
                p.abort_transaction(TIMEOUT_S)
                _transaction(p, values)
            p.commit_transaction(TIMEOUT_S)
    finally:
        resume(cluster, coordinator)
    _transaction(p, [b"after-wakeup"])
    p.commit_transaction(TIMEOUT_S)
    cluster.wait_fully_replicated("__transaction_state", timeout=60)
    seen = read_topic(cluster.bootstrap, TOPIC, PARTITIONS, isolation="read_committed",
                      expect_at_least=len(values) + 1, timeout=60)
    assert sorted(seen) == sorted([*values, b"after-wakeup"])


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_new_leader_holds_the_last_stable_offset_of_an_open_transaction(cluster_factory, commit) -> None:
    """The leader of a partition with an open transaction dies: the new leader (from its replicated producer
    state) keeps read_committed readers below the transaction — later plain records included; the old leader
    comes back (its producer state recovered after SIGKILL), leads again and holds it too; the marker reaches
    it and releases everything (an aborted transaction's records skipped)."""
    cluster = _cluster(cluster_factory)
    tid = "open-on-failover-app"
    p = _producer(cluster, tid)
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    for i in range(10):
        p.produce(TOPIC, f"txn-{i}".encode(), partition=0)
    assert p.flush(TIMEOUT_S) == 0
    leader = int(cluster.topic(TOPIC)["partitions"][0]["leader"])
    cluster[leader].kill()
    cluster.wait_for("a new leader of partition 0",
                     lambda: cluster.topic(TOPIC)["partitions"][0]["leader"] not in (-1, leader), timeout=30)
    plain = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for i in range(5):
        plain.produce(TOPIC, f"plain-{i}".encode(), partition=0)
    assert plain.flush(TIMEOUT_S) == 0

    def committed_now() -> list[bytes]:
        return read_topic(cluster.bootstrap, TOPIC, PARTITIONS, isolation="read_committed", timeout=10)

    assert committed_now() == []  # the LSO is the open transaction's first offset on the new leader
    assert len(read_topic(cluster.bootstrap, TOPIC, PARTITIONS, isolation="read_uncommitted",
                          expect_at_least=15, timeout=30)) == 15

    cluster[leader].start()
    cluster.wait_fully_replicated(TOPIC, timeout=60)
    cluster.admin("/admin/v1/partitions/elect-leaders", "POST", {"topic": TOPIC, "partitions": [0]})
    cluster.wait_for(f"broker {leader} leading partition 0 again",
                     lambda: cluster.topic(TOPIC)["partitions"][0]["leader"] == leader, timeout=30)
    assert committed_now() == []  # the restarted leader recovered the open transaction

    if commit:
        p.commit_transaction(TIMEOUT_S)
    else:
        p.abort_transaction(TIMEOUT_S)
    txn = [f"txn-{i}".encode() for i in range(10)] if commit else []
    after = read_topic(cluster.bootstrap, TOPIC, PARTITIONS, isolation="read_committed",
                       expect_at_least=len(txn) + 5)
    assert after == txn + [f"plain-{i}".encode() for i in range(5)]
