"""Requests for a REST consumer instance another broker holds: forwarded there.

Why: an instance lives on the broker that created it (its group membership,
positions and connections are that broker's), and its `base_uri` names that
broker's advertised HTTP address. A client behind a load balancer, though,
may send the next request to any broker. Instance ids Kelp generates name
the broker holding them (`ConsumerRegistry.new_name`), so whichever broker
receives a request for one it does not hold forwards the request as it came
(method, path, query, body, and the client's `Authorization`, so the holder
checks the same principal) and relays the answer. A forwarded request is
marked (`X-Kelp-Forwarded-By`) and never forwarded again. A holder that is
no longer a live member of the cluster, or that refuses the connection,
means the instance died with it: 404 with Confluent's 40403 saying so.

Limits: an instance whose name the client chose carries no broker id and is
served only where it was created (its `base_uri`); a client authenticated by
a TLS certificate alone cannot be forwarded as itself (the forwarding broker
has no certificate of the client's), so the holder sees no `Authorization`
and answers as for an anonymous caller.

This module must never change an instance: it only relays.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from kelp.errors import RestErrorCode

from ..parts import BrokerParts
from .consumer_instance import ConsumerRegistry
from .problems import HttpProblem

__all__ = ["FORWARDED_BY", "forward_if_held_elsewhere"]

FORWARDED_BY = "X-Kelp-Forwarded-By"
# Above the longest records long-poll (rest_consumers.MAX_RECORDS_TIMEOUT_MS) plus the time to answer.
FORWARD_TIMEOUT_S = 90.0
_RELAYED_REQUEST_HEADERS = ("Authorization", "Content-Type", "Accept")
_RELAYED_ANSWER_HEADERS = ("Content-Type",)


async def forward_if_held_elsewhere(request: web.Request, parts: BrokerParts,
                                    registry: ConsumerRegistry) -> web.StreamResponse | None:
    """The holder's answer when the instance the path names is another broker's; None to serve it here."""
    group, name = request.match_info["group"], request.match_info["instance"]
    if (group, name) in registry.instances or request.headers.get(FORWARDED_BY) is not None:
        return None
    holder = registry.holder_of(name)
    me = parts.config.broker_id
    if holder is None or holder == me:
        return None
    gone = (f"consumer instance '{name}' of group '{group}' was created on broker {holder}, which holds it; "
            f"broker {holder} is")
    endpoint = parts.cluster.brokers.get(holder)
    if endpoint is None:
        raise HttpProblem(404, f"{gone} not a live member of the cluster now (it died or left), and the instance "
                               "died with it; create a new consumer instance",
                          error_code=RestErrorCode.CONSUMER_INSTANCE_NOT_FOUND)
    headers = {k: request.headers[k] for k in _RELAYED_REQUEST_HEADERS if k in request.headers}
    headers[FORWARDED_BY] = str(me)
    body = await request.read()
    try:
        async with registry.forward_session().request(
                request.method, f"{endpoint.http_url}{request.rel_url}", data=body or None, headers=headers,
                allow_redirects=False, timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S)) as resp:
            payload = await resp.read()
            relayed = {k: resp.headers[k] for k in _RELAYED_ANSWER_HEADERS if k in resp.headers}
            return web.Response(status=resp.status, body=payload, headers=relayed)
    except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, ConnectionError) as exc:
        raise HttpProblem(404, f"{gone} not reachable at {endpoint.http_url} ({exc}): it died or is restarting, "
                               "and the instance died with it; create a new consumer instance",
                          error_code=RestErrorCode.CONSUMER_INSTANCE_NOT_FOUND) from None
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        raise HttpProblem(504, f"{gone} did not answer the forwarded request in time ({exc!r}); retry") from None
