"""Kafka API handlers, one module per API family; importing this package registers them all.

A module registers with `@handles(RequestClass, min_version=..., max_version=...)`
from `registry`. Every family is imported plainly: a module that fails to
import fails the broker's start with its traceback, never passes for an API
left out (ApiVersions advertises exactly what registered).
"""

from __future__ import annotations

from . import (  # noqa: F401  (imported for their registrations)
    admin,
    api_versions,
    consumer_groups,
    fetch,
    groups,
    metadata,
    offsets,
    produce,
    producer_ids,
    sasl,
    share_group_admin,
    share_groups,
    transactions,
    txn_markers,
)
from .registry import RequestContext, all_handlers, get_handler, handles

__all__ = ["RequestContext", "all_handlers", "get_handler", "handles"]
