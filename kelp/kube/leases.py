"""Leases as `coordination.k8s.io/v1` Lease objects (the Kubernetes backend of `kelp.leases.LeaseBackend`).

Why: on Kubernetes, broker liveness and controller election use the same
Lease objects as the control plane's own components; every write carries
the `resourceVersion` it read, so two candidates racing for one Lease cannot
both win (the loser gets 409). The lease duration is kept exactly in the
annotation `kelp.dev/lease-duration-ms` (the Lease field has whole seconds).
Calls run on the control plane's threads (`kelp.control_io`). Shared: the brokers' liveness and controller
leases and the operator's own `kelp-operator` Lease are written here.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Mapping

from kelp.control_io import run_control
from kelp.leases import LeaseBackend, LeaseConflict, LeaseRecord, LeaseScan, LeaseUnreadable

from .api import ApiClient, KubeApiError, KubeObject, LeaseSpec, ObjectMeta, request, request_list, request_object

__all__ = ["KubeLeaseBackend"]

DURATION_ANNOTATION = "kelp.dev/lease-duration-ms"


def _micro_time(ms: int) -> str:
    """RFC 3339 with exactly six fractional digits, as metav1.MicroTime parses it."""
    return datetime.fromtimestamp(ms / 1000.0, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _ms(text: str | None) -> int:
    if not text:
        return 0
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


class KubeLeaseBackend(LeaseBackend):
    def __init__(self, api: ApiClient, *, namespace: str, labels: Mapping[str, str] | None = None) -> None:
        self.api = api
        self.namespace = namespace
        self.labels = dict(labels or {})
        self._base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    def _record(self, obj: KubeObject) -> LeaseRecord:
        meta, spec = obj.get("metadata", {}), obj.get("spec", {})
        annotations = dict(meta.get("annotations") or {})
        duration = annotations.pop(DURATION_ANNOTATION, None)
        try:
            return LeaseRecord(
                name=meta["name"], holder=spec.get("holderIdentity") or None,
                acquire_time_ms=_ms(spec.get("acquireTime")), renew_time_ms=_ms(spec.get("renewTime")),
                duration_ms=int(duration) if duration else int(spec.get("leaseDurationSeconds") or 0) * 1000,
                transitions=int(spec.get("leaseTransitions") or 0), annotations=annotations,
                version=str(meta.get("resourceVersion", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise LeaseUnreadable(f"Lease {meta.get('name')} cannot be read ({exc!r})") from None

    def _body(self, r: LeaseRecord, *, with_version: bool) -> KubeObject:
        meta: ObjectMeta = {"name": r.name, "namespace": self.namespace, "labels": self.labels,
                                "annotations": {**dict(r.annotations), DURATION_ANNOTATION: str(r.duration_ms)}}
        if with_version:
            meta["resourceVersion"] = r.version
        spec: LeaseSpec = {"leaseDurationSeconds": max(1, math.ceil(r.duration_ms / 1000)),
                                "leaseTransitions": r.transitions, "renewTime": _micro_time(r.renew_time_ms),
                                "acquireTime": _micro_time(r.acquire_time_ms)}
        if r.holder:
            spec["holderIdentity"] = r.holder
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}

    def _get(self, name: str) -> LeaseRecord | None:
        try:
            return self._record(request_object(self.api, "GET", f"{self._base}/{name}"))
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    def _objects(self, prefix: str) -> list[KubeObject]:
        out: list[KubeObject] = []
        cont = None
        selector = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        while True:
            query = [("limit", "500")] + ([("labelSelector", selector)] if selector else [])
            if cont:
                query.append(("continue", cont))
            page = request_list(self.api, self._base, query=query)
            out += [o for o in page.get("items", []) if o["metadata"]["name"].startswith(prefix)]
            cont = page.get("metadata", {}).get("continue")
            if not cont:
                return out

    def _list(self, prefix: str) -> list[LeaseRecord]:
        return [self._record(o) for o in self._objects(prefix)]

    def _scan(self, prefix: str) -> LeaseScan:
        records, unreadable = [], {}
        for obj in self._objects(prefix):
            try:
                records.append(self._record(obj))
            except LeaseUnreadable as exc:
                unreadable[str(obj["metadata"]["name"])] = str(exc)
        return records, unreadable

    def _write(self, r: LeaseRecord, *, create: bool) -> LeaseRecord:
        try:
            if create:
                obj = request_object(self.api, "POST", self._base, body=self._body(r, with_version=False))
            else:
                obj = request_object(self.api, "PUT", f"{self._base}/{r.name}", body=self._body(r, with_version=True))
        except KubeApiError as exc:
            if exc.status in (409, 404):
                raise LeaseConflict(f"lease {r.name}: {exc}") from None
            raise
        return self._record(obj)

    async def get(self, name: str) -> LeaseRecord | None:
        return await run_control(self._get, name)

    async def list(self, prefix: str) -> list[LeaseRecord]:
        return await run_control(self._list, prefix)

    async def scan(self, prefix: str) -> LeaseScan:
        return await run_control(self._scan, prefix)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        return await run_control(self._write, record, create=True)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        return await run_control(self._write, record, create=False)

    async def delete(self, name: str) -> None:
        def run() -> None:
            try:
                request(self.api, "DELETE", f"{self._base}/{name}")
            except KubeApiError as exc:
                if exc.status != 404:
                    raise
        await run_control(run)

    async def close(self) -> None:
        await run_control(self.api.close)
