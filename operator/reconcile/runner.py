"""One reconciliation per object at a time, on the freshest view, whichever path asked for it.

Why: kopf's handlers (events) and the resync loop (every
`KELP_OPERATOR_RESYNC_SECONDS`) both reconcile the same objects, and kopf
serialises only its own handlers. Two passes over one Cluster at once both
submit the same moves (the controller refuses the second: "already
moving"), both delete a pod, or write status over each other; a resync pass
acting on a body it listed before a handler applied a newer spec would go
*backwards* (a scale 3 -> 5 handled, then undone by a stale 3). So every
reconciliation goes through `Runner.reconcile`:

- one `asyncio.Lock` per object (kind, namespace, name), held for the whole
  pass including its status write;
- under the lock, the object is read again — unless the caller listed it
  after the last pass over it finished (the resync loop's list is fresh
  enough then, which spares a GET per object per pass);
- an unexpected failure sets `Ready=Unknown` (`ReconcileFailed`, with the
  error) before it propagates, so status never keeps claiming health this
  pass did not observe; `LeadershipLost` propagates untouched (this replica
  must not write at all).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Mapping, Sequence

from kelp.clock import WallClockMs, wall_clock_ms

from ..kube.client import KELP_KINDS, KubeClient
from ..kube.events import Recorder
from ..kube.leadership import LeadershipLost
from ..model.objects_kelp import Condition, KelpResource
from ..model.status import condition, merge_conditions, rfc3339
from .brokers import AdminError
from .cluster import reconcile
from .resources import AdminFactory
from .topics import TopicOwners
from .users import finalize_user

__all__ = ["Runner", "status_patch"]

log = logging.getLogger("kelp.operator")

Key = tuple[str, str, str]


def status_patch(body: KelpResource, result: tuple[Mapping[str, object], Sequence[Condition]], *,
                 clock_ms: WallClockMs = wall_clock_ms) -> dict[str, object]:
    """The status fields of a reconciliation, with conditions merged into the object's current ones."""
    fields, conds = result
    generation = int(body["metadata"].get("generation") or 0)
    status = body.get("status")
    old = status.get("conditions") if status else None
    return {**fields, "conditions": merge_conditions(old, conds, generation=generation, now=rfc3339(clock_ms()))}


class Runner:
    """`clock_ms` (wall-clock milliseconds, kelp.clock) times the passes, their Events and conditions."""

    def __init__(self, kube: KubeClient, admin_for: AdminFactory, *, clock_ms: WallClockMs = wall_clock_ms,
                 instance: str = "kelp-operator") -> None:
        self.kube = kube
        self.admin_for = admin_for
        self.clock_ms = clock_ms
        self.instance = instance
        self._locks: dict[Key, asyncio.Lock] = {}
        self._finished = 0
        self._last: dict[Key, int] = {}

    def lock(self, kind: str, namespace: str, name: str) -> asyncio.Lock:
        return self._locks.setdefault((kind, namespace, name), asyncio.Lock())

    def mark(self) -> int:
        """A point in time for `listed_after`: passes finished so far."""
        return self._finished

    async def reconcile(self, kind: str, namespace: str, name: str, *, listed: KelpResource | None = None,
                        listed_after: int = -1, owners: TopicOwners | None = None) -> bool:
        """Reconcile one object and write its status; False when it is gone or being deleted.

        `listed`/`listed_after`: a body the caller listed after `mark()` returned
        `listed_after`; used as is unless a pass over this object finished since.
        `owners`: the Topic ownership index to decide with (Topics only; else one is built).
        """
        key = (kind, namespace, name)
        body = listed
        async with self.lock(*key):
            try:
                if body is None or self._last.get(key, -1) >= listed_after:
                    body = await self.kube.get(KELP_KINDS[kind], namespace, name)
                if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
                    return False
                events = Recorder(self.kube, instance=self.instance, clock_ms=self.clock_ms)
                try:
                    result = await reconcile(body, self.kube, self.admin_for, events=events, clock_ms=self.clock_ms,
                                             owners=owners)
                except (LeadershipLost, asyncio.CancelledError):
                    raise
                except Exception as exc:
                    await self._failed(kind, body, exc)
                    raise
                await self.kube.patch_status(KELP_KINDS[kind], namespace, name,
                                             status_patch(body, result, clock_ms=self.clock_ms))
                return True
            finally:
                self._finished += 1
                self._last[key] = self._finished

    async def finalize(self, kind: str, namespace: str, name: str) -> str | None:
        """Clean up after a deleted object that carries the operator's own finalizer (KelpUser: its credential and
        ACLs); None when there is nothing to do. AdminError propagates while the brokers cannot be asked."""
        if kind != "KelpUser":
            return None
        async with self.lock(kind, namespace, name):
            body = await self.kube.get(KELP_KINDS[kind], namespace, name)
            if body is None or body["kind"] != "KelpUser" or not (body.get("metadata") or {}).get("deletionTimestamp"):
                return None
            events = Recorder(self.kube, instance=self.instance, clock_ms=self.clock_ms)
            try:
                return await finalize_user(body, self.kube, self.admin_for, events=events)
            except AdminError as exc:
                # The finalizer stays; the next resync pass (or event) tries again.
                await events.emit(body, "UserCleanupWaiting", f"the credential and ACLs of the deleted KelpUser are "
                                  f"not removed yet: {exc.message}; retried", warning=True)
                return None

    def forget(self, kind: str, alive: set[tuple[str, str]]) -> None:
        """Drop the locks of objects of `kind` no longer listed (never one that is held or awaited)."""
        for key in [k for k in self._locks if k[0] == kind and (k[1], k[2]) not in alive]:
            if not self._locks[key].locked():
                del self._locks[key]
                self._last.pop(key, None)

    async def _failed(self, kind: str, body: KelpResource, exc: Exception) -> None:
        meta = body["metadata"]
        message = f"reconciliation failed, retried with backoff: {type(exc).__name__}: {exc}"
        try:
            await self.kube.patch_status(KELP_KINDS[kind], meta["namespace"], meta["name"], status_patch(
                body, ({}, [condition("Ready", None, "ReconcileFailed", message[:2000])]), clock_ms=self.clock_ms))
        except LeadershipLost:
            raise
        except Exception as write_exc:
            log.warning("%s %s/%s: could not record the failure in status: %s", kind, meta["namespace"],
                        meta["name"], write_exc)
