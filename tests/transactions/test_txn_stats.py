"""The coordinator's counts for /metrics (`TxnStats`) and how `ClusterCollector` exposes them.

Started when a transaction becomes Ongoing (not on each later AddPartitionsToTxn), committed/aborted when the
Complete state is written, timed out when the sweep aborts; `kelp_transactions_ongoing` counts the Ongoing
transactions of ids this coordinator owns.
"""

from __future__ import annotations

from types import SimpleNamespace

from kelp.broker.metrics import ClusterCollector
from kelp.broker.transactions.metadata import TxnState
from tests.transactions.harness import until
from tests.transactions.test_coordinator import TID, P, init, ready


def scraped(coord) -> dict[str, float]:
    class Config(dict):
        broker_id = 0
    broker = SimpleNamespace(config=Config({"min.insync.replicas": 1}), cluster=None,
                             topics=SimpleNamespace(list_topics=lambda: []), replicas=None, groups=None,
                             transactions=coord)
    return {s.name: s.value for f in ClusterCollector(lambda: broker).collect() for s in f.samples
            if s.name.startswith("kelp_transactions")}


async def test_counts_started_committed_aborted_and_timed_out() -> None:
    coord, _, _, clock = await ready()
    pid, epoch = await init(coord, timeout_ms=10000)
    assert await coord.add_partitions(TID, pid, epoch, P[:1]) == 0
    assert await coord.add_partitions(TID, pid, epoch, P) == 0  # the same transaction grows
    assert scraped(coord) == {"kelp_transactions_ongoing": 1, "kelp_transactions_started_total": 1,
                              "kelp_transactions_committed_total": 0, "kelp_transactions_aborted_total": 0,
                              "kelp_transactions_timed_out_total": 0}
    assert await coord.end_txn(TID, pid, epoch, True) == 0
    await until(lambda: coord.txns[TID].state is TxnState.COMPLETE_COMMIT)
    assert await coord.add_partitions(TID, pid, epoch, P) == 0
    assert await coord.end_txn(TID, pid, epoch, False) == 0
    await until(lambda: coord.txns[TID].state is TxnState.COMPLETE_ABORT)
    assert await coord.add_partitions(TID, pid, epoch, P) == 0
    clock.now += 10001
    assert await coord.abort_timed_out() == 1
    await until(lambda: coord.txns[TID].state is TxnState.COMPLETE_ABORT)
    stats = coord.stats
    assert (stats.started, stats.committed, stats.aborted, stats.timed_out) == (3, 1, 2, 1)
    assert scraped(coord)["kelp_transactions_ongoing"] == 0
    coord.state.on_resign(coord.state.partition_for(TID), 6)  # ids of a partition no longer led are not counted
    assert scraped(coord)["kelp_transactions_aborted_total"] == 2
