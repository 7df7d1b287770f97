"""ACLs as this broker knows them, and every authorization decision a Kafka handler or HTTP route asks for.

Why: authorization has one door. `authorizer.class.name` decides whether it is on (empty: every request is
allowed, as in Kafka); when it is, the decisions are `kelp.broker.security.authorizer.Authorizer`'s — Kafka
StandardAuthorizer's rules, `super.users`, `allow.everyone.if.no.acl.found`, a per-principal decision
cache. Its ACLs are the cluster's: the controller stores them in the metadata log (`cluster.controller.acl_admin`),
every broker replays them (`apply_delta`: the cluster member tells it the log's image as it loads it at
start, then every delta as it applies it, before this process is registered too, so a starting broker
authorizes the very deliveries that register it), and each change reaches the authorizer as an add or a
remove, which empties its cache, so no decision outlives the ACLs it read. CreateAcls and DeleteAcls go to
the controller through the cluster member and return once this broker has applied the change
(`ControllerDoor.routing`), so a client sees its own ACLs at once.

Brokers are principals too: a replica fetch, an OffsetForLeaderEpoch from a follower and every
`/cluster/v1` call must come from a super user or a principal with CLUSTER_ACTION on the cluster (Kafka's
rule), so the inter-broker principal must be one of those once authorization is on.

`Access` is one request's principal and host against the manager: what the Kafka handlers
(`kafka.access`) and the HTTP routes (`http.access.route_access`) ask.

This module must never decide anything Kafka would decide differently (the rules are the security core's),
nor do I/O itself: changes go through the controller.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar, cast

from kelp.config.broker import BrokerConfig
from kelp.errors import InvalidRequestError, SecurityDisabledError
from kelp.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourceType,
    java_host_address,
    parse_super_users,
    supported_operations,
)
from kelp.security.acl_json import binding_to_json, filter_to_json
from kelp.security.authorizer import Authorizer
from kelp.security.principal import KafkaPrincipal

from .loop_budget import LoopBudget
from .metadata.controller_answers import CreateAclsAnswer, DeleteAclsAnswer
from .metadata.image import MetadataDelta
from .topic_manager import ControllerDoor

__all__ = ["AclManager", "Access", "host_of", "host_of_ip"]

log = logging.getLogger("kelp.broker.acls")

_T = TypeVar("_T")
WRITES_CACHED = 65536  # produce decisions remembered (`AclManager.writes`)


@functools.lru_cache(maxsize=4096)
def _java_host(ip: str) -> str:
    try:
        return java_host_address(ip)
    except ValueError:
        return ip  # not an IP address (a test's peer name): compared as given


def host_of(peer: str) -> str:
    """The host an ACL's `host` is compared with, from a peer address `ip:port` (IPv6 without brackets, as the
    Kafka listener writes it): Java's InetAddress.getHostAddress() form of the IP."""
    ip = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return _java_host(ip.strip("[]"))


def host_of_ip(ip: str) -> str:
    """The same for an address without a port (an HTTP request's `remote`)."""
    return _java_host(ip.strip("[]"))


