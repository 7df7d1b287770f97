"""What the transaction coordinator has done since the broker started, for `/metrics`.

Why: operators watch transaction throughput and trouble (aborts, transactions the coordinator had to time
out) per broker. The coordinator counts here, as plain integers on the event loop; the metrics collector
(`kelp.broker.metrics_cluster.ClusterCollector`) reads them at scrape time as Prometheus counters, so this package
needs no metrics library and a coordinator in a unit test counts without a registry.

This module must never hold anything but counts.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TxnStats"]


@dataclass
class TxnStats:
    started: int = 0            # transactions that became Ongoing (their first AddPartitionsToTxn/AddOffsetsToTxn)
    committed: int = 0          # CompleteCommit written
    aborted: int = 0            # CompleteAbort written (by EndTxn, a fenced producer or a timeout)
    timed_out: int = 0          # aborts the timeout sweep started
