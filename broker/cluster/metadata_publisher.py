"""Delivering the metadata log from the controller to every live broker, in order, one worker per broker.

Why: a broker must apply the controller's entries in offset order, and a
slow or paused broker must delay only itself. Each broker has one worker
that knows the broker's applied offset (every answer carries it) and sends
what follows it: the retained entries after that offset, or — when the
broker is further behind than the controller keeps entries for — a snapshot
of the current image. Because the broker applies only the entry that follows
its offset and ignores older ones, a push that arrives late, twice, or after
a newer one changes nothing: ordering holds by construction, not by timing.

A worker stops the moment its controller is no longer active (`is_active`),
and a broker's answer that it has seen a newer controller epoch deposes the
controller (`on_stale`). A broker that answers an offset past the end of the
controller's log, or refuses a delivery as another history than the one it
applied (`HistoryDiverged`), stops the controller too (`on_history`): its log
went back in time, and acting on it would answer success for changes no
broker applies. Failed sends back off (bounded) and retry; nothing
is ever dropped, because what to send is recomputed from the applied offset.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Awaitable, Callable

from ..metadata.image import MetadataImage, snapshot_to_json
from ..metadata.model import BrokerEndpoint, BrokerEndpointJson
from ..metadata.records import MetadataEntry, MetadataPush
from .metadata_log import entry_size

__all__ = ["MetadataPublisher", "StaleEpoch", "HistoryDiverged", "MAX_ENTRIES_PER_PUSH"]

log = logging.getLogger("kelp.broker.controller")

MAX_ENTRIES_PER_PUSH = 256
BACKOFF_S = (0.05, 1.0)
UNKNOWN = -2  # the broker's applied offset before its first answer

Send = Callable[[BrokerEndpoint, MetadataPush], Awaitable[int]]
"""Delivers one push to a broker; returns the offset it has applied (raises StaleEpoch if it saw a newer one)."""


class StaleEpoch(Exception):
    """A broker answered that it has seen a newer controller epoch: the sender is deposed."""


class HistoryDiverged(Exception):
    """A broker refused the delivery: its entries do not extend the history it applied."""


class MetadataPublisher:
    def __init__(self, *, controller_id: int, send: Send, image: Callable[[], MetadataImage],
                 is_active: Callable[[], bool], on_stale: Callable[[str], None],
                 on_history: Callable[[str], None] | None = None) -> None:
        self.controller_id = controller_id
        self._send = send
        self._image = image
        self._is_active = is_active
        self._on_stale = on_stale
        self._on_history = on_history or on_stale
        self._retained: deque[MetadataEntry] = deque()   # entries after the newest snapshot, oldest first
        self._brokers: dict[int, BrokerEndpoint] = {}
        self._workers: dict[int, asyncio.Task[None]] = {}
        self._wake: dict[int, asyncio.Event] = {}
        self.applied: dict[int, int] = {}       # broker -> offset it confirmed
        self._brokers_sent: dict[int, tuple[int, ...]] = {}  # broker -> the live broker ids it was last told

    # -- what to send ----------------------------------------------------------------
    def retain(self, entry: MetadataEntry) -> None:
        self._retained.append(entry)
        self._wake_all()

    def trim(self, snapshot_offset: int) -> None:
        """Entries at or below a durable snapshot need not be kept: a broker that far behind gets the snapshot."""
        while self._retained and int(self._retained[0]["offset"]) <= snapshot_offset:
            self._retained.popleft()

    def retained_bytes(self) -> int:
        return sum(entry_size(e) for e in self._retained)

    def set_brokers(self, brokers: dict[int, BrokerEndpoint]) -> None:
        """The live brokers: a worker each; every broker hears of a change in the list."""
        self._brokers = dict(brokers)
        for b in list(self._workers):
            if b not in brokers:
                self._workers.pop(b).cancel()
                self._wake.pop(b, None)
                self.applied.pop(b, None)
        for b in brokers:
            if b not in self._workers:
                self._wake[b] = asyncio.Event()
                self._workers[b] = asyncio.create_task(self._run(b), name=f"metadata-push-{b}")
        self._wake_all()

    def _wake_all(self) -> None:
        for ev in self._wake.values():
            ev.set()

    def _brokers_json(self) -> list[BrokerEndpointJson]:
        return [b.to_json() for b in sorted(self._brokers.values(), key=lambda b: b.id)]

    def _payload(self, applied: int) -> MetadataPush:
        image = self._image()
        payload: MetadataPush = {"controller_id": self.controller_id, "controller_epoch": image.epoch,
                                 "brokers": self._brokers_json(), "end_offset": image.offset, "entries": []}
        if applied == UNKNOWN or applied >= image.offset:
            return payload  # no entries: a probe, or only the broker list changed
        first = int(self._retained[0]["offset"]) if self._retained else image.offset + 1
        if applied + 1 < first:
            payload["snapshot"] = snapshot_to_json(image)
            return payload
        start = applied + 1 - first
        payload["entries"] = [self._retained[i]
                              for i in range(start, min(len(self._retained), start + MAX_ENTRIES_PER_PUSH))]
        return payload

    # -- the workers -----------------------------------------------------------------
    async def _run(self, broker_id: int) -> None:
        applied = UNKNOWN
        delay = BACKOFF_S[0]
        wake = self._wake[broker_id]
        while self._is_active():
            brokers_view = tuple(sorted(self._brokers))
            image = self._image()
            if applied != UNKNOWN and applied >= image.offset and self._brokers_sent.get(broker_id) == brokers_view:
                wake.clear()
                try:
                    await asyncio.wait_for(wake.wait(), 5.0)
                except asyncio.TimeoutError:
                    pass
                continue
            ep = self._brokers.get(broker_id)
            if ep is None:
                return
            payload = self._payload(applied)
            try:
                applied = await self._send(ep, payload)
                self.applied[broker_id] = applied
                self._brokers_sent[broker_id] = brokers_view
                delay = BACKOFF_S[0]
            except asyncio.CancelledError:
                raise
            except StaleEpoch as exc:
                self._on_stale(f"broker {broker_id}: {exc}")
                return
            except HistoryDiverged as exc:
                self._on_history(f"broker {broker_id} refused the delivery: {exc}")
                return
            except Exception as exc:
                if delay == BACKOFF_S[0]:
                    log.warning("metadata push to broker %d failed (%s); retrying from its applied offset",
                                broker_id, exc or type(exc).__name__)
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_S[1])
                continue
            end = self._image().offset
            if applied > end and self._is_active():
                self._on_history(f"broker {broker_id} applied metadata offset {applied}, past the end of this "
                                 f"controller's log ({end})")
                return

    async def stop(self) -> None:
        tasks = list(self._workers.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._workers.clear()
        self._wake.clear()
