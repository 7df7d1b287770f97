"""A minimal coordination.k8s.io/v1 Lease holder, the algorithm Kelp's operator uses to elect.

Why this exists: the kube tier checks that leader election through Lease
objects behaves on a real API server: a candidate acquires a Lease only when
it is free or expired (renewTime + leaseDurationSeconds in the past), the
holder renews it every retry interval, and every write carries the
resourceVersion it read, so two candidates racing for an expired Lease cannot
both win (the loser gets 409 Conflict).

What it must never do: take a Lease that another holder renewed within the
lease duration, or write without the resourceVersion it read.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from kubernetes import client


def _micro_time(ts: datetime) -> str:
    """RFC 3339 with exactly six fractional digits, as metav1.MicroTime parses it."""
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def write_lease(api: client.ApiClient, *, namespace: str, body: dict, replace: bool) -> client.V1Lease:
    """Create (POST) or replace (PUT) a Lease from a JSON dict, bypassing the model layer.

    kubernetes==37's typed methods validate the body into V1Lease, turning the
    MicroTime strings back into datetimes (see ``lease_body``); sending the dict
    through the ApiClient keeps them exact. Errors raise ApiException as usual.
    """
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    if replace:
        path += f"/{body['metadata']['name']}"
    params = api.param_serialize(
        "PUT" if replace else "POST", path,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body, auth_settings=["BearerToken"],
    )
    resp = api.call_api(*params)
    resp.read()
    return api.response_deserialize(resp, {"200": "V1Lease", "201": "V1Lease"}).data


def lease_body(api: client.ApiClient, lease: client.V1Lease) -> dict:
    """A Lease as a JSON dict whose MicroTime fields keep six fractional digits.

    The client's models turn times into datetimes and serialise them with
    isoformat(), which drops the fraction when microseconds are 0; the API
    server's MicroTime parser then refuses the object with 400.
    """
    body = api.sanitize_for_serialization(lease)
    spec = body.setdefault("spec", {})
    for key, value in (("acquireTime", lease.spec.acquire_time), ("renewTime", lease.spec.renew_time)):
        if isinstance(value, datetime):
            spec[key] = _micro_time(value)
    return body


@dataclass(kw_only=True)
class LeaseHolder:
    """Acquires and renews one Lease for ``identity`` from a background thread."""

    api: client.ApiClient
    namespace: str
    name: str
    identity: str
    lease_duration_s: int
    retry_interval_s: float
    acquired_at: float | None = None        # time.monotonic() of the first successful acquire
    last_renew_wall: datetime | None = None  # renewTime of our last successful write
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def holding(self) -> bool:
        return self.acquired_at is not None and not self._stop.is_set()

    def try_acquire_or_renew(self) -> bool:
        """One election round. Returns True when this identity holds the Lease afterwards."""
        coord = client.CoordinationV1Api(self.api)
        now = datetime.now(timezone.utc)
        try:
            lease = coord.read_namespaced_lease(self.name, self.namespace)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_duration_s,
                         "acquireTime": _micro_time(now), "renewTime": _micro_time(now),
                         "leaseTransitions": 0},
            }
            try:
                write_lease(self.api, namespace=self.namespace, body=body, replace=False)
            except client.ApiException as exc2:
                if exc2.status == 409:  # another candidate created it first
                    return False
                raise
            self.last_renew_wall = now
            return True

        spec = lease.spec
        mine = spec.holder_identity == self.identity
        if not mine and spec.holder_identity:
            renew = spec.renew_time or spec.acquire_time
            duration = spec.lease_duration_seconds or self.lease_duration_s
            if renew is not None and renew + timedelta(seconds=duration) > now:
                return False  # held and not expired
        body = lease_body(self.api, lease)
        if not mine:
            body["spec"]["holderIdentity"] = self.identity
            body["spec"]["acquireTime"] = _micro_time(now)
            body["spec"]["leaseTransitions"] = (spec.lease_transitions or 0) + 1
        body["spec"]["renewTime"] = _micro_time(now)
        body["spec"]["leaseDurationSeconds"] = self.lease_duration_s
        try:
            # replace carries metadata.resourceVersion from the read: optimistic concurrency.
            write_lease(self.api, namespace=self.namespace, body=body, replace=True)
        except client.ApiException as exc:
            if exc.status == 409:
                return False
            raise
        self.last_renew_wall = now
        return True

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.try_acquire_or_renew() and self.acquired_at is None:
                    self.acquired_at = time.monotonic()
            except Exception as exc:  # recorded and surfaced by the test
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(self.retry_interval_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"lease-{self.identity}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing (the Lease is left to expire, as when a process dies)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
