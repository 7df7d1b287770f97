"""The metadata log's storage: append-only entries fenced by their offset, plus snapshots.

Why: cluster metadata must be ordered and fenced by construction (see
`metadata_image` and docs/metadata.md). Every entry lives in its own slot,
named by its offset, and is written with *create-if-absent*: two controllers
can never both write offset N, and a deposed controller — whose idea of the
next offset was taken by its successor's `controller` record — fails its
first write (`MetadataLogConflict`) instead of overwriting anything. That is
the fence; it needs no multi-object transaction, so it works the same on a
shared directory and on Kubernetes ConfigMaps (`kube_metadata_log`).

A snapshot (the image at an offset) bounds what a starting broker reads;
entries at or below the newest snapshot are deleted afterwards (`compact`).
A slot below the newest snapshot is never read again, so a zombie write
there is harmless.

Reading never confuses "unreadable" with "absent": an entry or snapshot that
exists but cannot be read, or a hole between the snapshot and the newest
entry, raises `MetadataUnreadable`, and the reader stops with that error.

`FileMetadataLog` keeps `<dir>/metadata/log/<offset:020d>.json` and
`<dir>/metadata/snapshots/<offset:020d>.json`: each written to a private
temporary file and fsynced first, then linked into place (`os.link` fails
if the slot exists: atomic create-if-absent), then the directory fsynced.
All file I/O runs in worker threads. It also reads the documents of the
store format before the log (`legacy()`, see `LegacyMetadata`), once, for
the first controller to import.
"""

from __future__ import annotations

import abc
import asyncio
import errno
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from kelp.json_types import JsonObject

from .metadata_records import (
    LegacyClusterDoc,
    MetadataEntry,
    MetadataSnapshot,
    as_entry,
    as_legacy_cluster,
    as_snapshot,
    as_topic,
)
from .model import TopicStateJson

__all__ = [
    "MetadataLog",
    "MetadataLogConflict",
    "MetadataUnreadable",
    "FileMetadataLog",
    "LegacyMetadata",
    "LoadedLog",
]


class _Raced(Exception):
    """A file listed a moment ago is gone: a compaction ran during the read."""


class MetadataLogConflict(Exception):
    """The slot at this offset is taken: another controller wrote there first."""


class MetadataUnreadable(Exception):
    """Metadata exists but cannot be read (I/O error, damaged JSON, a hole): never to be taken for absent."""


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """The newest complete snapshot (or None) and every entry after it, in offset order, contiguous."""

    snapshot: MetadataSnapshot | None
    entries: list[MetadataEntry]

    @property
    def end_offset(self) -> int:
        """The offset of the last entry (or the snapshot's; -1 for an empty log)."""
        if self.entries:
            return int(self.entries[-1]["offset"])
        return int(self.snapshot["offset"]) if self.snapshot is not None else -1


@dataclass(frozen=True, slots=True)
class LegacyMetadata:
    """Documents of the sharded store that came before the log: the cluster record and one per topic."""

    cluster: LegacyClusterDoc | None
    topics: dict[str, TopicStateJson]


class MetadataLog(abc.ABC):
    @abc.abstractmethod
    async def load(self) -> LoadedLog:
        """The newest snapshot and the entries after it; raises MetadataUnreadable."""

    @abc.abstractmethod
    async def append(self, entry: MetadataEntry) -> None:
        """Write `entry` at `entry["offset"]` if that slot is free; MetadataLogConflict if it is taken.
        Any other exception leaves the outcome unknown: re-read before trusting either answer."""

    @abc.abstractmethod
    async def read_entry(self, offset: int) -> MetadataEntry | None:
        """The entry at `offset`, None if the slot is empty; raises MetadataUnreadable."""

    @abc.abstractmethod
    async def write_snapshot(self, snapshot: MetadataSnapshot) -> None:
        """Store a complete snapshot at `snapshot["offset"]` (visible only once whole)."""

    @abc.abstractmethod
    async def compact(self, snapshot_offset: int) -> int:
        """Delete entries at or below `snapshot_offset` and older snapshots; returns how many objects went."""

    async def legacy(self) -> LegacyMetadata | None:
        """The pre-log store's documents, if any (import once into an empty log); raises MetadataUnreadable."""
        return None

    async def close(self) -> None:
        return None


