"""The operator's one door to the Kubernetes API: server-side apply, get, list, delete, events.

Why: handlers must not each grow their own API calls. Children are applied
with server-side apply (field manager `kelp-operator`, forced), so the
API server does the diff: only fields the operator owns change, fields
other controllers set (the StatefulSet controller's, a user's annotation)
stay, and an unchanged manifest is a no-op. Calls go through the same JSON
helper the brokers use (`kelp.kube.api`), in worker threads,
never on the event loop.

Every write first asks the `guard` (leadership.Leadership in the running
operator) whether this replica may still act; `fence()` is the stronger
check reconcile calls before actions that cost availability. Reads are
never guarded.

Each kind is a `Kind` (`POD`, `STATEFUL_SET`, `CLUSTER`, ...) typed with its
objects' shape (`model/objects.py`, `model/objects_kelp.py`): `get(POD, ...)`
is a `Pod | None`. Here, and only here, an answer of the API server gets its
type (kopf's own bodies get theirs in `handlers.py`).
"""

from __future__ import annotations

import asyncio
import builtins
import os
from dataclasses import dataclass
from typing import Generic, Mapping, Protocol, TypeVar, cast

from kelp.json_types import JsonObject
from kelp.kube.api import ApiClient, KubeApiError, api_client_from, request

from ..model.objects import (
    Certificate,
    ConfigMap,
    Event,
    KubeObject,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    Role,
    RoleBinding,
    Secret,
    Service,
    ServiceAccount,
    StatefulSet,
    StorageClass,
)
from ..model.objects_kelp import ClusterResource, ConsumerGroupResource, KelpResource, KelpUserResource, TopicResource
from ..model.objects_network import NetworkPolicy
from .leadership import Unfenced

__all__ = ["KubeClient", "KubeApiError", "FIELD_MANAGER", "resource_path", "Kind", "Guard", "ApiClient", "KINDS",
           "KELP_KINDS", "CLUSTER_SCOPED", "SERVICE_ACCOUNT", "CONFIG_MAP", "SERVICE", "POD",
           "PERSISTENT_VOLUME_CLAIM", "ROLE", "ROLE_BINDING", "STATEFUL_SET", "POD_DISRUPTION_BUDGET", "LEASE", "EVENT",
           "STORAGE_CLASS", "CLUSTER_ROLE", "CLUSTER_ROLE_BINDING", "CLUSTER", "TOPIC", "CONSUMER_GROUP", "SECRET",
           "KELP_USER", "CERTIFICATE", "NETWORK_POLICY"]

FIELD_MANAGER = "kelp-operator"

ObjT = TypeVar("ObjT", covariant=True)
T = TypeVar("T")
ManifestT = TypeVar("ManifestT", bound=KubeObject)


@dataclass(frozen=True)
class Kind(Generic[ObjT]):
    """A kind the operator reads or writes: where its objects live, and (as `ObjT`) their type.

    `kube.get(POD, ns, name)` is then a `Pod | None` to mypy; `name` is what an object's `kind` says.
    """

    name: str
    prefix: str  # the API prefix: api/v1, apis/<group>/<version>
    plural: str
    namespaced: bool = True


SERVICE_ACCOUNT: Kind[ServiceAccount] = Kind("ServiceAccount", "api/v1", "serviceaccounts")
CONFIG_MAP: Kind[ConfigMap] = Kind("ConfigMap", "api/v1", "configmaps")
SECRET: Kind[Secret] = Kind("Secret", "api/v1", "secrets")
SERVICE: Kind[Service] = Kind("Service", "api/v1", "services")
POD: Kind[Pod] = Kind("Pod", "api/v1", "pods")
PERSISTENT_VOLUME_CLAIM: Kind[PersistentVolumeClaim] = Kind("PersistentVolumeClaim", "api/v1",
                                                             "persistentvolumeclaims")
