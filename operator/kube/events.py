"""Kubernetes Events for every decision the operator takes: `kubectl describe cluster demo` tells the story.

Why: conditions hold only the latest state; an operator that restarts a pod,
submits a move or refuses to act must leave a trail a user can read
afterwards (Strimzi and controller-runtime do the same). Each decision is a
core/v1 Event on the resource it concerns, reason in CamelCase (the same
reasons the conditions use), type Normal or Warning. The same decision
repeated (a restart blocked for the same partitions on every pass) is one
Event whose `count` and `lastTimestamp` grow, as kubelet's events do: its
name is derived from the object, reason and message.

`event_manifest` is pure; `Recorder` writes through the operator's one
Kubernetes client (best effort: a failed event is logged, never fails a
reconciliation — except that a replica that lost its Lease stops).
"""

from __future__ import annotations

import hashlib
import logging

from kelp.clock import WallClockMs, wall_clock_ms

from ..model.objects import Event
from ..model.objects_kelp import KelpResource
from ..model.status import rfc3339
from .client import EVENT, KubeClient
from .leadership import LeadershipLost

__all__ = ["event_manifest", "Recorder", "COMPONENT"]

log = logging.getLogger("kelp.operator")

COMPONENT = "kelp-operator"
MAX_MESSAGE = 1024


def event_manifest(involved: KelpResource, *, reason: str, message: str, warning: bool, now: str,
                   instance: str) -> Event:
    meta = involved["metadata"]
    digest = hashlib.sha256(f"{involved['kind']}\0{reason}\0{message}".encode()).hexdigest()[:16]
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{meta['name'][:200]}.{digest}", "namespace": meta["namespace"],
                     "labels": {"app.kubernetes.io/managed-by": COMPONENT}},
        "involvedObject": {"apiVersion": involved.get("apiVersion", ""), "kind": involved["kind"],
                           "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid", "")},
        "reason": reason, "message": message[:MAX_MESSAGE], "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT}, "reportingComponent": COMPONENT, "reportingInstance": instance,
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }


class Recorder:
    """Events of one reconciliation; `emitted` keeps (reason, message) for tests and logs.

    `clock_ms` (wall-clock milliseconds, kelp.clock) stamps the Events' first and last timestamps.
    """

    def __init__(self, kube: KubeClient, *, instance: str = COMPONENT, clock_ms: WallClockMs = wall_clock_ms) -> None:
        self.kube = kube
        self.instance = instance
        self.clock_ms = clock_ms
        self.emitted: list[tuple[str, str]] = []

    async def emit(self, involved: KelpResource, reason: str, message: str, *, warning: bool = False) -> None:
        self.emitted.append((reason, message))
        log.info("%s %s/%s: %s: %s", involved["kind"], involved["metadata"].get("namespace"),
                 involved["metadata"]["name"], reason, message)
        event = event_manifest(involved, reason=reason, message=message, warning=warning,
                               now=rfc3339(self.clock_ms()), instance=self.instance)
        try:
            if await self.kube.create(event) is None:
                meta = event["metadata"]
                current = await self.kube.get(EVENT, meta["namespace"], meta["name"])
                count = (current.get("count") if current else None) or 1
                await self.kube.merge_patch(EVENT, meta["namespace"], meta["name"], {
                    "count": int(count) + 1, "lastTimestamp": event["lastTimestamp"]})
        except LeadershipLost:
            raise
        except Exception as exc:  # events are a trail, not a duty: never fail the reconciliation for one
            log.warning("event %s on %s %s not recorded: %s", reason, involved["kind"],
                        involved["metadata"]["name"], exc)
