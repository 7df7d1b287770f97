"""What every reconciler shares: its result type, the broker-admin factory, the pause annotation, the Cluster lookup.

Why: Cluster, Topic and ConsumerGroup reconcilers live in their own modules
but answer in one shape — `(status fields, conditions)` — reach brokers the
same way, honour `kelp.dev/pause-reconciliation` the same way, and a Topic or
ConsumerGroup finds its Cluster the same way. A Cluster pass's children are
all applied through `apply_child`, so an object the API server refuses (an
immutable field, a node port already taken, a webhook's no) is a condition
naming it, never a raw API error that fails the whole pass.
"""

from __future__ import annotations

from typing import Awaitable, Callable, TypeVar

from ..kube.client import CLUSTER, KubeApiError, KubeClient
from ..kube.events import Recorder
from ..manifests.spec import ClusterSpec, SpecError
from ..model.objects import KubeObject, Pod
from ..model.objects_kelp import (
    ClusterResource,
    ClusterStatus,
    Condition,
    ConsumerGroupResource,
    KelpUserResource,
    TopicResource,
)
from ..model.status import Observed, condition
from .brokers import BrokerAdmin

__all__ = ["AdminFactory", "Result", "PAUSE_ANNOTATION", "paused", "cluster_of", "ClusterPass", "apply_child",
           "REFUSED_STATUSES"]

AdminFactory = Callable[[ClusterSpec], Awaitable[BrokerAdmin]]
StatusT = TypeVar("StatusT")
# What every reconciler answers: (the status fields it observed, its conditions).
Result = tuple[StatusT, list[Condition]]
ManifestT = TypeVar("ManifestT", bound=KubeObject)

# What the API server answers when it refuses an object as written (rather than failing): a bad request, a
# webhook or policy's no, an invalid value (an immutable field, a node port out of range or already allocated).
REFUSED_STATUSES = (400, 403, 422)

# On any Kelp resource: "true" stops the operator from changing anything for it (status is still observed).
PAUSE_ANNOTATION = "kelp.dev/pause-reconciliation"


def paused(body: ClusterResource | TopicResource | ConsumerGroupResource | KelpUserResource) -> bool:
    return ((body.get("metadata") or {}).get("annotations") or {}).get(PAUSE_ANNOTATION) == "true"


async def cluster_of(body: TopicResource | ConsumerGroupResource | KelpUserResource,
                     kube: KubeClient) -> ClusterSpec | Condition:
    """The spec of the resource's Cluster, or a Ready=False condition saying why there is none."""
    ns = body["metadata"]["namespace"]
    ref = (body.get("spec") or {}).get("cluster", "")
    cluster = await kube.get(CLUSTER, ns, ref)
    if cluster is None or (cluster.get("metadata") or {}).get("deletionTimestamp"):
        return condition("Ready", False, "ClusterNotFound",
                         f"no Cluster '{ref}' in namespace {ns}; create it or fix spec.cluster")
    try:
        return ClusterSpec.from_resource(cluster)
    except SpecError as exc:
        return condition("Ready", False, "ClusterInvalid", f"Cluster '{ref}' has an invalid spec: {exc}")


class ClusterPass:
    """One reconciliation of one Cluster: its inputs, what it observed, and the events it records.

    `now_ms` is the pass's wall-clock time in milliseconds (kelp.clock), read once at its start.
    """

    def __init__(self, *, body: ClusterResource, spec: ClusterSpec, kube: KubeClient, events: Recorder, now_ms: int,
                 observed: Observed, admin: BrokerAdmin | None, pods: list[Pod]) -> None:
        self.body, self.spec, self.kube, self.events, self.now_ms = body, spec, kube, events, now_ms
        self.observed, self.admin, self.pods = observed, admin, pods
        self.submitted = 0  # partition moves this pass submitted

    @property
    def annotations(self) -> dict[str, str]:
        return dict((self.body.get("metadata") or {}).get("annotations") or {})

    @property
    def old_status(self) -> ClusterStatus:
        status: ClusterStatus = self.body.get("status") or {}
        return status.copy()

    def previous_reason(self, type_: str) -> str | None:
        """The reason of the condition of that type this Cluster's status holds now (None when none)."""
        return next((c.get("reason") for c in self.old_status.get("conditions") or [] if c.get("type") == type_),
                    None)

    async def emit(self, reason: str, message: str, *, warning: bool = False) -> None:
        await self.events.emit(self.body, reason, message, warning=warning)

    async def annotate(self, key: str, value: str | None) -> None:
        meta = self.body["metadata"]
        await self.kube.merge_patch(CLUSTER, meta["namespace"], meta["name"],
                                    {"metadata": {"annotations": {key: value}}})


async def apply_child(ctx: ClusterPass, manifest: ManifestT, *,
                      hint: str = "the spec change behind it cannot be applied as it is"
                      ) -> tuple[ManifestT | None, Condition | None]:
    """Server-side apply one child: (the object as applied, None), or, when the API server refuses it,
    (None, a Progressing=False `ApplyRefused` condition naming the object and the API server's message),
    recorded as a Warning Event. Other failures (5xx, unreachable) propagate: the pass is retried."""
    try:
        return await ctx.kube.apply(manifest), None
    except KubeApiError as exc:
        if exc.status not in REFUSED_STATUSES:
            raise
        message = f"the API server refused {manifest['kind']} {manifest['metadata']['name']}: {exc}; {hint}"
    await ctx.emit("ApplyRefused", message, warning=True)
    return None, condition("Progressing", False, "ApplyRefused", message)
