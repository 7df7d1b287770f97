"""How the operator reaches a Cluster's brokers: their admin HTTP API, found one way.

Why: Topic and ConsumerGroup resources are realised through the brokers'
`/admin/v1` API (topics are created by the controller whichever broker is
asked; a group is described by its coordinator, which a 421 answer names).
The address comes from one function: the client Service
`http://<cluster>.<ns>.svc:<httpPort>` inside a cluster, or, with
`KELP_OPERATOR_BROKER_ADDRESS=pod-ip` (an operator outside the pod network's
DNS, as on the kube test tier), the IPs of the broker pods that are Ready.
Every call is bounded by a timeout.
"""

from __future__ import annotations

import os
import re
from typing import Any

import aiohttp

from .builders import selector_for
from .kube import KubeClient
from .spec import ClusterSpec

__all__ = ["AdminError", "BrokerAdmin", "broker_urls", "address_mode"]

TIMEOUT = aiohttp.ClientTimeout(total=15, connect=3)


class AdminError(Exception):
    """A broker refused or could not be reached; `status` is the HTTP status (0 = unreachable)."""

    def __init__(self, status: int, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_code = error_code


def address_mode() -> str:
    mode = os.environ.get("KELP_OPERATOR_BROKER_ADDRESS", "service")
    if mode not in ("service", "pod-ip"):
        raise ValueError(f"KELP_OPERATOR_BROKER_ADDRESS must be service or pod-ip, got {mode!r}")
    return mode


def _ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


async def broker_urls(kube: KubeClient, spec: ClusterSpec) -> list[str]:
    if address_mode() == "service":
        return [f"http://{spec.name}.{spec.namespace}.svc:{spec.http_port}"]
    pods = await kube.list("Pod", spec.namespace, labels=selector_for(spec))
    ips = sorted((p["metadata"]["name"], p["status"]["podIP"]) for p in pods
                 if _ready(p) and (p.get("status") or {}).get("podIP"))
    return [f"http://{ip}:{spec.http_port}" for _name, ip in ips]


class BrokerAdmin:
    """Admin calls to one cluster: the first URL that answers serves the request."""

    def __init__(self, session: aiohttp.ClientSession, urls: list[str]) -> None:
        self.session = session
        self.urls = urls

    async def request(self, method: str, path: str, body: Any = None, *, urls: list[str] | None = None) -> Any:
        last = "no broker address (no broker pod is Ready)"
        for url in urls or self.urls:
            try:
                async with self.session.request(method, url + path, json=body, timeout=TIMEOUT) as resp:
                    text = await resp.text()
                    if resp.status < 300:
                        return await resp.json(content_type=None) if text else {}
                    try:
                        problem = await resp.json(content_type=None)
                        message, code = problem.get("message", text), problem.get("error_code")
                    except ValueError:
                        message, code = text[:300], None
                    raise AdminError(resp.status, f"{method} {path}: {message}", code)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                last = f"{url}: {exc or type(exc).__name__}"
        raise AdminError(0, f"no broker reachable for {method} {path} ({last})")

    async def get(self, path: str) -> Any:
        return await self.request("GET", path)

    async def group_request(self, method: str, path: str, body: Any = None) -> Any:
        """A group call: to the coordinator, following the 421 that names it."""
        try:
            return await self.request(method, path, body)
        except AdminError as exc:
            found = re.search(r"coordinated by broker (\d+)", exc.message)
            if exc.status != 421 or found is None:
                raise
            view = await self.get("/admin/v1/cluster")
            target = [f"http://{b['http_host']}:{b['http_port']}" for b in view.get("brokers", [])
                      if b["id"] == int(found.group(1))]
            if not target:
                raise
            return await self.request(method, path, body, urls=target)
