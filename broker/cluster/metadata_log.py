"""The metadata log's storage: append-only entries fenced by their offset and by the log start, plus snapshots.

Why: cluster metadata must be ordered and fenced by construction (see
`metadata.image` and docs/metadata.md). Every entry lives in its own slot,
named by its offset, and is written with *create-if-absent*: two controllers
can never both write offset N, and a deposed controller — whose idea of the
next offset was taken by its successor's `controller` record — fails its
first write (`MetadataLogConflict`) instead of overwriting anything.

Compaction deletes slots, so create-if-absent alone cannot fence a slot that
is gone: a deposed controller paused inside its append could link offset N
after its successor claimed N, snapshotted past it and compacted it away
(issue 31). The second half of the fence is the **log start**, one small
object (`log-start.json`, a ConfigMap on Kubernetes) that only grows: a
compaction raises it to the offset it is about to delete up to *before* it
deletes anything, and an append reads it *after* its create-if-absent
landed. A slot that was free because it was compacted away therefore always
reads as at or below the log start, and the append is refused (the zombie's
file is removed again; it lies below every snapshot a reader uses, so nobody
ever read it). Neither half needs a lock or a transaction across objects, so
it holds the same on a shared directory and on ConfigMaps (`kube_metadata_log`). An append also
checks that the slot before its own is still there (or compacted): a store that went back in time — restored
from an older copy, its newest entries removed — under a running controller refuses its next write instead
of taking it after a hole no reader could cross.

Two snapshots are kept (item 7): compaction keeps the newest two and every
entry after the older one, so a reader falls back to the older snapshot and
its entries when the newest cannot be read (`LoadedLog.fell_back` says why).

Reading never confuses "unreadable" with "absent": an entry or snapshot that
exists but cannot be read, or a hole between the snapshot and the newest
entry, raises `MetadataUnreadable`, and the reader stops with that error.

`FileMetadataLog` keeps `<dir>/metadata/log/<offset:020d>.json`,
`<dir>/metadata/snapshots/<offset:020d>.json` and `<dir>/metadata/log-start.json`:
each written to a private temporary file and fsynced first, then linked (an
entry: `os.link` fails if the slot exists, atomic create-if-absent) or renamed
into place, then the directory fsynced. Compactions serialise on an flock
(`file_lock`, bounded wait) so the log start only grows; appends take no lock.
All file I/O runs on the control plane's threads (`kelp.control_io`: never behind the data plane's
file work). It also reads the documents of the store
format before the log (`legacy()`, see `LegacyMetadata`), once, for the first
controller to import.
"""

from __future__ import annotations

import abc
import errno
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kelp.control_io import run_control
from kelp.json_types import JsonObject

from ..metadata.model import TopicStateJson
from ..metadata.records import (
    LegacyClusterDoc,
    MetadataEntry,
    MetadataSnapshot,
    as_entry,
    as_legacy_cluster,
    as_snapshot,
    as_topic,
)
from .file_lock import exclusive

__all__ = [
    "KEPT_SNAPSHOTS",
    "assemble",
    "compaction_start",
    "went_back",
    "MetadataLog",
    "MetadataLogConflict",
    "MetadataUnreadable",
    "FileMetadataLog",
    "LegacyMetadata",
    "LoadedLog",
]


TMP_STALE_S = 600.0  # a private temporary file older than this is a crashed writer's


class _Raced(Exception):
    """An object listed a moment ago is gone: a compaction ran during the read."""


class MetadataLogConflict(Exception):
    """The slot at this offset is taken, or lies at or below the log start: another controller wrote past it."""


class MetadataUnreadable(Exception):
    """Metadata exists but cannot be read (I/O error, damaged JSON, a hole): never to be taken for absent."""


KEPT_SNAPSHOTS = 2  # compaction keeps the newest two snapshots and every entry after the older one


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """The newest readable snapshot (or None) and every entry after it, in offset order, contiguous.

    `fell_back` names why newer snapshots were skipped (unreadable): empty when the newest was used."""

    snapshot: MetadataSnapshot | None
    entries: list[MetadataEntry]
    fell_back: tuple[str, ...] = ()

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
        """The newest readable snapshot (of the two kept) and the entries after it; raises MetadataUnreadable."""

    @abc.abstractmethod
    async def append(self, entry: MetadataEntry) -> None:
        """Write `entry` at `entry["offset"]` if that slot is free and above the log start; MetadataLogConflict
        if it is taken or was compacted away. Any other exception leaves the outcome unknown: re-read before
        trusting either answer."""

    @abc.abstractmethod
    async def read_entry(self, offset: int) -> MetadataEntry | None:
        """The entry at `offset`, None if the slot is empty; MetadataLogConflict if `offset` is at or below the log
        start (compacted: whatever a slot there holds is not in the log); raises MetadataUnreadable."""

    @abc.abstractmethod
    async def write_snapshot(self, snapshot: MetadataSnapshot) -> None:
        """Store a complete snapshot at `snapshot["offset"]` (visible only once whole)."""

    @abc.abstractmethod
    async def compact(self, snapshot_offset: int) -> int:
        """Keep the newest two snapshots at or below `snapshot_offset` (and any newer) and the entries after the
        older of those two; raise the log start to it first, then delete the rest. Returns how many entries and
        snapshots went (a snapshot counts once, however it is stored)."""

    async def legacy(self) -> LegacyMetadata | None:
        """The pre-log store's documents, if any (import once into an empty log); raises MetadataUnreadable."""
        return None

    async def close(self) -> None:
        return None


