"""The metadata log in ConfigMaps (the Kubernetes backend of `metadata_log.MetadataLog`).

Why: on Kubernetes the controller's decisions must survive every pod, and a
deposed controller must be fenced without transactions across objects. Each
entry is one ConfigMap named by its offset (`kelp-<cluster>-meta-<offset>`),
written with POST: the API server refuses a second object of that name
(409), which is the log's create-if-absent fence. A snapshot is written as
chunks (`…-meta-snap-<offset>-<i>`, each under the 1 MiB object limit) and
then a marker (`…-meta-snap-<offset>`) naming the chunk count and their
SHA-256: a snapshot without its marker, or whose chunks do not match it, is
never used. One LIST (a consistent read at one resourceVersion, even across
pages) returns every entry and marker; entries and snapshots below the
newest snapshot are deleted by `compact`.

The sharded ConfigMaps of the store before the log (`kelp.dev/metadata:
topic|cluster`) are read by `legacy()` for the one-time import.
Calls run in worker threads.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

from kelp.json_types import JsonObject

from .kube_api import ApiClient, KubeApiError, KubeObject, request, request_list, request_object
from .metadata_log import BlockingMetadataLog, LegacyMetadata, LoadedLog, MetadataLogConflict, MetadataUnreadable
from .metadata_records import (
    LegacyClusterDoc,
    MetadataEntry,
    MetadataSnapshot,
    as_entry,
    as_legacy_cluster,
    as_snapshot,
    as_topic,
)
from .model import TopicStateJson

__all__ = ["KubeMetadataLog", "MAX_OBJECT_BYTES"]

MAX_OBJECT_BYTES = 900 * 1024
DATA_KEY = "doc.json"
ROLE = "kelp.dev/metadata"
OFFSET_ANNOTATION = "kelp.dev/offset"


class KubeMetadataLog(BlockingMetadataLog):
    def __init__(self, api: ApiClient, *, namespace: str, cluster: str) -> None:
        self.api = api
        self.namespace = namespace
        self.cluster = cluster
        self._base = f"/api/v1/namespaces/{namespace}/configmaps"

    # -- names -----------------------------------------------------------------
    def _entry_name(self, offset: int) -> str:
        return f"kelp-{self.cluster}-meta-{offset:012d}"

    def _marker_name(self, offset: int) -> str:
        return f"kelp-{self.cluster}-meta-snap-{offset:012d}"

    def _chunk_name(self, offset: int, i: int) -> str:
        return f"{self._marker_name(offset)}-{i:04d}"

    def _body(self, name: str, role: str, offset: int, text: str) -> KubeObject:
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "annotations": {OFFSET_ANNOTATION: str(offset)},
                             "labels": {"kelp.dev/cluster": self.cluster, ROLE: role,
                                        "app.kubernetes.io/name": "kelp"}},
                "data": {DATA_KEY: text}}

    def _list(self, selector: str) -> list[KubeObject]:
        out: list[KubeObject] = []
        cont: str | None = None
        while True:
            query = [("labelSelector", f"kelp.dev/cluster={self.cluster},{selector}"), ("limit", "500")]
            if cont:
                query.append(("continue", cont))
            try:
                page = request_list(self.api, self._base, query=query)
            except KubeApiError as exc:
                raise MetadataUnreadable(f"listing the metadata ConfigMaps failed: {exc}") from None
            out += page.get("items", [])
            cont = page.get("metadata", {}).get("continue")
            if not cont:
                return out

    @staticmethod
    def _doc(obj: KubeObject) -> JsonObject:
        name = obj.get("metadata", {}).get("name")
        try:
            doc = json.loads(obj["data"][DATA_KEY])
        except (KeyError, TypeError, ValueError) as exc:
            raise MetadataUnreadable(f"metadata ConfigMap {name} cannot be read ({exc!r})") from None
        if not isinstance(doc, dict):
            raise MetadataUnreadable(f"metadata ConfigMap {name} does not hold a JSON object")
        return doc

    @staticmethod
    def _offset(obj: KubeObject) -> int:
        meta = obj.get("metadata", {})
        try:
            return int(meta["annotations"][OFFSET_ANNOTATION])
        except (KeyError, TypeError, ValueError):
            raise MetadataUnreadable(f"metadata ConfigMap {meta.get('name')} has no offset annotation") from None

    # -- reading ---------------------------------------------------------------------
    def _read_snapshot(self, offset: int, marker: KubeObject) -> MetadataSnapshot:
        spec = self._doc(marker)
        try:
            chunks, digest = int(str(spec["chunks"])), str(spec["sha256"])
        except (KeyError, TypeError, ValueError):
            raise MetadataUnreadable(f"snapshot marker {self._marker_name(offset)} is malformed") from None
        parts = []
        for i in range(chunks):
            try:
                obj = request_object(self.api, "GET", f"{self._base}/{self._chunk_name(offset, i)}")
            except KubeApiError as exc:
                raise MetadataUnreadable(f"snapshot chunk {self._chunk_name(offset, i)}: {exc}") from None
            parts.append(obj.get("data", {}).get(DATA_KEY, ""))
        text = "".join(parts)
        if hashlib.sha256(text.encode()).hexdigest() != digest:
            raise MetadataUnreadable(f"snapshot at offset {offset}: its chunks do not match the marker's SHA-256")
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise MetadataUnreadable(f"snapshot at offset {offset} is not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise MetadataUnreadable(f"snapshot at offset {offset} does not hold a JSON object")
        return as_snapshot(doc)

    def _load(self) -> LoadedLog:
        items = self._list(f"{ROLE} in (log-entry,snapshot)")
        markers = {self._offset(o): o for o in items if o["metadata"]["labels"].get(ROLE) == "snapshot"}
        entries = {self._offset(o): o for o in items if o["metadata"]["labels"].get(ROLE) == "log-entry"}
        snapshot: MetadataSnapshot | None = None
        base = -1
        if markers:
            base = max(markers)
            snapshot = self._read_snapshot(base, markers[base])
        out: list[MetadataEntry] = []
        for expected, offset in enumerate(sorted(o for o in entries if o > base), start=base + 1):
            if offset != expected:
                raise MetadataUnreadable(f"the metadata log of cluster '{self.cluster}' has a hole: offset "
                                         f"{expected} is missing before {offset}")
            entry = as_entry(self._doc(entries[offset]))
            if int(entry.get("offset", -2)) != offset:
                raise MetadataUnreadable(f"metadata ConfigMap {self._entry_name(offset)} holds offset "
                                         f"{entry.get('offset')}")
            out.append(entry)
        return LoadedLog(snapshot, out)

    def _read_entry(self, offset: int) -> MetadataEntry | None:
        try:
            obj = request_object(self.api, "GET", f"{self._base}/{self._entry_name(offset)}")
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise MetadataUnreadable(f"metadata entry {offset}: {exc}") from None
        return as_entry(self._doc(obj))

    # -- writing ---------------------------------------------------------------------
    def _append(self, entry: MetadataEntry) -> None:
        offset = int(entry["offset"])
        text = json.dumps(entry, separators=(",", ":"))
        if len(text) > MAX_OBJECT_BYTES:
            raise ValueError(f"metadata entry at offset {offset} is {len(text)} bytes, over the {MAX_OBJECT_BYTES}"
                             "-byte limit of one ConfigMap; change fewer partitions at once")
        try:
            request(self.api, "POST", self._base, body=self._body(self._entry_name(offset), "log-entry", offset, text))
        except KubeApiError as exc:
            if exc.status == 409:
                raise MetadataLogConflict(f"metadata offset {offset} is taken") from None
            raise

    def _put(self, body: KubeObject) -> None:
        """Create, or replace an object left by an earlier attempt at the same snapshot."""
        try:
            request(self.api, "POST", self._base, body=body)
        except KubeApiError as exc:
            if exc.status != 409:
                raise
            name = body["metadata"]["name"]
            current = request_object(self.api, "GET", f"{self._base}/{name}")
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            request(self.api, "PUT", f"{self._base}/{name}", body=body)

    def _write_snapshot(self, snapshot: MetadataSnapshot) -> None:
        offset = int(snapshot["offset"])
        text = json.dumps(snapshot, separators=(",", ":"))
        chunks = [text[i:i + MAX_OBJECT_BYTES] for i in range(0, len(text), MAX_OBJECT_BYTES)] or [""]
        for i, chunk in enumerate(chunks):
            self._put(self._body(self._chunk_name(offset, i), "snapshot-chunk", offset, chunk))
        marker = json.dumps({"chunks": len(chunks), "sha256": hashlib.sha256(text.encode()).hexdigest()})
        self._put(self._body(self._marker_name(offset), "snapshot", offset, marker))

    def _delete(self, name: str) -> None:
        try:
            request(self.api, "DELETE", f"{self._base}/{name}")
        except KubeApiError as exc:
            if exc.status != 404:
                raise

    def _compact(self, snapshot_offset: int) -> int:
        gone = 0
        for obj in self._list(f"{ROLE} in (log-entry,snapshot,snapshot-chunk)"):
            role = obj["metadata"]["labels"].get(ROLE)
            offset = self._offset(obj)
            if ((role == "log-entry" and offset <= snapshot_offset)
                    or (role != "log-entry" and offset < snapshot_offset)):
                if role == "snapshot":
                    continue  # markers go after their chunks, below
                self._delete(obj["metadata"]["name"])
                gone += 1
        for obj in self._list(f"{ROLE}=snapshot"):
            if self._offset(obj) < snapshot_offset:
                self._delete(obj["metadata"]["name"])
                gone += 1
        return gone

    def _legacy(self) -> LegacyMetadata | None:
        items = self._list(f"{ROLE} in (topic,cluster)")
        if not items:
            return None
        cluster: LegacyClusterDoc | None = None
        topics: dict[str, TopicStateJson] = {}
        for obj in items:
            doc = self._doc(obj)
            if obj["metadata"]["labels"].get(ROLE) == "cluster":
                cluster = as_legacy_cluster(doc)
            else:
                if "name" not in doc:
                    raise MetadataUnreadable(f"legacy topic ConfigMap {obj['metadata']['name']} has no topic in it")
                topics[str(doc["name"])] = as_topic(doc)
        return LegacyMetadata(cluster, topics)

    async def close(self) -> None:
        await asyncio.to_thread(self.api.close)
