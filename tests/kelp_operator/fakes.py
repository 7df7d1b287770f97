"""A stand-in for the operator's Kubernetes client: objects in a dict, applies recorded.

Why: reconciliation decisions (which topic to create, which Topic resource
wins, when a reset may run) are tested against a real broker's admin API
without an API server; the kube tier tests the real API server separately.
"""

from __future__ import annotations

from typing import Any, Mapping


class FakeKube:
    def __init__(self, *objects: dict) -> None:
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.applied: list[dict] = []
        self.patches: list[tuple[str, str, dict]] = []
        for obj in objects:
            self.put(obj)

    def put(self, obj: dict) -> None:
        meta = obj["metadata"]
        self.objects[(obj["kind"], meta.get("namespace", "ns"), meta["name"])] = obj

    async def apply(self, manifest: Mapping[str, Any]) -> dict:
        """Like server-side apply: the manifest's fields replace ours, status (the controllers') stays."""
        self.applied.append(dict(manifest))
        meta = manifest["metadata"]
        old = self.objects.get((manifest["kind"], meta.get("namespace", "ns"), meta["name"]))
        obj = dict(manifest)
        if old is not None and "status" in old:
            obj["status"] = old["status"]
        self.put(obj)
        return obj

    async def get(self, kind: str, namespace: str, name: str) -> dict | None:
        return self.objects.get((kind, namespace, name))

    async def list(self, kind: str, namespace: str, *, labels: Mapping[str, str] | None = None) -> list[dict]:
        return [o for (k, ns, _), o in self.objects.items() if k == kind and ns == namespace]

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
