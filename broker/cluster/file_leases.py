"""Leases as JSON files in a shared directory: the file backend of `kelp.leases.LeaseBackend`.

Why: brokers on one machine (`make run`, the test clusters) elect their
controller and prove their liveness without Kubernetes: each lease is one
JSON file under `<dir>/leases`, written by compare-and-swap under an flock
(`file_lock`) and atomically renamed into place. The file backend fsyncs
each lease before renaming it into place (outside the lock): a lease emptied
by a power loss would be unreadable for good. File I/O runs on the
control plane's threads (`kelp.control_io`), never on the event loop nor
behind the data plane's file work. (Its Kubernetes counterpart,
`kelp.kube.leases.KubeLeaseBackend`, is shared with the operator; this one
is the broker's alone.)
"""
from __future__ import annotations

import json
import os
import threading
import uuid
from dataclasses import replace
from pathlib import Path

from kelp.control_io import run_control
from kelp.leases import LeaseBackend, LeaseConflict, LeaseRecord, LeaseScan, LeaseUnreadable

from .file_lock import exclusive

__all__ = ["FileLeaseBackend"]


class FileLeaseBackend(LeaseBackend):
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory) / "leases"
        self.dir.mkdir(parents=True, exist_ok=True)

    def _path(self, name: str) -> Path:
        return self.dir / f"{name}.json"

    def _read(self, p: Path) -> LeaseRecord | None:
        """The lease, None if it does not exist; LeaseUnreadable if it exists but cannot be read."""
        try:
            d = json.loads(p.read_text())
            return LeaseRecord(d["name"], d["holder"], int(d["acquire"]), int(d["renew"]), int(d["duration"]),
                               int(d["transitions"]), dict(d.get("annotations", {})), str(d["version"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise LeaseUnreadable(f"lease file {p} cannot be read ({exc!r}); repair or remove it") from None

    def _prepare(self, r: LeaseRecord, version: str) -> Path:
        """The lease as it will be, in a private temporary file, fsynced — before the lock is taken.

        A lease is soft state, but one renamed into place empty by a power loss is unreadable, and unreadable is
        never taken for absent: that broker could never renew it again. (The rename itself may be lost: the
        previous lease is as good.) One small fsync per renewal, outside the lock every broker's renewals share."""
        tmp = self.dir / f".{r.name}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as fh:
            fh.write(json.dumps({"name": r.name, "holder": r.holder, "acquire": r.acquire_time_ms,
                                 "renew": r.renew_time_ms, "duration": r.duration_ms,
                                 "transitions": r.transitions, "annotations": dict(r.annotations),
                                 "version": version}))
            fh.flush()
            os.fsync(fh.fileno())
        return tmp

    def _cas(self, r: LeaseRecord, create: bool) -> LeaseRecord:
        version = uuid.uuid4().hex  # opaque, as a resourceVersion: a precondition, never compared for order
        tmp = self._prepare(r, version)
        try:
            with exclusive(self.dir / ".lock"):
                cur = self._read(self._path(r.name))
                if create:
                    if cur is not None:
                        raise LeaseConflict(r.name)
                elif cur is None or cur.version != r.version:
                    raise LeaseConflict(r.name)
                os.replace(tmp, self._path(r.name))
            return replace(r, version=version)
        finally:
            tmp.unlink(missing_ok=True)

    async def get(self, name: str) -> LeaseRecord | None:
        return await run_control(self._read, self._path(name))

    async def list(self, prefix: str) -> list[LeaseRecord]:
        def run() -> list[LeaseRecord]:
            return [r for p in sorted(self.dir.glob(f"{prefix}*.json")) if (r := self._read(p)) is not None]
        return await run_control(run)

    async def scan(self, prefix: str) -> LeaseScan:
        def run() -> LeaseScan:
            records, unreadable = [], {}
            for p in sorted(self.dir.glob(f"{prefix}*.json")):
                try:
                    r = self._read(p)
                except LeaseUnreadable as exc:
                    unreadable[p.name.removesuffix(".json")] = str(exc)
                    continue
                if r is not None:
                    records.append(r)
            return records, unreadable
        return await run_control(run)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        return await run_control(self._cas, record, True)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        return await run_control(self._cas, record, False)

    async def delete(self, name: str) -> None:
        def run() -> None:
            with exclusive(self.dir / ".lock"):
                self._path(name).unlink(missing_ok=True)
        await run_control(run)

    async def close(self) -> None:
        return None
