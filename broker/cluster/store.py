"""The metadata store: where the controller's decisions live, with optimistic concurrency.

Why: topics, configs, replica assignment, leaders, ISR and epochs must
survive every broker; only the controller writes them (each write carries
the version it read, so a deposed controller's stale write fails with
`StoreConflict`), brokers read them when they start. Sharded — one document
per topic plus one for the cluster (the producer-id block counter) — so no
object grows with the cluster. Two backends: `FileMetadataStore` (JSON files
under `<cluster.dir>/metadata`, fsynced and atomically replaced, CAS under
flock with a bounded wait) and `kube_store.KubeMetadataStore` (ConfigMaps). I/O runs in worker
threads.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass


class StoreConflict(Exception):
    """The document changed (or appeared, or vanished) since the version the writer read."""


class StoreUnreadable(Exception):
    """A document exists but cannot be read (I/O error, not JSON): never to be taken for an absent one."""


@dataclass(frozen=True, slots=True)
class Versioned:
    doc: dict
    version: str


class MetadataStore(abc.ABC):
    @abc.abstractmethod
    async def load(self) -> tuple[Versioned | StoreUnreadable | None, dict[str, Versioned]]:
        """The cluster record (None if there is none yet, `StoreUnreadable` if it cannot be read) and the topics."""

    @abc.abstractmethod
    async def get_topic(self, name: str) -> Versioned | None: ...

    @abc.abstractmethod
    async def put_topic(self, name: str, doc: dict, *, expected_version: str | None) -> str: ...

    @abc.abstractmethod
    async def delete_topic(self, name: str, *, expected_version: str) -> None: ...

    @abc.abstractmethod
    async def put_cluster(self, doc: dict, *, expected_version: str | None) -> str: ...

    @abc.abstractmethod
    async def close(self) -> None: ...


import asyncio as _asyncio
import json as _json
import os as _os
import threading as _threading
from pathlib import Path as _Path

from .file_lock import exclusive


class FileMetadataStore(MetadataStore):
    def __init__(self, directory) -> None:
        self.dir = _Path(directory) / "metadata"
        (self.dir / "topics").mkdir(parents=True, exist_ok=True)

    def _p(self, name: str | None) -> _Path:
        return self.dir / "cluster.json" if name is None else self.dir / "topics" / f"{name}.json"

    def _read(self, p):
        try:
            d = _json.loads(p.read_text())
        except (OSError, ValueError):
            return None
        return Versioned(d["doc"], str(d["version"]))

    def _read_cluster(self):
        """The cluster record; unlike a topic's, an unreadable one is reported, not taken for a missing one."""
        p = self._p(None)
        try:
            d = _json.loads(p.read_text())
            return Versioned(d["doc"], str(d["version"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return StoreUnreadable(f"the cluster record {p} cannot be read ({exc})")

    def _cas(self, name, doc, expected):
        """Compare-and-swap one document. The new version is written and fsynced to a private file
        first; only the read-compare-rename runs under the lock (bounded wait, `file_lock`)."""
        p = self._p(name)
        if doc is None:
            with exclusive(self.dir / ".lock"):
                cur = self._read(p)
                if (cur.version if cur else None) != expected:
                    raise StoreConflict(f"{name}: expected {expected}, found {cur.version if cur else None}")
                p.unlink()
            self._fsync_dir(p.parent)
            return ""
        v = int(expected) + 1 if expected is not None else 1
        tmp = p.with_name(f"{p.name}.{_os.getpid()}.{_threading.get_ident()}.tmp")
        try:
            with open(tmp, "w") as fh:
                _json.dump({"version": v, "doc": doc}, fh)
                fh.flush()
                _os.fsync(fh.fileno())
            with exclusive(self.dir / ".lock"):
                cur = self._read(p)
                if (cur.version if cur else None) != expected:
                    raise StoreConflict(f"{name}: expected {expected}, found {cur.version if cur else None}")
                _os.replace(tmp, p)
        finally:
            tmp.unlink(missing_ok=True)
        self._fsync_dir(p.parent)
        return str(v)

    @staticmethod
    def _fsync_dir(directory) -> None:
        fd = _os.open(directory, _os.O_RDONLY)
        try:
            _os.fsync(fd)
        finally:
            _os.close(fd)

    async def load(self):
        def run():
            topics = {}
            for p in (self.dir / "topics").glob("*.json"):
                v = self._read(p)
                if v is not None:
                    topics[v.doc["name"]] = v
            return self._read_cluster(), topics
        return await _asyncio.to_thread(run)

    async def get_topic(self, name):
        return await _asyncio.to_thread(self._read, self._p(name))

    async def put_topic(self, name, doc, *, expected_version):
        return await _asyncio.to_thread(self._cas, name, doc, expected_version)

    async def delete_topic(self, name, *, expected_version):
        await _asyncio.to_thread(self._cas, name, None, expected_version)

    async def put_cluster(self, doc, *, expected_version):
        return await _asyncio.to_thread(self._cas, None, doc, expected_version)

    async def close(self):
        return None
