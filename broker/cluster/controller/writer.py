"""The controller's one door to the metadata log: every entry it writes goes through `MetadataWriter`.

Why it exists: the controller's safety rests on one write path. Fencing, by construction: each
incarnation first appends a `controller` record with an epoch above every earlier one (`claim_epoch`).
A deposed controller's next append targets an offset its successor already used — taken, or compacted
away below the log start (`metadata_log`) — and fails with a conflict, so it can never write again; it
steps down (`ControllerState.deposed`), its publisher stops, and brokers refuse its pushes once they have
seen the newer epoch. The lease freshness check before each write (`check_fresh`) is only an early exit.
A write whose outcome is unknown (an I/O error, a timeout, a cancelled caller) puts the controller in
doubt: before its next write it reads that slot back and adopts the entry if it landed
(`resolve_doubt`), so nothing is applied twice or skipped. An entry is checked against the image's
invariants before it is written, applied to the image only once written, then handed to the publisher
and counted towards the next snapshot.

Every role of the controller (`topic_admin`, `broker_requests`, ...) is given this writer and the shared
state (`state`); none of them holds the log. This module never decides what to write.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Callable, Iterable

from kelp.errors import InvalidRequestError, NotControllerError, PolicyViolationError

from ...metadata.image import MetadataCorrupt, MetadataImage, apply_entry, replay, snapshot_to_json
from ...metadata.model import TopicState
from ...metadata.records import MetadataEntry, MetadataRecord, as_entry, controller_record
from ..metadata_log import LoadedLog, MetadataLog, MetadataLogConflict, MetadataUnreadable, entry_size
from ..metadata_publisher import MetadataPublisher
from .state import ControllerState

__all__ = ["MetadataWriter", "MAX_ENTRY_BYTES", "CLAIM_ATTEMPTS"]

log = logging.getLogger("kelp.broker.controller")

MAX_ENTRY_BYTES = 900 * 1024  # one entry must fit one ConfigMap on Kubernetes
CLAIM_ATTEMPTS = 10


class MetadataWriter:
    """Appends the controller's decisions to the metadata log, fenced by its epoch, and applies them once written."""

    def __init__(self, state: ControllerState, log: MetadataLog, publisher: MetadataPublisher,
                 lease_fresh: Callable[[], bool]) -> None:
        self.state = state
        self.log = log
        self.publisher = publisher
        self._lease_fresh = lease_fresh
        self.digests: dict[int, str] = {}  # offset -> digest of the entries this controller holds in memory
        self.since_snapshot = 0  # bytes of entries since the last snapshot
        self.snapshot_task: asyncio.Task[None] | None = None
        # A write whose outcome is unknown: (offset, entry). Read back before the next write.
        self.doubt: tuple[int, MetadataEntry] | None = None

    def retain(self, loaded: LoadedLog) -> None:
        """Hand the entries of a loaded log to the publisher (brokers behind are sent them)."""
        for entry in loaded.entries:
            self.publisher.retain(entry)

    async def claim_epoch(self) -> None:
        """Append this incarnation's `controller` record: the epoch that fences every earlier controller."""
        state = self.state
        for _attempt in range(CLAIM_ATTEMPTS):
            if not self._lease_fresh():
                raise NotControllerError(f"broker {state.broker_id} lost the controller lease while taking over")
            epoch = state.image.epoch + 1
            entry = self.entry(epoch, [controller_record(epoch, state.broker_id)])
            try:
                await self.log.append(entry)
            except MetadataLogConflict:
                loaded = await self.log.load()  # someone wrote meanwhile (a deposed controller's last write)
                state.image, self.digests = replay(loaded.snapshot, loaded.entries)
                self.publisher.trim(state.image.offset)
                self.retain(loaded)
                continue
            state.image, _ = apply_entry(state.image, entry)
            self.digests[state.image.offset] = state.image.digest
            state.epoch = epoch
            self.publisher.retain(entry)
            return
        raise NotControllerError(f"broker {state.broker_id} could not claim a controller epoch: the metadata log "
                                 f"kept moving under {CLAIM_ATTEMPTS} attempts")

    def check_fresh(self) -> None:
        state = self.state
        if not state.active or not self._lease_fresh():
            state.deposed("its controller lease is not fresh")
            raise NotControllerError(
                f"broker {state.broker_id} no longer holds a fresh controller lease (epoch {state.epoch}); "
                "retry against the new controller")

    async def resolve_doubt(self) -> None:
        """Read back the slot of a write whose outcome was unknown; adopt it if it landed."""
        if self.doubt is None:
            return
        offset, mine = self.doubt
        try:
            found = await self.log.read_entry(offset)
        except MetadataLogConflict as exc:  # compacted past: a newer controller wrote there and beyond
            self.doubt = None
            self.state.deposed(f"metadata offset {offset}: {exc}")
            raise NotControllerError(f"another controller wrote past metadata offset {offset}; retry against it") \
                from None
        except MetadataUnreadable as exc:
            raise NotControllerError("the metadata log cannot be read back after a failed write "
                                     f"({exc}); retry") from None
        self.doubt = None
        if found is None:
            return
        if found != mine:
            self.state.deposed(f"metadata offset {offset} holds another controller's entry")
            raise NotControllerError(f"another controller wrote metadata offset {offset}; retry against it")
        self._applied(mine)

    def _applied(self, entry: MetadataEntry) -> None:
        state = self.state
        state.image, _ = apply_entry(state.image, entry)
        self.digests[state.image.offset] = state.image.digest
        self.publisher.retain(entry)
        self.since_snapshot += entry_size(entry)
        if self.since_snapshot >= state.settings.snapshot_bytes and self.snapshot_task is None:
            self.snapshot_task = asyncio.create_task(self.snapshot(state.image), name="metadata-snapshot")

    async def append(self, records: list[MetadataRecord], *,
                     unknown_outcome: type[Exception] = NotControllerError) -> None:
        """Append one decision: one entry, or — when its records are more than one entry holds (a broker that
        led thousands of partitions died) — consecutive entries, each record whole and valid on its own.
        Raises NotControllerError when fenced, `unknown_outcome` when a write failed."""
        if not records:
            return
        chunk: list[MetadataRecord] = []
        size = 0
        for rec in records:
            n = len(json.dumps(rec, separators=(",", ":")))
            if n > MAX_ENTRY_BYTES - 200:
                raise PolicyViolationError(
                    f"the change is {n} bytes of metadata in one record, over the {MAX_ENTRY_BYTES}-byte limit of "
                    "one metadata entry (a ConfigMap on Kubernetes); create fewer partitions at once")
            if chunk and size + n > MAX_ENTRY_BYTES - 200:
                await self._append_entry(chunk, unknown_outcome)
                chunk, size = [], 0
            chunk.append(rec)
            size += n + 1
        await self._append_entry(chunk, unknown_outcome)

    async def commit(self, states: Iterable[TopicState], *,
                     unknown_outcome: type[Exception] = NotControllerError) -> None:
        """Append the records that make each topic state the current one (`ControllerState.records_for`)."""
        records: list[MetadataRecord] = []
        for topic in states:
            records += self.state.records_for(topic)
        await self.append(records, unknown_outcome=unknown_outcome)

    def entry(self, epoch: int, records: list[MetadataRecord]) -> MetadataEntry:
        """The next entry: at the offset after the image's, extending its history (`prev`, when the image knows the
        digest of its last entry). Through JSON and back: exactly what a reader decodes (a doubt compares it with
        one read back, and every broker computes its digest from the decoded form)."""
        image = self.state.image
        doc: dict[str, object] = {"offset": image.offset + 1, "epoch": epoch, "records": records}
        if image.digest:
            doc["prev"] = image.digest
        return as_entry(json.loads(json.dumps(doc)))

    async def _append_entry(self, records: list[MetadataRecord], unknown_outcome: type[Exception]) -> None:
        self.check_fresh()
        await self.resolve_doubt()
        state = self.state
        entry = self.entry(state.epoch, records)
        try:
            apply_entry(state.image, entry)  # the invariants hold before anything is written
        except MetadataCorrupt as exc:
            raise InvalidRequestError(f"refused: the change would break a metadata invariant ({exc})") from None
        try:
            await self.log.append(entry)
        except MetadataLogConflict:
            state.deposed(f"metadata offset {entry['offset']} was taken by another controller")
            raise NotControllerError(f"controller epoch {state.epoch} was superseded (metadata offset "
                                     f"{entry['offset']} is taken); retry against the new controller") from None
        except asyncio.CancelledError:
            # The caller went away; the write goes on in its worker thread and may land: read back first.
            self.doubt = (int(entry["offset"]), entry)
            raise
        except Exception as exc:
            self.doubt = (int(entry["offset"]), entry)
            log.error("writing metadata offset %d failed (%s); it is read back before the next write",
                      entry["offset"], exc)
            raise unknown_outcome(f"the metadata store write failed ({exc}); retry") from None
        self._applied(entry)

    async def snapshot(self, image: MetadataImage) -> None:
        try:
            await self.log.write_snapshot(snapshot_to_json(image))
            gone = await self.log.compact(image.offset)
            self.publisher.trim(image.offset)
            self.digests = {o: d for o, d in self.digests.items() if o >= image.offset}
            self.since_snapshot = self.publisher.retained_bytes()
            log.info("metadata snapshot at offset %d written; %d older object(s) removed", image.offset, gone)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("writing a metadata snapshot at offset %d failed (%s); the next change retries",
                        image.offset, exc)
        finally:
            self.snapshot_task = None
