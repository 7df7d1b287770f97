"""What a Kafka request's principal may do: Kafka's AuthHelper for the handlers.

Why: every handler asks the same few questions — may this principal do this on that resource, which of
these names may it, may it act on the cluster, what operations may it do on a resource — with the
principal and address of its connection (`RequestContext.principal`, `.peer`). `access(ctx)` is the
broker's `Access` for them (`acl_manager`: everything allowed without an authorizer), and each handler
module keeps the checks of its APIs together in one block, the ones Kafka's KafkaApis (and, for what a
KRaft broker forwards, ControllerApis) makes, so a reader can compare them side by side.

Speed: produce and fetch ask once per distinct topic of a request; without an authorizer that is a flag
test, with one a lookup in the authorizer's per-principal decision cache.

This module must never answer a request itself: handlers build their own answers with Kafka's codes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kelp.security.acl import AclOperation, ResourceType

from ..acl_manager import Access, host_of

if TYPE_CHECKING:  # the handlers import this module while their package imports them: no import back at run time
    from .handlers.registry import RequestContext

__all__ = ["Access", "access", "AclOperation", "ResourceType", "denied_message"]


def access(ctx: RequestContext) -> Access:
    return Access(ctx.broker.acls, ctx.principal, host_of(ctx.peer))


def denied_message(ctx: RequestContext, api: str) -> str:
    """The message of a request refused as a whole for lack of a cluster permission (Kafka's
    ClusterAuthorizationException in authorizeClusterOperation)."""
    return f"Request {api} v{ctx.api_version} from {ctx.principal} is not authorized."