ROLE: Kind[Role] = Kind("Role", "apis/rbac.authorization.k8s.io/v1", "roles")
ROLE_BINDING: Kind[RoleBinding] = Kind("RoleBinding", "apis/rbac.authorization.k8s.io/v1", "rolebindings")
STATEFUL_SET: Kind[StatefulSet] = Kind("StatefulSet", "apis/apps/v1", "statefulsets")
POD_DISRUPTION_BUDGET: Kind[PodDisruptionBudget] = Kind("PodDisruptionBudget", "apis/policy/v1",
                                                         "poddisruptionbudgets")
NETWORK_POLICY: Kind[NetworkPolicy] = Kind("NetworkPolicy", "apis/networking.k8s.io/v1", "networkpolicies")
LEASE: Kind[KubeObject] = Kind("Lease", "apis/coordination.k8s.io/v1", "leases")
EVENT: Kind[Event] = Kind("Event", "api/v1", "events")
# Kinds without a namespace: their paths have none (the namespace argument is ignored).
STORAGE_CLASS: Kind[StorageClass] = Kind("StorageClass", "apis/storage.k8s.io/v1", "storageclasses",
                                         namespaced=False)
CLUSTER_ROLE: Kind[Role] = Kind("ClusterRole", "apis/rbac.authorization.k8s.io/v1", "clusterroles",
                                namespaced=False)
CLUSTER_ROLE_BINDING: Kind[RoleBinding] = Kind("ClusterRoleBinding", "apis/rbac.authorization.k8s.io/v1",
                                               "clusterrolebindings", namespaced=False)
CLUSTER: Kind[ClusterResource] = Kind("Cluster", "apis/kelp.dev/v1alpha1", "clusters")
TOPIC: Kind[TopicResource] = Kind("Topic", "apis/kelp.dev/v1alpha1", "topics")
CONSUMER_GROUP: Kind[ConsumerGroupResource] = Kind("ConsumerGroup", "apis/kelp.dev/v1alpha1", "consumergroups")
KELP_USER: Kind[KelpUserResource] = Kind("KelpUser", "apis/kelp.dev/v1alpha1", "kelpusers")
# cert-manager's, written only for Clusters with spec.tls.issuerRef (cert-manager must be installed then).
CERTIFICATE: Kind[Certificate] = Kind("Certificate", "apis/cert-manager.io/v1", "certificates")

# Kelp's own kinds by name (what the runner and the resync pass are asked to reconcile).
KELP_KINDS: dict[str, Kind[KelpResource]] = {k.name: k for k in (CLUSTER, TOPIC, CONSUMER_GROUP, KELP_USER)}
# Every kind the operator reads or writes, by name (a manifest's `kind` finds its path here).
KINDS: dict[str, Kind[object]] = {k.name: k for k in (
    SERVICE_ACCOUNT, CONFIG_MAP, SERVICE, POD, PERSISTENT_VOLUME_CLAIM, ROLE, ROLE_BINDING, STATEFUL_SET,
    POD_DISRUPTION_BUDGET, LEASE, EVENT, STORAGE_CLASS, CLUSTER_ROLE, CLUSTER_ROLE_BINDING, CLUSTER, TOPIC,
    CONSUMER_GROUP, SECRET, KELP_USER, CERTIFICATE, NETWORK_POLICY)}
CLUSTER_SCOPED = frozenset(k.name for k in KINDS.values() if not k.namespaced)


def resource_path(kind: Kind[object], namespace: str, name: str | None = None) -> str:
    path = (f"/{kind.prefix}/{kind.plural}" if not kind.namespaced
            else f"/{kind.prefix}/namespaces/{namespace}/{kind.plural}")
    return f"{path}/{name}" if name else path


class Guard(Protocol):
    """Whether this replica may still write (`leadership.Leadership`, or `Unfenced` without election)."""

    def check(self) -> None: ...

    async def fence(self) -> None: ...


def _typed(kind: Kind[T], obj: JsonObject) -> T:
    """The API server's answer for `kind`: an object of that kind (with `_as_sent`, where an answer gets its type)."""
    return cast(T, obj)


def _as_sent(manifest: ManifestT, obj: JsonObject) -> ManifestT:
    """The API server's answer to a manifest written: an object of the manifest's kind."""
    return cast(ManifestT, obj)


