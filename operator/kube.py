"""The operator's one door to the Kubernetes API: server-side apply, get, list, delete, events.

Why: handlers must not each grow their own API calls. Children are applied
with server-side apply (field manager `kelp-operator`, forced), so the
API server does the diff: only fields the operator owns change, fields
other controllers set (the StatefulSet controller's, a user's annotation)
stay, and an unchanged manifest is a no-op. Calls go through the same JSON
helper the brokers use (`kelp.broker.cluster.kube_api`), in worker threads,
never on the event loop.

Every write first asks the `guard` (leadership.Leadership in the running
operator) whether this replica may still act; `fence()` is the stronger
check reconcile calls before actions that cost availability. Reads are
never guarded.
"""

from __future__ import annotations

import asyncio
import builtins
import os
from typing import Any, Mapping

from kelp.broker.cluster.kube_api import KubeApiError, api_client_from, request

from .leadership import Unfenced

__all__ = ["KubeClient", "KubeApiError", "FIELD_MANAGER", "resource_path"]

FIELD_MANAGER = "kelp-operator"

# kind -> (API prefix, plural) for everything the operator reads or writes.
KINDS: dict[str, tuple[str, str]] = {
    "ServiceAccount": ("api/v1", "serviceaccounts"),
    "ConfigMap": ("api/v1", "configmaps"),
    "Service": ("api/v1", "services"),
    "Pod": ("api/v1", "pods"),
    "PersistentVolumeClaim": ("api/v1", "persistentvolumeclaims"),
    "Role": ("apis/rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    "StatefulSet": ("apis/apps/v1", "statefulsets"),
    "PodDisruptionBudget": ("apis/policy/v1", "poddisruptionbudgets"),
    "Lease": ("apis/coordination.k8s.io/v1", "leases"),
    "Event": ("api/v1", "events"),
    "StorageClass": ("apis/storage.k8s.io/v1", "storageclasses"),
    "ClusterRole": ("apis/rbac.authorization.k8s.io/v1", "clusterroles"),
    "ClusterRoleBinding": ("apis/rbac.authorization.k8s.io/v1", "clusterrolebindings"),
    "Cluster": ("apis/kelp.dev/v1alpha1", "clusters"),
    "Topic": ("apis/kelp.dev/v1alpha1", "topics"),
    "ConsumerGroup": ("apis/kelp.dev/v1alpha1", "consumergroups"),
}


# Kinds without a namespace: their paths have none (the namespace argument is ignored).
CLUSTER_SCOPED = frozenset({"ClusterRole", "ClusterRoleBinding", "StorageClass"})


def resource_path(kind: str, namespace: str, name: str | None = None) -> str:
    prefix, plural = KINDS[kind]
    path = f"/{prefix}/{plural}" if kind in CLUSTER_SCOPED else f"/{prefix}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name else path


class KubeClient:
    def __init__(self, api: Any = None, *, guard: Any = None) -> None:
        self.api = api if api is not None else api_client_from(kubeconfig=os.environ.get("KUBECONFIG") or None)
        self.guard = guard if guard is not None else Unfenced()

    async def _call(self, method: str, path: str, **kwargs: Any) -> dict:
        if method != "GET":
            self.guard.check()
        return await asyncio.to_thread(request, self.api, method, path, **kwargs)

    async def fence(self) -> None:
        """Prove leadership now (a Lease write on the last resourceVersion); raises LeadershipLost."""
        await self.guard.fence()

    async def create(self, manifest: Mapping[str, Any]) -> dict | None:
        """POST a new object; None when one of that name exists already (409)."""
        meta = manifest["metadata"]
        try:
            return await self._call("POST", resource_path(manifest["kind"], meta.get("namespace", "")),
                                    body=dict(manifest))
        except KubeApiError as exc:
            if exc.status == 409:
                return None
            raise

    async def apply(self, manifest: Mapping[str, Any]) -> dict:
        meta = manifest["metadata"]
        return await self._call(
            "PATCH", resource_path(manifest["kind"], meta.get("namespace", ""), meta["name"]), body=dict(manifest),
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")], content_type="application/apply-patch+yaml")

    async def get(self, kind: str, namespace: str, name: str) -> dict | None:
        try:
            return await self._call("GET", resource_path(kind, namespace, name))
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(self, kind: str, namespace: str, *, labels: Mapping[str, str] | None = None) -> list[dict]:
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in labels.items()))] if labels else []
        return (await self._call("GET", resource_path(kind, namespace), query=query)).get("items", [])

    # `builtins.list`: in this class body, `list` names the method above.
    async def list_everywhere(self, kind: str, namespaces: builtins.list[str] | None) -> builtins.list[dict]:
        """Objects of `kind` in the given namespaces, or in every namespace when None."""
        if namespaces is None:
            prefix, plural = KINDS[kind]
            return (await self._call("GET", f"/{prefix}/{plural}")).get("items", [])
        out: list[dict] = []
        for ns in namespaces:
            out.extend(await self.list(kind, ns))
        return out

    async def merge_patch(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any]) -> dict | None:
        try:
            return await self._call("PATCH", resource_path(kind, namespace, name), body=dict(patch),
                                    content_type="application/merge-patch+json")
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def patch_status(self, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> dict | None:
        """JSON merge patch of the status subresource; None when the object is gone."""
        try:
            return await self._call("PATCH", resource_path(kind, namespace, name) + "/status",
                                    body={"status": dict(status)}, content_type="application/merge-patch+json")
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        try:
            await self._call("DELETE", resource_path(kind, namespace, name))
        except KubeApiError as exc:
            if exc.status != 404:
                raise

    def close(self) -> None:
        self.api.close()
