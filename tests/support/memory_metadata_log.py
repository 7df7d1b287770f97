"""An in-memory `MetadataLog` with the same create-if-absent contract as the real ones, and fault hooks.

Why: the controller's decisions and fencing are tested without files or an
API server; `tests/cluster/contract.py` checks that this one and the real
backends keep the same contract. `fail_next_append` makes the next append
fail after (`landed=True`) or before it reached the store, as a full disk or
a timed-out API call would; `unreadable` names snapshots and entries that exist but cannot be read.
`before_append` (an async callable given the entry) runs inside an append before the slot is taken: a test
pauses a controller there, as a process stopped between its lease check and its write.
"""

from __future__ import annotations

import copy

from kelp.broker.cluster.metadata_log import (
    LegacyMetadata,
    LoadedLog,
    MetadataLog,
    MetadataLogConflict,
    MetadataUnreadable,
    assemble,
    compaction_start,
    went_back,
)


class MemoryMetadataLog(MetadataLog):
    def __init__(self) -> None:
        self.entries: dict[int, dict] = {}
        self.snapshots: dict[int, dict] = {}
        self.legacy_docs: LegacyMetadata | None = None
        self._fail: tuple[BaseException, bool] | None = None
        self.appends = 0
        self.start = -1
        self.unreadable: set[tuple[str, int]] = set()  # ("snapshot" | "entry", offset)
        self.before_append = None

    def fail_next_append(self, exc: BaseException, *, landed: bool) -> None:
        self._fail = (exc, landed)

    def _read(self, kind: str, table: dict[int, dict], offset: int) -> dict:
        if (kind, offset) in self.unreadable:
            raise MetadataUnreadable(f"{kind} at offset {offset} cannot be read (injected)")
        return copy.deepcopy(table[offset])

    async def load(self) -> LoadedLog:
        return assemble(list(self.snapshots), lambda o: self._read("snapshot", self.snapshots, o), list(self.entries),
                        lambda o: self._read("entry", self.entries, o), where="memory")

    async def append(self, entry: dict) -> None:
        offset = int(entry["offset"])
        if self.before_append is not None:
            await self.before_append(entry)
        fail, self._fail = self._fail, None
        if fail is not None and not fail[1]:
            raise fail[0]
        if offset in self.entries:
            raise MetadataLogConflict(f"metadata offset {offset} is taken")
        self.entries[offset] = copy.deepcopy(entry)
        if offset <= self.start:
            del self.entries[offset]
            raise MetadataLogConflict(f"metadata offset {offset} is at or below the log start {self.start}")
        if offset - 1 > self.start and offset - 1 not in self.entries:
            del self.entries[offset]
            raise MetadataLogConflict(went_back(offset, "memory"))
        self.appends += 1
        if fail is not None:
            raise fail[0]

    async def read_entry(self, offset: int) -> dict | None:
        if offset <= self.start:
            raise MetadataLogConflict(f"metadata offset {offset} is at or below the log start {self.start}")
        e = self.entries.get(offset)
        return copy.deepcopy(e) if e is not None else None

    async def write_snapshot(self, snapshot: dict) -> None:
        self.snapshots[int(snapshot["offset"])] = copy.deepcopy(snapshot)

    async def compact(self, snapshot_offset: int) -> int:
        self.start = compaction_start(list(self.snapshots), snapshot_offset, self.start)
        gone = [o for o in self.entries if o <= self.start]
        for o in gone:
            del self.entries[o]
        old = [o for o in self.snapshots if o < self.start]
        for o in old:
            del self.snapshots[o]
        return len(gone) + len(old)

    async def legacy(self) -> LegacyMetadata | None:
        return self.legacy_docs

    def topic(self, name: str):
        """The topic as the log says now (replayed), for assertions."""
        from kelp.broker.metadata.image import image_from_log

        base = max(self.snapshots) if self.snapshots else -1
        entries = [self.entries[o] for o in sorted(self.entries) if o > base]
        return image_from_log(self.snapshots.get(base), entries).topics.get(name)