class BlockingMetadataLog(MetadataLog):
    """A backend whose I/O blocks (files, the Kubernetes client): each call runs in a worker thread."""

    def _load(self) -> LoadedLog:
        raise NotImplementedError

    def _append(self, entry: MetadataEntry) -> None:
        raise NotImplementedError

    def _read_entry(self, offset: int) -> MetadataEntry | None:
        raise NotImplementedError

    def _write_snapshot(self, snapshot: MetadataSnapshot) -> None:
        raise NotImplementedError

    def _compact(self, snapshot_offset: int) -> int:
        raise NotImplementedError

    def _legacy(self) -> LegacyMetadata | None:
        return None

    async def load(self) -> LoadedLog:
        return await asyncio.to_thread(self._load)

    async def append(self, entry: MetadataEntry) -> None:
        await asyncio.to_thread(self._append, entry)

    async def read_entry(self, offset: int) -> MetadataEntry | None:
        return await asyncio.to_thread(self._read_entry, offset)

    async def write_snapshot(self, snapshot: MetadataSnapshot) -> None:
        await asyncio.to_thread(self._write_snapshot, snapshot)

    async def compact(self, snapshot_offset: int) -> int:
        return await asyncio.to_thread(self._compact, snapshot_offset)

    async def legacy(self) -> LegacyMetadata | None:
        return await asyncio.to_thread(self._legacy)


def entry_size(entry: MetadataEntry) -> int:
    return len(json.dumps(entry, separators=(",", ":")))


