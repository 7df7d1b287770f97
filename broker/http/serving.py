"""`serving(request)`: the broker's parts, for a route that answers only once the broker serves.

Why: the HTTP listener starts before the parts exist, and its starting gate
(`app._starting_middleware`) answers 503 to every route but health, metrics
and the controller's metadata deliveries until the broker has started. A
route behind the gate reads the parts here, typed, instead of reaching into
a half-built broker; should one run before the parts exist (an app built
without the gate), it gets the gate's answer, never an AttributeError.

This module must never hold state: the parts live on the broker.
"""

from __future__ import annotations

from aiohttp import web

from ..parts import BrokerParts
from .keys import BROKER
from .problems import HttpProblem

__all__ = ["serving", "still_starting"]


def still_starting(broker_id: int) -> HttpProblem:
    """The answer of every route behind the starting gate while the broker starts."""
    return HttpProblem(503, f"broker {broker_id} is still starting (log recovery, joining the cluster); retry")


def serving(request: web.Request) -> BrokerParts:
    broker = request.app[BROKER]
    parts = broker.parts
    if parts is None:
        raise still_starting(broker.config.broker_id)
    return parts
