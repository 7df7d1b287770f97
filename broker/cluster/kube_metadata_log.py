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
pages) returns every entry and marker.

The log start (`…-meta-start`, the other half of the fence, see
`metadata_log`) is one ConfigMap updated with its `resourceVersion` as a
precondition, so it only grows: `compact` raises it before it deletes the
entries and snapshots below the older of the two newest snapshots, and
`append` reads it after its POST landed — a slot that was free because it
was compacted reads as at or below it, and the append is refused (and its
object deleted again) — and checks the entry before its own is still there
(a store restored from an older copy under a running controller). It costs
every append two GETs.

The sharded ConfigMaps of the store before the log (`kelp.dev/metadata:
topic|cluster`) are read by `legacy()` for the one-time import.
Calls run in worker threads.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

from kelp.json_types import JsonObject
from kelp.kube.api import ApiClient, KubeApiError, KubeObject, request, request_list, request_object

from ..metadata.model import TopicStateJson
from ..metadata.records import (
    LegacyClusterDoc,
    MetadataEntry,
    MetadataSnapshot,
    as_entry,
    as_legacy_cluster,
    as_snapshot,
    as_topic,
)
from .metadata_log import (
    BlockingMetadataLog,
    LegacyMetadata,
    LoadedLog,
    MetadataLogConflict,
    MetadataUnreadable,
    _Raced,
    assemble,
    compaction_start,
    went_back,
)

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
                if exc.status == 404 and not self._exists(self._marker_name(offset)):
                    raise _Raced() from None  # compacted while it was read
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
        for _attempt in range(5):
            try:
                return self._load_once()
            except _Raced:
                continue  # a compaction removed the chunks of a snapshot listed a moment ago
        raise MetadataUnreadable(f"the metadata log of cluster '{self.cluster}' kept changing under 5 reads; retry")

    def _load_once(self) -> LoadedLog:
        items = self._list(f"{ROLE} in (log-entry,snapshot)")
        markers = {self._offset(o): o for o in items if o["metadata"]["labels"].get(ROLE) == "snapshot"}
        entries = {self._offset(o): o for o in items if o["metadata"]["labels"].get(ROLE) == "log-entry"}
        return assemble(list(markers), lambda off: self._read_snapshot(off, markers[off]), list(entries),
                        lambda off: as_entry(self._doc(entries[off])), where=f"cluster '{self.cluster}'")

    def _start_name(self) -> str:
        return f"kelp-{self.cluster}-meta-start"

    def _stored_start(self) -> tuple[int, KubeObject | None]:
        """The log start ConfigMap's offset and the object (for its resourceVersion); (-1, None) if absent."""
        try:
            obj = request_object(self.api, "GET", f"{self._base}/{self._start_name()}")
        except KubeApiError as exc:
            if exc.status == 404:
                return -1, None
            raise MetadataUnreadable(f"the metadata log start {self._start_name()}: {exc}") from None
        try:
            return int(str(self._doc(obj)["offset"])), obj
        except (KeyError, ValueError):
            raise MetadataUnreadable(f"the metadata log start {self._start_name()} is malformed") from None

    def _log_start(self) -> int:
        """Every slot at or below it is compacted (or a zombie's). Before the first compaction of a store that has
        none stored (written by a version that compacted up to its newest snapshot): that snapshot's offset."""
        start, obj = self._stored_start()
        if obj is not None:
            return start
        markers = [self._offset(o) for o in self._list(f"{ROLE}=snapshot")]
        return max(markers) if markers else -1

    def _read_entry(self, offset: int) -> MetadataEntry | None:
        start = self._log_start()
        if offset <= start:
            raise MetadataLogConflict(f"metadata offset {offset} is at or below the log start {start}")
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
        # The slot was free. If a compaction freed it, the log start it raised first is at or above it.
        start = self._log_start()
        if offset <= start:
            self._delete(self._entry_name(offset))  # below every snapshot a reader uses: it was never read
            raise MetadataLogConflict(f"metadata offset {offset} is at or below the log start {start}: a newer "
                                      "controller wrote and compacted past it")
        if offset - 1 > start and not self._exists(self._entry_name(offset - 1)):
            self._delete(self._entry_name(offset))  # after a hole: no reader could ever read it
            raise MetadataLogConflict(went_back(offset, f"cluster '{self.cluster}'"))

    def _exists(self, name: str) -> bool:
        try:
            request_object(self.api, "GET", f"{self._base}/{name}")
        except KubeApiError as exc:
            if exc.status == 404:
                return False
            raise MetadataUnreadable(f"metadata ConfigMap {name}: {exc}") from None
        return True

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

    def _raise_start(self, start: int) -> int:
        """Store the log start as `start` unless it is at or above it already (compare-and-swap on the ConfigMap's
        resourceVersion: two compactions never lower it); returns the start now stored."""
        for _attempt in range(10):
            current, obj = self._stored_start()
            if obj is not None and current >= start:
                return current
            body = self._body(self._start_name(), "log-start", start, json.dumps({"offset": start}))
            try:
                if obj is None:
                    request(self.api, "POST", self._base, body=body)
                else:
                    body["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
                    request(self.api, "PUT", f"{self._base}/{self._start_name()}", body=body)
                return start
            except KubeApiError as exc:
                if exc.status != 409:
                    raise
        raise MetadataUnreadable(f"the metadata log start {self._start_name()} kept changing under 10 writes")

    def _compact(self, snapshot_offset: int) -> int:
        markers = [self._offset(o) for o in self._list(f"{ROLE}=snapshot")]
        current, obj = self._stored_start()
        stored = current if obj is not None else -1
        start = compaction_start(markers, snapshot_offset, stored)
        if start > stored:
            start = self._raise_start(start)  # stored before anything it covers is deleted
        if start < 0:
            return 0
        gone = 0
        for item in self._list(f"{ROLE} in (log-entry,snapshot-chunk)"):
            role = item["metadata"]["labels"].get(ROLE)
            offset = self._offset(item)
            if (role == "log-entry" and offset <= start) or (role == "snapshot-chunk" and offset < start):
                self._delete(item["metadata"]["name"])
                gone += role == "log-entry"  # a snapshot counts once, by its marker, as on the file backend
        for item in self._list(f"{ROLE}=snapshot"):  # markers after their chunks
            if self._offset(item) < start:
                self._delete(item["metadata"]["name"])
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