class FileMetadataLog(BlockingMetadataLog):
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.root = Path(directory) / "metadata"
        self.log_dir = self.root / "log"
        self.snap_dir = self.root / "snapshots"
        for d in (self.log_dir, self.snap_dir):
            d.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def _name(offset: int) -> str:
        return f"{offset:020d}.json"

    @staticmethod
    def _offsets(directory: Path) -> list[int]:
        out = []
        for p in directory.iterdir():
            stem, dot, ext = p.name.partition(".")
            if ext == "json" and stem.isdigit() and len(stem) == 20:
                out.append(int(stem))
        return sorted(out)

    @staticmethod
    def _read_json(p: Path) -> JsonObject:
        try:
            doc = json.loads(p.read_bytes())
        except FileNotFoundError:
            raise
        except (OSError, ValueError) as exc:
            raise MetadataUnreadable(f"metadata file {p} cannot be read ({exc})") from None
        if not isinstance(doc, dict):
            raise MetadataUnreadable(f"metadata file {p} does not hold a JSON object")
        return doc

    def _load(self) -> LoadedLog:
        """Retried when a compaction ran meanwhile (a newer snapshot appeared, entries went): bounded."""
        for _attempt in range(5):
            snaps_before = self._list(self.snap_dir)
            try:
                return self._load_once(snaps_before)
            except (_Raced, MetadataUnreadable) as exc:
                if self._list(self.snap_dir) == snaps_before:
                    if isinstance(exc, MetadataUnreadable):
                        raise
                    raise MetadataUnreadable(
                        f"the metadata log in {self.root} cannot be read: an entry it lists is missing") from None
        raise MetadataUnreadable(f"the metadata log in {self.root} kept changing under 5 reads; retry")

    def _list(self, directory: Path) -> list[int]:
        try:
            return self._offsets(directory)
        except OSError as exc:
            raise MetadataUnreadable(f"the metadata directory {directory} cannot be listed ({exc})") from None

    def _load_once(self, snaps: list[int]) -> LoadedLog:
        offsets = self._list(self.log_dir)
        snapshot = None
        if snaps:
            try:
                snapshot = as_snapshot(self._read_json(self.snap_dir / self._name(snaps[-1])))
            except FileNotFoundError:
                raise _Raced() from None
            if int(snapshot.get("offset", -2)) != snaps[-1]:
                raise MetadataUnreadable(f"snapshot {self.snap_dir / self._name(snaps[-1])} names offset "
                                         f"{snapshot.get('offset')}")
        base = snaps[-1] if snaps else -1
        entries = []
        expected = base + 1
        for offset in offsets:
            if offset <= base:
                continue  # compacted into the snapshot (or a zombie's late write there): never read
            if offset != expected:
                raise MetadataUnreadable(
                    f"the metadata log in {self.log_dir} has a hole: offset {expected} is missing before {offset}")
            try:
                entry = as_entry(self._read_json(self.log_dir / self._name(offset)))
            except FileNotFoundError:
                raise _Raced() from None
            if int(entry.get("offset", -2)) != offset:
                raise MetadataUnreadable(f"metadata entry file {self._name(offset)} holds offset {entry.get('offset')}")
            entries.append(entry)
            expected += 1
        return LoadedLog(snapshot, entries)

    def _write_private(self, directory: Path, doc: MetadataEntry | MetadataSnapshot) -> Path:
        """The document in a private temporary file, fsynced; nothing is left behind if that fails."""
        tmp = directory / f".{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            with open(tmp, "wb") as fh:
                fh.write(json.dumps(doc, separators=(",", ":")).encode())
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    def _append(self, entry: MetadataEntry) -> None:
        target = self.log_dir / self._name(int(entry["offset"]))
        tmp = self._write_private(self.log_dir, entry)
        try:
            os.link(tmp, target)  # atomic create-if-absent, and the content is complete and durable already
        except FileExistsError:
            raise MetadataLogConflict(f"metadata offset {entry['offset']} is taken") from None
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(self.log_dir)

    def _read_entry(self, offset: int) -> MetadataEntry | None:
        try:
            return as_entry(self._read_json(self.log_dir / self._name(offset)))
        except FileNotFoundError:
            return None

    def _write_snapshot(self, snapshot: MetadataSnapshot) -> None:
        tmp = self._write_private(self.snap_dir, snapshot)
        try:
            os.replace(tmp, self.snap_dir / self._name(int(snapshot["offset"])))
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(self.snap_dir)

    def _compact(self, snapshot_offset: int) -> int:
        gone = 0
        for offset in self._offsets(self.log_dir):
            if offset <= snapshot_offset:
                (self.log_dir / self._name(offset)).unlink(missing_ok=True)
                gone += 1
        for offset in self._offsets(self.snap_dir):
            if offset < snapshot_offset:
                (self.snap_dir / self._name(offset)).unlink(missing_ok=True)
                gone += 1
        for d in (self.log_dir, self.snap_dir):
            for p in d.glob(".*.tmp"):  # a crash between write and link leaves these
                p.unlink(missing_ok=True)
        _fsync_dir(self.log_dir)
        return gone

    def _legacy(self) -> LegacyMetadata | None:
        topics_dir = self.root / "topics"
        cluster_file = self.root / "cluster.json"
        if not topics_dir.is_dir() and not cluster_file.exists():
            return None
        cluster = None
        if cluster_file.exists():
            found = self._read_json(cluster_file).get("doc")
            if found is not None and not isinstance(found, dict):
                raise MetadataUnreadable(f"legacy cluster document {cluster_file} holds no JSON object")
            cluster = as_legacy_cluster(found) if found is not None else None
        topics = {}
        if topics_dir.is_dir():
            for p in sorted(topics_dir.glob("*.json")):
                doc = self._read_json(p).get("doc")
                if not isinstance(doc, dict) or "name" not in doc:
                    raise MetadataUnreadable(f"legacy topic document {p} has no topic in it")
                topics[str(doc["name"])] = as_topic(doc)
        return LegacyMetadata(cluster, topics)



def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:  # some filesystems refuse fsync on a directory; the data files are fsynced already
        if exc.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)
