"""A stand-in for the operator's Kubernetes client: objects in a dict, applies recorded.

Why: reconciliation decisions (which topic to create, which Topic resource
wins, when a reset may run) are tested against a real broker's admin API
without an API server; the kube tier tests the real API server separately.
"""

from __future__ import annotations

from typing import Any, Mapping

from kelp.operator.kube import CLUSTER_SCOPED


def _key(kind: str, meta: Mapping[str, Any]) -> tuple[str, str, str]:
    return (kind, "" if kind in CLUSTER_SCOPED else meta.get("namespace", "ns"), meta["name"])


class FakeKube:
    def __init__(self, *objects: dict) -> None:
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.applied: list[dict] = []
        self.patches: list[tuple[str, str, dict]] = []
        for obj in objects:
            self.put(obj)

    def put(self, obj: dict) -> None:
        self.objects[_key(obj["kind"], obj["metadata"])] = obj

    async def apply(self, manifest: Mapping[str, Any]) -> dict:
        """Like server-side apply: the manifest's fields replace ours, status (the controllers') stays."""
        self.applied.append(dict(manifest))
        old = self.objects.get(_key(manifest["kind"], manifest["metadata"]))
        obj = dict(manifest)
        if old is not None and "status" in old:
            obj["status"] = old["status"]
        self.put(obj)
        return obj

    async def get(self, kind: str, namespace: str, name: str) -> dict | None:
        return self.objects.get((kind, namespace, name))

    async def list(self, kind: str, namespace: str, *, labels: Mapping[str, str] | None = None) -> list[dict]:
        return [o for (k, ns, _), o in self.objects.items() if k == kind and ns == namespace
                and all(((o["metadata"].get("labels") or {}).get(lk) == lv) for lk, lv in (labels or {}).items())]

    async def list_everywhere(self, kind: str, namespaces: list[str] | None) -> list[dict]:
        return [o for (k, ns, _), o in self.objects.items() if k == kind and (namespaces is None or ns in namespaces)]

    async def merge_patch(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any]) -> dict | None:
        obj = self.objects.get((kind, namespace, name))
        if obj is None:
            return None
        self.patches.append((kind, name, dict(patch)))
        annotations = obj["metadata"].setdefault("annotations", {})
        for key, value in (patch.get("metadata", {}).get("annotations") or {}).items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        return obj

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        self.objects.pop((kind, namespace, name), None)


def resource(kind: str, name: str, spec: dict, *, created: str = "2026-11-01T00:00:00Z", status: dict | None = None,
             generation: int = 1) -> dict:
    return {"apiVersion": "kelp.dev/v1alpha1", "kind": kind,
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": generation,
                         "creationTimestamp": created},
            "spec": spec, "status": status or {}}