class BlockingMetadataLog(MetadataLog):
    """A backend whose I/O blocks (files, the Kubernetes client): each call runs on the control plane's threads."""

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
        return await run_control(self._load)

    async def append(self, entry: MetadataEntry) -> None:
        await run_control(self._append, entry)

    async def read_entry(self, offset: int) -> MetadataEntry | None:
        return await run_control(self._read_entry, offset)

    async def write_snapshot(self, snapshot: MetadataSnapshot) -> None:
        await run_control(self._write_snapshot, snapshot)

    async def compact(self, snapshot_offset: int) -> int:
        return await run_control(self._compact, snapshot_offset)

    async def legacy(self) -> LegacyMetadata | None:
        return await run_control(self._legacy)


def entry_size(entry: MetadataEntry) -> int:
    return len(json.dumps(entry, separators=(",", ":")))


def assemble(snapshots: list[int], read_snapshot: Callable[[int], MetadataSnapshot], entry_offsets: list[int],
             read_entry: Callable[[int], MetadataEntry], *, where: str) -> LoadedLog:
    """A log from what a store lists: the newest of the kept snapshots that can be read, then every entry after
    it, which must be contiguous. Both backends load through this one rule.

    `read_snapshot` raises MetadataUnreadable for a snapshot that exists but cannot be read (the next older one
    is tried, with its entries) and `_Raced` for one that vanished (the caller retries); `read_entry` the same.
    """
    skipped: list[str] = []
    candidates = sorted(snapshots, reverse=True)[:KEPT_SNAPSHOTS]
    for base in candidates:
        try:
            snapshot = read_snapshot(base)
        except MetadataUnreadable as exc:
            skipped.append(str(exc))
            continue
        if int(snapshot.get("offset", -2)) != base:
            skipped.append(f"the snapshot filed at offset {base} in {where} names offset {snapshot.get('offset')}")
            continue
        return LoadedLog(snapshot, _contiguous(base, entry_offsets, read_entry, where, skipped), tuple(skipped))
    if skipped:
        raise MetadataUnreadable(f"no snapshot of the metadata log in {where} can be read: {'; '.join(skipped)}")
    return LoadedLog(None, _contiguous(-1, entry_offsets, read_entry, where, skipped))


def _contiguous(base: int, offsets: list[int], read_entry: Callable[[int], MetadataEntry], where: str,
                skipped: list[str]) -> list[MetadataEntry]:
    entries: list[MetadataEntry] = []
    expected = base + 1
    for offset in sorted(o for o in offsets if o > base):  # at or below: compacted into it (or a zombie's, removed)
        if offset != expected:
            why = f" (after: {'; '.join(skipped)})" if skipped else ""
            raise MetadataUnreadable(f"the metadata log in {where} has a hole: offset {expected} is missing before "
                                     f"{offset}{why}")
        entry = read_entry(offset)
        if int(entry.get("offset", -2)) != offset:
            raise MetadataUnreadable(f"the metadata entry filed at offset {offset} in {where} holds offset "
                                     f"{entry.get('offset')}")
        entries.append(entry)
        expected += 1
    return entries


def went_back(offset: int, where: str) -> str:
    """Why an append after a missing slot is refused: the store lost what this controller wrote."""
    return (f"metadata offset {offset - 1} is missing from the store ({where}) though the controller wrote it: the "
            "store went back in time (restored from an older copy, or its newest entries removed); nothing more is "
            "written to it")


def compaction_start(snapshots: list[int], snapshot_offset: int, current_start: int) -> int:
    """The log start after compacting for a snapshot at `snapshot_offset`: the older of the two newest snapshots
    at or below it (entries up to there are covered twice over), never lower than the start already stored."""
    kept = sorted((o for o in snapshots if o <= snapshot_offset), reverse=True)[:KEPT_SNAPSHOTS]
    if len(kept) < KEPT_SNAPSHOTS:
        return current_start
    return max(current_start, kept[-1])


