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
        for obj in objects:
            self.put(obj)

    def put(self, obj: dict) -> None:
        meta = obj["metadata"]
        self.objects[(obj["kind"], meta.get("namespace", "ns"), meta["name"])] = obj

    async def apply(self, manifest: Mapping[str, Any]) -> dict:
        self.applied.append(dict(manifest))
        self.put(dict(manifest))
        return dict(manifest)

    async def get(self, kind: str, namespace: str, name: str) -> dict | None:
        return self.objects.get((kind, namespace, name))

    async def list(self, kind: str, namespace: str, *, labels: Mapping[str, str] | None = None) -> list[dict]:
        return [o for (k, ns, _), o in self.objects.items() if k == kind and ns == namespace]

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        self.objects.pop((kind, namespace, name), None)


def resource(kind: str, name: str, spec: dict, *, created: str = "2026-11-01T00:00:00Z", status: dict | None = None,
             generation: int = 1) -> dict:
    return {"apiVersion": "kelp.dev/v1alpha1", "kind": kind,
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": generation,
                         "creationTimestamp": created},
            "spec": spec, "status": status or {}}
