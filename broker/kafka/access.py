"""What a Kafka request's principal may do: Kafka's AuthHelper for the handlers.

Why: every handler asks the same few questions — may this principal do this on that resource, which of
these names may it, may it act on the cluster, what operations may it do on a resource — with the
principal and address of its connection (`RequestContext.principal`, `.peer`). `Access` answers them from
the broker's `AclManager` (`ctx.broker.acls`, everything allowed without an authorizer), and each handler
module keeps the checks of its APIs together in one block, the ones Kafka's KafkaApis (and, for what a
KRaft broker forwards, ControllerApis) makes, so a reader can compare them side by side.

Speed: produce and fetch ask once per distinct topic of a request; without an authorizer that is a flag
test, with one a lookup in the authorizer's per-principal decision cache.

This module must never answer a request itself: handlers build their own answers with Kafka's codes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..acl_manager import AclManager, host_of
from ..security.acl import CLUSTER_NAME, AclOperation, ResourceType
from ..security.principal import KafkaPrincipal

if TYPE_CHECKING:  # the handlers import this module while their package imports them: no import back at run time
    from .handlers.registry import RequestContext

__all__ = ["Access", "access", "AclOperation", "ResourceType", "denied_message"]


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

    def allows_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType: `operation` on at least one resource of the type."""
        return self.acls.authorize_by_resource_type(self.principal, self.host, operation, resource_type)

    def operations(self, resource_type: ResourceType, name: str) -> set[int]:
        """Kafka's authorizedOperations for the resource, as kafka-python's responses carry that bit field: the
        codes of the operations allowed (every supported one without an authorizer)."""
        bits = self.acls.authorized_operations(self.principal, self.host, resource_type, name)
        return {op for op in range(32) if bits >> op & 1}


def access(ctx: RequestContext) -> Access:
    return Access(ctx.broker.acls, ctx.principal, host_of(ctx.peer))


def denied_message(ctx: RequestContext, api: str) -> str:
    """The message of a request refused as a whole for lack of a cluster permission (Kafka's
    ClusterAuthorizationException in authorizeClusterOperation)."""
    return f"Request {api} v{ctx.api_version} from {ctx.principal} is not authorized."
