"""Kafka API handlers, one module per API family; importing this package registers them all.

A module registers with `@handles(RequestClass, min_version=..., max_version=...)`
from `registry`. A family whose module is not present yet (e.g. groups while
that part is being written) is skipped with a debug log, never an import error.
"""

from __future__ import annotations

import importlib
import logging

from .registry import RequestContext, all_handlers, get_handler, handles

__all__ = ["RequestContext", "all_handlers", "get_handler", "handles", "load_all"]

_MODULES = (
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "offsets",
    "topics",
    "configs",
    "log_admin",
    "producer_ids",
    "groups",
    "reassignments",
)


def load_all() -> None:
    for name in _MODULES:
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            logging.getLogger("kelp.broker.kafka").debug("handler module %s not present", name)


load_all()
