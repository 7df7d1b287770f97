"""Leases: broker liveness and controller election, one interface, its backends elsewhere.

Why: a broker proves it is alive by renewing its own lease
(`kelp-<cluster>-broker-<id>`, the counterpart of ZooKeeper's ephemeral
`/brokers/ids/N`, its endpoints in the annotations); brokers compete for
`kelp-<cluster>-controller`, and the holder is the controller; the operator's
replicas compete for `kelp-operator` the same way. A lease decides who *may*
act; it fences nothing by itself (a paused holder wakes up believing it still
holds it): the controller epoch lives in the metadata log, whose
create-if-absent appends fence a deposed controller (`metadata_log`).

It lives in `kelp`, beside neither the broker nor the operator, because both
elect through it: the model and the election are pure of any backend, and
import nothing of the broker or the operator (tests/layout).

- `LeaseRecord`: what a backend read (holder, times in epoch ms, duration,
  transitions, annotations, an opaque `version` used as write precondition).
- `LeaseBackend`: get / list(prefix) / create (LeaseConflict if it exists) /
  update (LeaseConflict unless `version` is current) / delete / close; a
  lease that exists but cannot be read raises `LeaseUnreadable` (never read
  as absent, so never overwritten as if new). `scan(prefix)` is `list` with
  a verdict per lease: the readable ones, and the names of the unreadable
  ones with why — one damaged broker lease must fence that broker, not
  blind the controller to every other (issue 31 item 5). Two
  implementations: `kelp.broker.cluster.file_leases.FileLeaseBackend` (JSON
  files in a shared directory, compare-and-swap under flock, atomically
  replaced, fsynced) and `kelp.kube.leases.KubeLeaseBackend`
  (coordination.k8s.io/v1 Lease objects).
- `LeaseElector`: client-go's tryAcquireOrRenew with *observed-time* expiry:
  another holder's lease counts as expired only when this process has seen
  it unchanged for its whole duration on its own monotonic clock, so clock
  skew between machines never makes two holders. A holder the caller says it
  may replace (`may_take_over`) is replaced at once.
- `LivenessView`: the same observed-time judgement over many leases (the
  controller watching broker leases).

Times (`kelp.clock`): what a lease stores is wall-clock milliseconds
(`clock_ms`); whether it expired is judged on this process's monotonic
clock (`monotonic`). Both are injectable. Backends run their file and
network I/O on the control plane's threads (`kelp.control_io`), never on the event loop
nor behind the data plane's file work.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping

from kelp import clock
from kelp.clock import Monotonic, WallClockMs


class LeaseConflict(Exception):
    """The lease exists already (create) or changed since it was read (update)."""


class LeaseUnreadable(Exception):
    """A lease exists but cannot be read: never taken for an absent one (it would be overwritten)."""


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    name: str
    holder: str | None
    acquire_time_ms: int
    renew_time_ms: int
    duration_ms: int
    transitions: int
    annotations: Mapping[str, str] = field(default_factory=dict)
    version: str = ""


LeaseScan = tuple[list[LeaseRecord], dict[str, str]]
"""What `LeaseBackend.scan` finds: the leases that can be read, and name -> why for those that cannot."""


class LeaseBackend(abc.ABC):
    @abc.abstractmethod
    async def get(self, name: str) -> LeaseRecord | None: ...

    @abc.abstractmethod
    async def list(self, prefix: str) -> list[LeaseRecord]: ...

    @abc.abstractmethod
    async def scan(self, prefix: str) -> LeaseScan:
        """The leases named `prefix`*: those that can be read, and name -> why for those that exist but cannot."""

    @abc.abstractmethod
    async def create(self, record: LeaseRecord) -> LeaseRecord: ...

    @abc.abstractmethod
    async def update(self, record: LeaseRecord) -> LeaseRecord: ...

    @abc.abstractmethod
    async def delete(self, name: str) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...


LeaseKey = tuple[str | None, int, int, str]


def _key(r: LeaseRecord) -> LeaseKey:
    """What must change for a lease to count as renewed."""
    return (r.holder, r.renew_time_ms, r.transitions, r.version)


class LeaseElector:
    """Acquire or renew one lease for `identity` (one round per call; the caller loops)."""

    def __init__(self, backend: LeaseBackend, *, name: str, identity: str, duration_ms: int,
                 clock_ms: WallClockMs = clock.wall_clock_ms, monotonic: Monotonic = clock.monotonic,
                 may_take_over: Callable[[str], bool] = lambda holder: False) -> None:
        self.backend, self.name, self.identity, self.duration_ms = backend, name, identity, duration_ms
        self.clock_ms, self.monotonic, self.may_take_over = clock_ms, monotonic, may_take_over
        self.record: LeaseRecord | None = None
        self._observed: LeaseKey | None = None
        self._observed_at = 0.0

    @property
    def held(self) -> bool:
        return self.record is not None and self.record.holder == self.identity

    async def try_acquire_or_renew(self, annotations: Mapping[str, str] | None = None) -> LeaseRecord | None:
        now = self.clock_ms()
        cur = await self.backend.get(self.name)
        ann = dict(annotations or {})
        if cur is None:
            try:
                self.record = await self.backend.create(LeaseRecord(self.name, self.identity, now, now,
                                                                    self.duration_ms, 0, ann))
                return self.record
            except LeaseConflict:
                return None
        if _key(cur) != self._observed:
            self._observed, self._observed_at = _key(cur), self.monotonic()
        self.record = cur
        if cur.holder == self.identity:
            new = replace(cur, renew_time_ms=now, annotations=ann or cur.annotations, duration_ms=self.duration_ms)
        else:
            expired = self.monotonic() - self._observed_at >= cur.duration_ms / 1000.0
            if cur.holder is not None and not expired and not self.may_take_over(cur.holder):
                return None
            new = replace(cur, holder=self.identity, acquire_time_ms=now, renew_time_ms=now,
                          transitions=cur.transitions + 1, annotations=ann, duration_ms=self.duration_ms)
        try:
            self.record = await self.backend.update(new)
            return self.record
        except LeaseConflict:
            return None

    async def release(self) -> None:
        record = self.record
        if record is None or not self.held:
            return
        try:
            self.record = await self.backend.update(replace(record, holder=None, renew_time_ms=self.clock_ms()))
        except LeaseConflict:
            pass


class LivenessView:
    """Observed-time liveness of many leases: alive while the record changed within its duration."""

    def __init__(self, *, monotonic: Monotonic = clock.monotonic) -> None:
        self.monotonic = monotonic
        self._seen: dict[str, tuple[LeaseKey, float, LeaseRecord]] = {}

    def observe(self, records: Iterable[LeaseRecord]) -> None:
        now = self.monotonic()
        for r in records:
            prev = self._seen.get(r.name)
            if prev is None or prev[0] != _key(r):
                self._seen[r.name] = (_key(r), now, r)

    def alive(self, name: str) -> bool:
        e = self._seen.get(name)
        if e is None or e[2].holder is None:
            return False
        return self.monotonic() - e[1] < e[2].duration_ms / 1000.0

    def alive_names(self) -> set[str]:
        return {n for n in self._seen if self.alive(n)}
