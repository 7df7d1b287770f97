"""How the operator reaches a Cluster's brokers: their admin HTTP API, found one way.

Why: Topic and ConsumerGroup resources are realised through the brokers'
`/admin/v1` API (topics are created by the controller whichever broker is
asked; a group is described by its coordinator, which a 421 answer names).
The address comes from one function: the client Service
`http://<cluster>.<ns>.svc:<httpPort>` inside a cluster, or, with
`KELP_OPERATOR_BROKER_ADDRESS=pod-ip` (an operator outside the pod network's
DNS, as on the kube test tier), the IPs of the broker pods that are Ready.
Every call is bounded by a timeout.

A secured Cluster (`spec.listeners.kafka`) serves its admin API over HTTPS and asks for client
certificates: the operator presents its own (`<cluster>-operator-tls`, subject `CN=kelp-operator,O=kelp.dev`,
issued by the cluster CA, a super user of the brokers) and trusts only the cluster CA (`operator_tls_context`).
The host name is checked against the broker certificate's names when the address is the client Service;
with `pod-ip` addresses it is not (pod IPs change at every restart): the cluster CA, which signs nothing but
this cluster's brokers and the operator, is what authenticates the broker then.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from pathlib import Path
from typing import Mapping, cast
from urllib.parse import quote, urlencode

import aiohttp

from kelp.json_types import JsonValue

from ..kube.client import POD, KubeClient
from ..manifests.builders import selector_for
from ..manifests.spec import ClusterSpec
from ..model.admin_types import (
    AclBinding,
    AclCreateResults,
    AclDeleteResults,
    AclFilter,
    AclList,
    BrokerConfigs,
    BrokerHoldings,
    ClusterView,
    ElectionResults,
    GroupDescription,
    NewTopic,
    OffsetResetRequest,
    PartitionMove,
    Reassignment,
    ReassignmentList,
    ScramCredentialUpsert,
    TopicDescription,
    TopicList,
    TopicListing,
    UserCredentials,
    UserList,
)
from ..model.objects import Pod

__all__ = ["AdminError", "BrokerAdmin", "broker_urls", "address_mode", "CONFIGS_PATH", "operator_tls_context"]

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
    scheme = "https" if spec.secured else "http"
    if address_mode() == "service":
        return [f"{scheme}://{spec.name}.{spec.namespace}.svc:{spec.http_port}"]
    pods = await kube.list(POD, spec.namespace, labels=selector_for(spec))
    ips = sorted((p["metadata"]["name"], p["status"]["podIP"]) for p in pods
                 if _ready(p) and (p.get("status") or {}).get("podIP"))
    return [f"{scheme}://{ip}:{spec.http_port}" for _name, ip in ips]


def operator_tls_context(data: Mapping[str, bytes], *, check_hostname: bool) -> ssl.SSLContext | None:
    """A client context presenting the operator's certificate (`tls.crt`, `tls.key`) and trusting `ca.crt`;
    None when the Secret does not hold all three yet.

    `load_cert_chain` reads files only: the key is written to a private temporary directory (0700, tmpfs /tmp in
    the operator's pod) and removed before this returns.
    """
    if not all(data.get(k) for k in ("tls.crt", "tls.key", "ca.crt")):
        return None
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=data["ca.crt"].decode("ascii"))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = check_hostname
    with tempfile.TemporaryDirectory(prefix="kelp-operator-tls-") as directory:
        cert, key = Path(directory, "tls.crt"), Path(directory, "tls.key")
        for path, content in ((cert, data["tls.crt"]), (key, data["tls.key"])):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(content)
        context.load_cert_chain(cert, key)
    return context


def _topic_path(name: str) -> str:
    return f"/admin/v1/topics/{quote(name, safe='')}"


def _group_path(group: str) -> str:
    return f"/admin/v1/groups/{quote(group, safe='')}"


class BrokerAdmin:
    """Admin calls to one cluster: the first URL that answers serves the request.

    `request` is the one HTTP call; the methods below it are the admin API as the operator uses it,
    each answer typed as the broker shapes it (`admin_types.py`: the one place an answer gets its type).
    """

    def __init__(self, session: aiohttp.ClientSession, urls: list[str], *, tls: ssl.SSLContext | None = None,
                 unavailable: str | None = None) -> None:
        """`tls`: the operator's client context for HTTPS brokers; `unavailable`: why no call can be made yet
        (a secured cluster whose operator certificate is not issued), raised as an unreachable AdminError."""
        self.session = session
        self.urls = urls
        self.tls = tls
        self.unavailable = unavailable

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None or any(u.startswith("https:") for u in self.urls) else "http"

    async def request(self, method: str, path: str, body: object = None, *, urls: list[str] | None = None
                      ) -> JsonValue:
        if self.unavailable is not None:
            raise AdminError(0, f"{method} {path}: {self.unavailable}")
        last = "no broker address (no broker pod is Ready)"
        for url in urls or self.urls:
            try:
                async with self.session.request(method, url + path, json=body, timeout=TIMEOUT,
                                                ssl=self.tls if self.tls is not None else True) as resp:
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
            target = [f"{self.scheme}://{b['http_host']}:{b['http_port']}" for b in view.get("brokers", [])
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

    async def alter_broker_entity_configs(self, broker: int, patch: dict[str, str | None]) -> None:
        """Set (or with None delete) one broker's own dynamic configs (`--entity-name <id>`)."""
        await self.request("PATCH", f"/admin/v1/brokers/{int(broker)}/configs", {"configs": patch})

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

    async def topic_overrides(self, name: str) -> dict[str, str]:
        """The topic's config overrides (source `topic`)."""
        described = await self.describe_topic(name)
        return {k: str(v["value"]) for k, v in (described.get("configs") or {}).items() if v.get("source") == "topic"}

    async def patch_topic_configs(self, name: str, patch: dict[str, str | None]) -> None:
        """Set the given overrides, or with None delete them; the others stay."""
        await self.request("PATCH", _topic_path(name) + "/configs", {"configs": patch})

    async def delete_topic(self, name: str) -> None:
        await self.request("DELETE", _topic_path(name))

    # -- partitions -----------------------------------------------------------------------------
    async def reassign(self, moves: list[PartitionMove]) -> None:
        await self.request("POST", "/admin/v1/partitions/reassign", {"partitions": moves})

    async def decommission(self, broker: int, *, decommissioned: bool = True) -> BrokerHoldings:
        """Decommission (no new replicas or leaders there) or recommission a broker; what it holds afterwards."""
        return cast(BrokerHoldings, await self.request("POST" if decommissioned else "DELETE",
                                                       f"/admin/v1/brokers/{broker}/decommission"))

    async def holdings(self, broker: int) -> BrokerHoldings:
        """What a broker holds as the controller has it (not the answering broker's view, which may lag)."""
        return cast(BrokerHoldings, await self.get(f"/admin/v1/brokers/{broker}/decommission"))

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

    # -- ACLs (issue 20; Kafka's names: TOPIC, PREFIXED, READ, ALLOW) ------------------------------------------------
    async def list_acls(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        """`GET /admin/v1/acls`, narrowed by the filter's fields (e.g. one principal's)."""
        query = urlencode(sorted((acl_filter or {}).items()))
        return cast(AclList, await self.get("/admin/v1/acls" + (f"?{query}" if query else "")))["acls"]

    async def create_acls(self, bindings: list[AclBinding]) -> AclCreateResults:
        return cast(AclCreateResults, await self.request("POST", "/admin/v1/acls", {"acls": bindings}))

    async def delete_acls(self, filters: list[AclFilter]) -> AclDeleteResults:
        return cast(AclDeleteResults, await self.request("POST", "/admin/v1/acls/delete", {"filters": filters}))

    # -- SCRAM users (AlterUserScramCredentials / DescribeUserScramCredentials) --------------------------------------
    async def list_users(self) -> list[UserCredentials]:
        return cast(UserList, await self.get("/admin/v1/users"))["users"]

    async def put_scram_credential(self, user: str, upsert: ScramCredentialUpsert) -> None:
        """Store a salted credential (never the password) for `user`."""
        await self.request("PUT", f"/admin/v1/users/{quote(user, safe='')}/scram-credentials", upsert)

    async def delete_scram_credential(self, user: str, mechanism: str) -> None:
        """Remove `user`'s credential of `mechanism`; AdminError 404 when it has none."""
        await self.request("DELETE", f"/admin/v1/users/{quote(user, safe='')}/scram-credentials?"
                           + urlencode({"mechanism": mechanism}))