class KubeClient:
    def __init__(self, api: ApiClient | None = None, *, guard: Guard | None = None) -> None:
        self.api: ApiClient = api if api is not None else api_client_from(
            kubeconfig=os.environ.get("KUBECONFIG") or None)
        self.guard: Guard = guard if guard is not None else Unfenced()

    async def _call(self, method: str, path: str, *, body: object = None, query: builtins.list[tuple[str, str]]
                    | None = None, content_type: str = "application/json") -> JsonObject:
        if method != "GET":
            self.guard.check()
        answer: JsonObject = await asyncio.to_thread(request, self.api, method, path, body=body, query=query,
                                                     content_type=content_type)
        return answer

    async def fence(self) -> None:
        """Prove leadership now (a Lease write on the last resourceVersion); raises LeadershipLost."""
        await self.guard.fence()

    async def create(self, manifest: ManifestT) -> ManifestT | None:
        """POST a new object; None when one of that name exists already (409)."""
        kind = KINDS[manifest["kind"]]
        try:
            return _as_sent(manifest, await self._call(
                "POST", resource_path(kind, manifest["metadata"].get("namespace", "")), body=dict(manifest)))
        except KubeApiError as exc:
            if exc.status == 409:
                return None
            raise

    async def apply(self, manifest: ManifestT) -> ManifestT:
        kind, meta = KINDS[manifest["kind"]], manifest["metadata"]
        return _as_sent(manifest, await self._call(
            "PATCH", resource_path(kind, meta.get("namespace", ""), meta["name"]), body=dict(manifest),
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")], content_type="application/apply-patch+yaml"))

    async def get(self, kind: Kind[T], namespace: str, name: str) -> T | None:
        try:
            return _typed(kind, await self._call("GET", resource_path(kind, namespace, name)))
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(self, kind: Kind[T], namespace: str, *, labels: Mapping[str, str] | None = None
                   ) -> builtins.list[T]:
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in labels.items()))] if labels else []
        return self._items(kind, await self._call("GET", resource_path(kind, namespace), query=query))

    # `builtins.list`: in this class body, `list` names the method above.
    async def list_everywhere(self, kind: Kind[T], namespaces: builtins.list[str] | None) -> builtins.list[T]:
        """Objects of `kind` in the given namespaces, or in every namespace when None."""
        if namespaces is None:
            return self._items(kind, await self._call("GET", f"/{kind.prefix}/{kind.plural}"))
        out: builtins.list[T] = []
        for ns in namespaces:
            out.extend(await self.list(kind, ns))
        return out

    @staticmethod
    def _items(kind: Kind[T], answer: JsonObject) -> builtins.list[T]:
        """The `items` of a list answer: objects of `kind`, each saying so as a single GET's answer does (the API
        server leaves `kind` out of the items of a built-in kind's list)."""
        items = answer.get("items") or []
        for item in items if isinstance(items, builtins.list) else ():
            if isinstance(item, dict):
                item.setdefault("kind", kind.name)
        return cast("builtins.list[T]", items)

    async def merge_patch(self, kind: Kind[T], namespace: str, name: str, patch: JsonObject) -> T | None:
        try:
            return _typed(kind, await self._call("PATCH", resource_path(kind, namespace, name), body=dict(patch),
                                                 content_type="application/merge-patch+json"))
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def patch_status(self, kind: Kind[T], namespace: str, name: str, status: Mapping[str, object]
                           ) -> T | None:
        """JSON merge patch of the status subresource; None when the object is gone."""
        try:
            return _typed(kind, await self._call("PATCH", resource_path(kind, namespace, name) + "/status",
                                                 body={"status": dict(status)},
                                                 content_type="application/merge-patch+json"))
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def delete(self, kind: Kind[object], namespace: str, name: str) -> None:
        try:
            await self._call("DELETE", resource_path(kind, namespace, name))
        except KubeApiError as exc:
            if exc.status != 404:
                raise

    def close(self) -> None:
        self.api.close()