class FileMetadataLog(BlockingMetadataLog):
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.root = Path(directory) / "metadata"
        self.log_dir = self.root / "log"
        self.snap_dir = self.root / "snapshots"
        self.start_file = self.root / "log-start.json"
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
                return assemble(snaps_before, self._snapshot_at, self._list(self.log_dir), self._entry_at,
                                where=str(self.root))
            except (_Raced, MetadataUnreadable) as exc:
                if self._list(self.snap_dir) == snaps_before:
                    if isinstance(exc, MetadataUnreadable):
                        raise
                    raise MetadataUnreadable(
                        f"the metadata log in {self.root} cannot be read: an entry it lists is missing") from None
        raise MetadataUnreadable(f"the metadata log in {self.root} kept changing under 5 reads; retry")

    def _snapshot_at(self, offset: int) -> MetadataSnapshot:
        try:
            return as_snapshot(self._read_json(self.snap_dir / self._name(offset)))
        except FileNotFoundError:
            raise _Raced() from None

    def _entry_at(self, offset: int) -> MetadataEntry:
        try:
            return as_entry(self._read_json(self.log_dir / self._name(offset)))
        except FileNotFoundError:
            raise _Raced() from None

    def _list(self, directory: Path) -> list[int]:
        try:
            return self._offsets(directory)
        except OSError as exc:
            raise MetadataUnreadable(f"the metadata directory {directory} cannot be listed ({exc})") from None

    def _log_start(self) -> int:
        """The log start: every slot at or below it is compacted (or a zombie's). Before the first compaction of a
        store that has none stored (written by a version that compacted up to its newest snapshot), that snapshot."""
        try:
            doc = self._read_json(self.start_file)
        except FileNotFoundError:
            snaps = self._list(self.snap_dir)
            return snaps[-1] if snaps else -1
        try:
            return int(str(doc["offset"]))
        except (KeyError, ValueError):
            raise MetadataUnreadable(f"the metadata log start {self.start_file} is malformed: {doc!r}") from None

    def _write_private(self, directory: Path, doc: JsonObject | MetadataEntry | MetadataSnapshot) -> Path:
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
        offset = int(entry["offset"])
        target = self.log_dir / self._name(offset)
        tmp = self._write_private(self.log_dir, entry)
        try:
            os.link(tmp, target)  # atomic create-if-absent, and the content is complete and durable already
        except FileExistsError:
            raise MetadataLogConflict(f"metadata offset {offset} is taken") from None
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(self.log_dir)
        # The slot was free. If a compaction freed it, the log start it raised first is at or above it.
        start = self._log_start()
        if offset <= start:
            target.unlink(missing_ok=True)  # below every snapshot a reader uses: it was never read
            _fsync_dir(self.log_dir)
            raise MetadataLogConflict(f"metadata offset {offset} is at or below the log start {start}: a newer "
                                      "controller wrote and compacted past it")
        if offset - 1 > start and not (self.log_dir / self._name(offset - 1)).exists():
            target.unlink(missing_ok=True)  # after a hole: no reader could ever read it
            _fsync_dir(self.log_dir)
            raise MetadataLogConflict(went_back(offset, str(self.log_dir)))

    def _read_entry(self, offset: int) -> MetadataEntry | None:
        start = self._log_start()
        if offset <= start:
            raise MetadataLogConflict(f"metadata offset {offset} is at or below the log start {start}")
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
        with exclusive(self.root / ".compact.lock"):  # compactions one at a time: the start only grows
            snaps = self._list(self.snap_dir)
            current = self._log_start() if self.start_file.exists() else -1
            start = compaction_start(snaps, snapshot_offset, current)
            if start > current:
                tmp = self._write_private(self.root, {"offset": start})
                try:
                    os.replace(tmp, self.start_file)
                finally:
                    tmp.unlink(missing_ok=True)
                _fsync_dir(self.root)  # durable before anything it covers is deleted
            for offset in self._offsets(self.log_dir):
                if offset <= start:
                    (self.log_dir / self._name(offset)).unlink(missing_ok=True)
                    gone += 1
            for offset in snaps:
                if offset < start:
                    (self.snap_dir / self._name(offset)).unlink(missing_ok=True)
                    gone += 1
        stale = time.time() - TMP_STALE_S  # a crash between write and link leaves these; fresh ones are in flight
        for d in (self.log_dir, self.snap_dir, self.root):
            for p in d.glob(".*.tmp"):
                try:
                    if p.stat().st_mtime < stale:
                        p.unlink(missing_ok=True)
                except FileNotFoundError:
                    pass
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
