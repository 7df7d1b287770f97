"""An in-memory `MetadataLog` with the same create-if-absent contract as the real ones, and fault hooks.

Why: the controller's decisions and fencing are tested without files or an
API server; `tests/cluster/contract.py` checks that this one and the real
backends keep the same contract. `fail_next_append` makes the next append
fail after (`landed=True`) or before it reached the store, as a full disk or
a timed-out API call would.
"""

from __future__ import annotations

import copy

from kelp.broker.cluster.metadata_log import LegacyMetadata, LoadedLog, MetadataLog, MetadataLogConflict


class MemoryMetadataLog(MetadataLog):
    def __init__(self) -> None:
        self.entries: dict[int, dict] = {}
        self.snapshots: dict[int, dict] = {}
        self.legacy_docs: LegacyMetadata | None = None
        self._fail: tuple[BaseException, bool] | None = None
        self.appends = 0

    def fail_next_append(self, exc: BaseException, *, landed: bool) -> None:
        self._fail = (exc, landed)

    async def load(self) -> LoadedLog:
        base = max(self.snapshots) if self.snapshots else -1
        snap = copy.deepcopy(self.snapshots[base]) if base >= 0 else None
        out = []
        offset = base + 1
        while offset in self.entries:
            out.append(copy.deepcopy(self.entries[offset]))
            offset += 1
        return LoadedLog(snap, out)

    async def append(self, entry: dict) -> None:
        offset = int(entry["offset"])
        fail, self._fail = self._fail, None
        if fail is not None and not fail[1]:
            raise fail[0]
        if offset in self.entries:
            raise MetadataLogConflict(f"metadata offset {offset} is taken")
        self.entries[offset] = copy.deepcopy(entry)
        self.appends += 1
        if fail is not None:
            raise fail[0]

    async def read_entry(self, offset: int) -> dict | None:
        e = self.entries.get(offset)
        return copy.deepcopy(e) if e is not None else None

    async def write_snapshot(self, snapshot: dict) -> None:
        self.snapshots[int(snapshot["offset"])] = copy.deepcopy(snapshot)

    async def compact(self, snapshot_offset: int) -> int:
        gone = [o for o in self.entries if o <= snapshot_offset]
        for o in gone:
            del self.entries[o]
        old = [o for o in self.snapshots if o < snapshot_offset]
        for o in old:
            del self.snapshots[o]
        return len(gone) + len(old)

    async def legacy(self) -> LegacyMetadata | None:
        return self.legacy_docs

    def topic(self, name: str):
        """The topic as the log says now (replayed), for assertions."""
        from kelp.broker.cluster.metadata_image import image_from_log

        base = max(self.snapshots) if self.snapshots else -1
        entries = [self.entries[o] for o in sorted(self.entries) if o > base]
        return image_from_log(self.snapshots.get(base), entries).topics.get(name)
