"""Cluster metadata in ConfigMaps (the Kubernetes backend of `store.MetadataStore`).

Why: on Kubernetes the controller's decisions must survive every pod, so
they live in API objects, written with the `resourceVersion` read as a
precondition (a deposed controller's stale write fails with 409). Sharded:
one ConfigMap per topic (`kelp-<cluster>-topic-<dns-safe name>-<hash>`) plus
one for the cluster (`kelp-<cluster>-cluster`), so no object nears the 1 MiB
limit; a topic document over 900 KiB is refused with its size named.
Calls run in worker threads.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from typing import Any

from .kube_api import KubeApiError, request
from .store import MetadataStore, StoreConflict, StoreUnreadable, Versioned

__all__ = ["KubeMetadataStore", "topic_object_name"]

MAX_DOC_BYTES = 900 * 1024
DATA_KEY = "doc.json"
TOPIC_ANNOTATION = "kelp.dev/topic"


def topic_object_name(cluster: str, topic: str) -> str:
    """A DNS-1123 name unique per topic: Kafka names may hold '_', '.' and upper case."""
    digest = hashlib.sha256(topic.encode()).hexdigest()[:8]
    safe = re.sub(r"[^a-z0-9-]+", "-", topic.lower()).strip("-")[:200] or "t"
    return f"kelp-{cluster}-topic-{safe}-{digest}"


class KubeMetadataStore(MetadataStore):
    def __init__(self, api: Any, *, namespace: str, cluster: str) -> None:
        self.api = api
        self.namespace = namespace
        self.cluster = cluster
        self._base = f"/api/v1/namespaces/{namespace}/configmaps"

    def _labels(self, role: str) -> dict[str, str]:
        return {"kelp.dev/cluster": self.cluster, "kelp.dev/metadata": role, "app.kubernetes.io/name": "kelp"}

    @staticmethod
    def _versioned(obj: dict) -> Versioned:
        return Versioned(json.loads(obj.get("data", {}).get(DATA_KEY, "{}")), str(obj["metadata"]["resourceVersion"]))

    def _get(self, name: str) -> Versioned | None:
        try:
            return self._versioned(request(self.api, "GET", f"{self._base}/{name}"))
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    def _put(self, name: str, doc: dict, expected: str | None, role: str, annotations: dict[str, str]) -> str:
        text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
        if len(text) > MAX_DOC_BYTES:
            raise ValueError(f"metadata of {annotations.get(TOPIC_ANNOTATION, name)} is {len(text)} bytes, over the "
                             f"{MAX_DOC_BYTES}-byte limit of one ConfigMap")
        meta: dict[str, Any] = {"name": name, "labels": self._labels(role), "annotations": annotations}
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {DATA_KEY: text}}
        try:
            if expected is None:
                obj = request(self.api, "POST", self._base, body=body)
            else:
                meta["resourceVersion"] = expected
                obj = request(self.api, "PUT", f"{self._base}/{name}", body=body)
        except KubeApiError as exc:
            if exc.status in (409, 404):
                raise StoreConflict(f"{name}: {exc}") from None
            raise
        return str(obj["metadata"]["resourceVersion"])

    def _load(self) -> tuple[Versioned | None, dict[str, Versioned]]:
        topics: dict[str, Versioned] = {}
        cluster = None
        cont = None
        while True:
            query = [("labelSelector", f"kelp.dev/cluster={self.cluster},kelp.dev/metadata"), ("limit", "500")]
            if cont:
                query.append(("continue", cont))
            page = request(self.api, "GET", self._base, query=query)
            for obj in page.get("items", []):
                role = obj["metadata"].get("labels", {}).get("kelp.dev/metadata")
                if role == "cluster":
                    try:
                        cluster = self._versioned(obj)
                    except (ValueError, KeyError, TypeError) as exc:
                        cluster = StoreUnreadable(f"the cluster record {obj['metadata'].get('name')} cannot be read ({exc})")
                elif role == "topic":
                    v = self._versioned(obj)
                    topics[v.doc.get("name") or obj["metadata"]["annotations"][TOPIC_ANNOTATION]] = v
            cont = page.get("metadata", {}).get("continue")
            if not cont:
                return cluster, topics

    async def load(self) -> tuple[Versioned | None, dict[str, Versioned]]:
        return await asyncio.to_thread(self._load)

    async def get_topic(self, name: str) -> Versioned | None:
        return await asyncio.to_thread(self._get, topic_object_name(self.cluster, name))

    async def put_topic(self, name: str, doc: dict, *, expected_version: str | None) -> str:
        return await asyncio.to_thread(self._put, topic_object_name(self.cluster, name), doc, expected_version,
                                       "topic", {TOPIC_ANNOTATION: name})

    async def delete_topic(self, name: str, *, expected_version: str) -> None:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": expected_version}}

        def run() -> None:
            try:
                request(self.api, "DELETE", f"{self._base}/{topic_object_name(self.cluster, name)}", body=body)
            except KubeApiError as exc:
                if exc.status in (404, 409):
                    raise StoreConflict(f"topic {name}: {exc}") from None
                raise
        await asyncio.to_thread(run)

    async def put_cluster(self, doc: dict, *, expected_version: str | None) -> str:
        return await asyncio.to_thread(self._put, f"kelp-{self.cluster}-cluster", doc, expected_version, "cluster", {})

    async def close(self) -> None:
        await asyncio.to_thread(self.api.close)