class AclManager:
    """The broker's ACLs and authorizer. Not thread-safe: the event loop owns it."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.enabled = bool(config["authorizer.class.name"])
        self.authorizer = Authorizer(super_users=parse_super_users(config["super.users"]),
                                     allow_everyone_if_no_acl_found=bool(config["allow.everyone.if.no.acl.found"]))
        self.cluster: ControllerDoor | None = None  # the ClusterMember (set by the composition root)
        # The produce path's own cache of WRITE-on-topic decisions: (principal type, principal name, peer IP as the
        # listener wrote it, topic) -> allowed, plain strings so a hit costs one dict lookup. Read directly by the
        # produce handler; emptied whenever the ACLs change (`apply_delta`), at most WRITES_CACHED entries.
        self.writes: dict[tuple[str, str, str, str], bool] = {}

    # -- replaying the metadata log -------------------------------------------------------
    def apply_delta(self, delta: MetadataDelta) -> None:
        """ACLs created and deleted by one step of the metadata log (or a snapshot load): each an add or a
        remove on the authorizer, which drops its cached decisions."""
        for binding in delta.acls_removed.values():
            self.authorizer.remove_acl(binding)
        for binding in delta.acls_added.values():
            self.authorizer.add_acl(binding)
        if delta.acls_added or delta.acls_removed:
            self.writes.clear()  # the authorizer emptied its cache too: no decision outlives the ACLs it read
            log.info("ACLs: %d created, %d deleted (%d in all)", len(delta.acls_added), len(delta.acls_removed),
                     len(self.authorizer))

    # -- decisions ------------------------------------------------------------------------
    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """May the principal, connected from `host` (`host_of`), do `operation` on the resource? Always yes without
        an authorizer."""
        if not self.enabled:
            return True
        return self.authorizer.authorize(principal, host, operation, resource_type, name)

    def may_write(self, principal: KafkaPrincipal, peer_ip: str, topic: str) -> bool:
        """WRITE on the topic, decided by the authorizer and remembered in `writes` (a miss there)."""
        allowed = self.authorizer.authorize(principal, _java_host(peer_ip.strip("[]")), AclOperation.WRITE,
                                            ResourceType.TOPIC, topic)
        if len(self.writes) >= WRITES_CACHED:
            self.writes.clear()
        self.writes[(principal.principal_type, principal.name, peer_ip, topic)] = allowed
        return allowed

    def authorize_cluster(self, principal: KafkaPrincipal, host: str, operation: AclOperation) -> bool:
        return self.authorize(principal, host, operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """May the principal do `operation` on at least one resource of the type (Kafka's authorizeByResourceType)?"""
        if not self.enabled:
            return True
        return self.authorizer.authorize_by_resource_type(principal, host, operation, resource_type)

    def filter_authorized(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                          resource_type: ResourceType, items: Iterable[_T], name: Callable[[_T], str]) -> set[str]:
        """The names among `items` (each named by `name(item)`) the principal may do `operation` on (Kafka's
        filterByAuthorized: each distinct name decided once)."""
        names = {name(i) for i in items}
        if not self.enabled:
            return names
        authorize = self.authorizer.authorize
        return {n for n in names if authorize(principal, host, operation, resource_type, n)}

    def authorized_operations(self, principal: KafkaPrincipal, host: str, resource_type: ResourceType,
                              name: str) -> int:
        """Kafka's authorizedOperations: the bit field (1 << code) of the operations the principal may do on
        the resource, among those the resource type supports."""
        bits = 0
        for op in supported_operations(resource_type):
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << int(op)
        return bits

    def is_super_user(self, principal: KafkaPrincipal) -> bool:
        return self.enabled and self.authorizer.is_super_user(principal)

    def is_listed_super_user(self, principal: KafkaPrincipal) -> bool:
        """Whether `super.users` names the principal, with or without an authorizer (brokers vouching for a
        client's principal are trusted by it when no ACLs say so: `http.access.route_access.forwarded_principal`)."""
        return self.authorizer.is_super_user(principal)

    # -- DescribeAcls, CreateAcls, DeleteAcls -------------------------------------------------
    def _require_enabled(self) -> None:
        if not self.enabled:
            raise SecurityDisabledError("No Authorizer is configured on the broker (authorizer.class.name is "
                                        "empty): ACLs are neither stored nor enforced")

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """DescribeAcls: the ACLs the filter matches, as this broker has applied them."""
        self._require_enabled()
        return self.authorizer.acls(acl_filter)

    async def create(self, bindings: Sequence[object]) -> CreateAclsAnswer:
        """CreateAcls through the controller: bindings as JSON (`security.acl_json`), each answered in order."""
        self._require_enabled()
        answer = await self._door().routing.call("create_acls", acls=list(bindings))
        return cast(CreateAclsAnswer, answer)  # the controller's answer to this operation

    async def create_bindings(self, bindings: Sequence[AclBinding]) -> CreateAclsAnswer:
        return await self.create([binding_to_json(b) for b in bindings])

    async def delete(self, filters: Sequence[object]) -> DeleteAclsAnswer:
        """DeleteAcls through the controller: filters as JSON, each answered with the bindings it deleted."""
        self._require_enabled()
        answer = await self._door().routing.call("delete_acls", filters=list(filters))
        return cast(DeleteAclsAnswer, answer)  # the controller's answer to this operation

    async def delete_filters(self, filters: Sequence[AclBindingFilter]) -> DeleteAclsAnswer:
        return await self.delete([filter_to_json(f) for f in filters])

    def _door(self) -> ControllerDoor:
        if self.cluster is None:
            raise InvalidRequestError("this broker has not joined its cluster yet; retry")
        return self.cluster


class Access:
    """One request's principal and host against the broker's ACLs."""

    __slots__ = ("acls", "principal", "host", "enabled")

    def __init__(self, acls: AclManager, principal: KafkaPrincipal, host: str) -> None:
        self.acls = acls
        self.principal = principal
        self.host = host
        self.enabled = acls.enabled

    def allows(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        if not self.enabled:
            return True
        return self.acls.authorizer.authorize(self.principal, self.host, operation, resource_type, name)

    def allows_cluster(self, operation: AclOperation) -> bool:
        return self.allows(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def allowed(self, operation: AclOperation, resource_type: ResourceType, names: Iterable[str]) -> set[str]:
        """The distinct names among `names` the principal may do `operation` on (Kafka's filterByAuthorized)."""
        if not self.enabled:
            return set(names)
        authorize = self.acls.authorizer.authorize
        principal, host = self.principal, self.host
        return {n for n in set(names) if authorize(principal, host, operation, resource_type, n)}

    async def allowed_in_slices(self, operation: AclOperation, resource_type: ResourceType,
                                names: Iterable[str]) -> set[str]:
        """`allowed`, giving the event loop a turn every few milliseconds: thousands of names (Metadata of every
        topic) are a few hundred milliseconds of authorizer checks."""
        if not self.enabled:
            return set(names)
        authorize = self.acls.authorizer.authorize
        principal, host = self.principal, self.host
        budget = LoopBudget()
        out: set[str] = set()
        for n in set(names):
            if authorize(principal, host, operation, resource_type, n):
                out.add(n)
            await budget.tick()
        return out

    def allows_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType: `operation` on at least one resource of the type."""
        return self.acls.authorize_by_resource_type(self.principal, self.host, operation, resource_type)

    def operations(self, resource_type: ResourceType, name: str) -> set[int]:
        """Kafka's authorizedOperations for the resource, as kafka-python's responses carry that bit field: the
        codes of the operations allowed (every supported one without an authorizer)."""
        bits = self.acls.authorized_operations(self.principal, self.host, resource_type, name)
        return {op for op in range(32) if bits >> op & 1}
