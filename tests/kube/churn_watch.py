"""What the churn cases of issue 32 watch while the operator rolls or drains: its own restarts and the ISRs.

Why this exists: "nothing acknowledged was lost" is the churn suite's verdict, but the roll's rules
(KafkaRoller's) promise more, which records alone do not show: the operator never deletes a broker
pod while another broker pod is not Ready, terminating or missing (one broker down at a time; a
readiness blip is waited for), and no restart takes a partition below min.insync.replicas (a
partition already below it at the start is not counted against the roll). `RollWatch` samples
both from outside — the pods every 0.25 s, every partition's ISR through the admin API every
second — and says what it saw. A pod counts as down for a deletion only once it has been down for
`DOWN_GRACE_S`: the operator decides on the pods it read at the start of its pass, a moment before
it deletes, and a pod that went down in that moment is not a decision it made.

What it must never do: decide by itself (the case asserts on `violations()`), or run unbounded
(`stop()` joins it; every API call has a timeout).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["RollWatch", "PodDeletion", "DOWN_GRACE_S"]

DOWN_GRACE_S = 5.0


@dataclass(frozen=True)
class PodDeletion:
    """A broker pod the operator deleted, and the other broker pods that were down at that moment."""

    pod: str
    at: float  # monotonic
    others_down: tuple[str, ...]


@dataclass
class RollWatch:
    """Samples pods and ISRs in a thread until `stop()`; `deletions`, `isr_below` are what it saw."""

    pods: Callable[[], dict[str, Any]]  # name -> V1Pod (ChurnEnv.pods)
    topics: Callable[[], list[dict]]  # every topic described (ChurnEnv.topics)
    expected: Callable[[], int]  # how many broker pods the StatefulSet wants now
    min_isr: int = 2
    exempt: set[str] = field(default_factory=set)  # pods the case itself takes down (a freeze, a kill)
    deletions: list[PodDeletion] = field(default_factory=list)
    isr_below: list[str] = field(default_factory=list)
    samples: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._seen: set[str] = set()
        self._down_since: dict[str, float] = {}
        self._below_at_start: set[str] | None = None
        self._threads = [threading.Thread(target=self._pods_loop, daemon=True, name="roll-watch-pods"),
                         threading.Thread(target=self._isr_loop, daemon=True, name="roll-watch-isr")]
        for t in self._threads:
            t.start()

    def _pods_loop(self) -> None:
        from tests.kube.churn_env import CLUSTER, _pod_ready

        while not self._stop.wait(0.25):
            try:
                pods, want = self.pods(), self.expected()
            except Exception:  # an API hiccup: the next sample
                continue
            self.samples += 1
            down = {f"{CLUSTER}-{i}" for i in range(want) if f"{CLUSTER}-{i}" not in pods}
            down |= {n for n, p in pods.items() if p.metadata.deletion_timestamp is not None or not _pod_ready(p)}
            now = time.monotonic()
            for name, p in pods.items():
                uid = p.metadata.uid
                if p.metadata.deletion_timestamp is not None and uid not in self._seen:
                    self._seen.add(uid)
                    others = tuple(sorted(n for n, since in self._down_since.items()
                                          if n != name and now - since >= DOWN_GRACE_S))
                    self.deletions.append(PodDeletion(name, now, others))
            self._down_since = {n: self._down_since.get(n, now) for n in down}

    def _isr_loop(self) -> None:
        while not self._stop.wait(1.0):
            try:
                described = self.topics()
            except Exception:  # no broker answered this time
                continue
            below = {f"{t['name']}-{p['partition']} ISR {p['isr']} of {p['replicas']}"
                     for t in described for p in t["partitions"]
                     if len(p["replicas"]) > self.min_isr and len(p["isr"]) < self.min_isr}
            keys = {b.split(" ", 1)[0] for b in below}
            if self._below_at_start is None:
                self._below_at_start = keys
            # When it was seen (wall clock, to match the operator's log lines), for a failure to be read against
            # the roll's decisions.
            stamp = time.strftime("%H:%M:%S", time.gmtime())
            self.isr_below.extend(f"{b} at {stamp}" for b in sorted(below)
                                  if b.split(" ", 1)[0] not in self._below_at_start)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)

    def violations(self) -> list[str]:
        """Pods deleted while another (not exempt) pod was down, and partitions seen below min.insync."""
        out = [f"{d.pod} deleted while {', '.join(d.others_down)} was down" for d in self.deletions
               if set(d.others_down) - self.exempt]
        first: dict[str, str] = {}  # each partition's first sighting below (its ISR then, and when)
        for b in self.isr_below:
            first.setdefault(b.split(" ", 1)[0], b)
        out += [f"below min.insync.replicas {self.min_isr}: {b}" for b in first.values()]
        return out

    def deleted(self) -> list[str]:
        return [d.pod for d in self.deletions]
