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
from typing import cast
from urllib.parse import quote

import aiohttp

from kelp.json_types import JsonValue

from .admin_types import (
    BrokerConfigs,
    ClusterView,
    ElectionResults,
    GroupDescription,
    NewTopic,
    OffsetResetRequest,
    PartitionMove,
    Reassignment,
    ReassignmentList,
    TopicDescription,
    TopicList,
    TopicListing,
)
from .builders import selector_for
from .kube import POD, KubeClient
from .objects import Pod
from .spec import ClusterSpec

__all__ = ["AdminError", "BrokerAdmin", "broker_urls", "address_mode", "CONFIGS_PATH"]

TIMEOUT = aiohttp.ClientTimeout(total=15, connect=3)
CONFIGS_PATH = "/admin/v1/brokers/configs"


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


def _ready(pod: Pod) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


async def broker_urls(kube: KubeClient, spec: ClusterSpec) -> list[str]:
    if address_mode() == "service":
        return [f"http://{spec.name}.{spec.namespace}.svc:{spec.http_port}"]
    pods = await kube.list(POD, spec.namespace, labels=selector_for(spec))
    ips = sorted((p["metadata"]["name"], p["status"]["podIP"]) for p in pods
                 if _ready(p) and (p.get("status") or {}).get("podIP"))
    return [f"http://{ip}:{spec.http_port}" for _name, ip in ips]


def _topic_path(name: str) -> str:
    return f"/admin/v1/topics/{quote(name, safe='')}"


def _group_path(group: str) -> str:
    return f"/admin/v1/groups/{quote(group, safe='')}"


class BrokerAdmin:
    """Admin calls to one cluster: the first URL that answers serves the request.

    `request` is the one HTTP call; the methods below it are the admin API as the operator uses it,
    each answer typed as the broker shapes it (`admin_types.py`: the one place an answer gets its type).
    """

    def __init__(self, session: aiohttp.ClientSession, urls: list[str]) -> None:
        self.session = session
        self.urls = urls

    async def request(self, method: str, path: str, body: object = None, *, urls: list[str] | None = None
                      ) -> JsonValue:
        last = "no broker address (no broker pod is Ready)"
        for url in urls or self.urls:
            try:
                async with self.session.request(method, url + path, json=body, timeout=TIMEOUT) as resp:
                    text = await resp.text()
                    if resp.status < 300:
                        answer: JsonValue = await resp.json(content_type=None) if text else {}
                        return answer
                    try:
                        problem: JsonValue = await resp.json(content_type=None)
                    except ValueError:
                        problem = None
                    if isinstance(problem, dict):
                        message, code = problem.get("message", text), problem.get("error_code")
                    else:
                        message, code = text[:300], None
                    raise AdminError(resp.status, f"{method} {path}: {message}", code if isinstance(code, int)
                                     else None)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                last = f"{url}: {exc or type(exc).__name__}"
        raise AdminError(0, f"no broker reachable for {method} {path} ({last})")

    async def get(self, path: str) -> JsonValue:
        return await self.request("GET", path)

    async def group_request(self, method: str, path: str, body: object = None) -> JsonValue:
        """A group call: to the coordinator, following the 421 that names it."""
        try:
            return await self.request(method, path, body)
        except AdminError as exc:
            found = re.search(r"coordinated by broker (\d+)", exc.message)
            if exc.status != 421 or found is None:
                raise
            view = await self.cluster()
            target = [f"http://{b['http_host']}:{b['http_port']}" for b in view.get("brokers", [])
                      if b["id"] == int(found.group(1))]
            if not target:
                raise
            return await self.request(method, path, body, urls=target)

    # -- the cluster ------------------------------------------------------------------------
    async def cluster(self) -> ClusterView:
        return cast(ClusterView, await self.get("/admin/v1/cluster"))

    async def broker_configs(self) -> BrokerConfigs:
        """The cluster-wide dynamic broker configs."""
        return cast(BrokerConfigs, await self.get(CONFIGS_PATH))

    async def alter_broker_configs(self, patch: dict[str, str | None]) -> None:
        """Set (or with None delete) cluster-wide dynamic broker configs."""
        await self.request("PATCH", CONFIGS_PATH, {"configs": patch})

    # -- topics ---------------------------------------------------------------------------------
    async def list_topics(self) -> list[TopicListing]:
        return cast(TopicList, await self.get("/admin/v1/topics"))["topics"]

    async def describe_topic(self, name: str) -> TopicDescription:
        return cast(TopicDescription, await self.get(_topic_path(name)))

    async def create_topic(self, topic: NewTopic) -> TopicDescription:
        return cast(TopicDescription, await self.request("POST", "/admin/v1/topics", topic))

    async def add_partitions(self, name: str, partitions: int) -> TopicDescription:
        return cast(TopicDescription, await self.request("POST", _topic_path(name) + "/partitions",
                                                         {"partitions": partitions}))

    async def alter_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace the topic's config overrides with `configs`."""
        await self.request("PUT", _topic_path(name) + "/configs", {"configs": configs})

    async def delete_topic(self, name: str) -> None:
        await self.request("DELETE", _topic_path(name))

    # -- partitions -----------------------------------------------------------------------------
    async def reassign(self, moves: list[PartitionMove]) -> None:
        await self.request("POST", "/admin/v1/partitions/reassign", {"partitions": moves})

    async def reassignments(self) -> list[Reassignment]:
        return cast(ReassignmentList, await self.get("/admin/v1/partitions/reassignments"))["reassignments"]

    async def elect_leaders(self) -> ElectionResults:
        """Preferred-leader election for every partition."""
        return cast(ElectionResults, await self.request("POST", "/admin/v1/partitions/elect-leaders", {}))

    # -- groups (to the coordinator) ----------------------------------------------------------------
    async def describe_group(self, group: str) -> GroupDescription:
        return cast(GroupDescription, await self.group_request("GET", _group_path(group)))

    async def reset_offsets(self, group: str, reset: OffsetResetRequest) -> None:
        await self.group_request("POST", _group_path(group) + "/reset-offsets", reset)
