"""TEMPORARY interface stub (the real module comes from the store work on main)."""
from __future__ import annotations

import abc
from dataclasses import dataclass


class StoreConflict(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Versioned:
    doc: dict
    version: str


class MetadataStore(abc.ABC):
    pass


import asyncio as _asyncio
import fcntl as _fcntl
import json as _json
import os as _os
from pathlib import Path as _Path


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

    def _cas(self, name, doc, expected):
        with open(self.dir / ".lock", "a") as lock:
            _fcntl.flock(lock, _fcntl.LOCK_EX)
            p = self._p(name)
            cur = self._read(p)
            if (cur.version if cur else None) != expected:
                raise StoreConflict(f"{name}: expected {expected}, found {cur.version if cur else None}")
            if doc is None:
                p.unlink()
                return ""
            v = int(cur.version) + 1 if cur else 1
            tmp = p.with_suffix(".tmp")
            with open(tmp, "w") as fh:
                _json.dump({"version": v, "doc": doc}, fh)
                fh.flush()
                _os.fsync(fh.fileno())
            _os.replace(tmp, p)
            return str(v)

    async def load(self):
        def run():
            topics = {}
            for p in (self.dir / "topics").glob("*.json"):
                v = self._read(p)
                if v is not None:
                    topics[v.doc["name"]] = v
            return self._read(self._p(None)), topics
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
        pass
