"""Requests for a REST consumer instance another broker holds: forwarded there.

Why: an instance lives on the broker that created it (its group membership,
positions and connections are that broker's), and its `base_uri` names that
broker's advertised HTTP address. A client behind a load balancer, though,
may send the next request to any broker. Whichever broker receives a request
for an instance it does not hold finds the holder and forwards the request as
it came (method, path, query, body) and relays the answer:

- an id Kelp generated names its holder (`ConsumerRegistry.new_name`,
  `rest-consumer-b<broker>-...`);
- a name the client chose is looked up: every other live broker is asked
  (`GET /cluster/v1/rest-consumers/{group}/{name}`, the control plane, brokers
  only), and the answer is remembered until the holder no longer has it.
  Creating an instance under a name another broker already holds in the same
  group is refused (409, 40902) the same way, so a name is the cluster's.

Who the request comes from travels with it. A client that proved itself in
the request (HTTP Basic, a bearer token) has its `Authorization` relayed, so
the holder checks the same credentials. A client proven by its TLS certificate
alone cannot be relayed as itself (the receiving broker has no certificate of
the client's), so the receiving broker authenticates as a broker (the control
plane's client certificate and credentials, `ControlSession.session`)
and names the client's principal in `X-Kelp-Forwarded-Principal`; the holder
takes that principal only from a broker (`route_access.forwarded_principal`:
the same trust as `/cluster/v1`), so the instance's owner check and the
route's ACLs apply to the client, not to the forwarding broker. A forwarded
request is marked (`X-Kelp-Forwarded-By`) and never forwarded again. A
holder that is no longer a live member of the cluster, or that refuses the
connection, means the instance died with it: 404 with Confluent's 40403
saying so.

Limit: two brokers creating the same client-chosen name for the same group
at the same moment both succeed (each asked the other first); requests then
reach whichever one the receiving broker learns of first.

This module must never change an instance: it only finds and relays.
"""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import aiohttp
from aiohttp import web

from kelp.errors import KelpError, RestErrorCode
from kelp.security.principal import ANONYMOUS

from ...parts import BrokerParts
from ..access.route_access import FORWARDED_BY, FORWARDED_PRINCIPAL, principal_of
from ..json_body import read_body
from ..problems import HttpProblem, json_response
from ..serving import serving
from .consumer_instance import ConsumerRegistry

__all__ = ["routes", "forward_if_held_elsewhere", "held_elsewhere"]

routes = web.RouteTableDef()
# Above the longest records long-poll (consumers.MAX_RECORDS_TIMEOUT_MS) plus the time to answer.
FORWARD_TIMEOUT_S = 90.0
LOOKUP_TIMEOUT_S = 5.0
_RELAYED_REQUEST_HEADERS = ("Authorization", "Content-Type", "Accept")
_RELAYED_ANSWER_HEADERS = ("Content-Type",)


def _lookup_path(group: str, name: str) -> str:
    return f"/cluster/v1/rest-consumers/{quote(group, safe='')}/{quote(name, safe='')}"


@routes.get("/cluster/v1/rest-consumers/{group}/{instance}")
async def held_here(request: web.Request) -> web.Response:
    """Whether this broker holds the instance (200 naming this broker, else 404): another broker asks."""
    broker = serving(request)
    group, name = request.match_info["group"], request.match_info["instance"]
    if (group, name) not in ConsumerRegistry.of(broker).instances:
        raise HttpProblem(404, f"broker {broker.config.broker_id} holds no consumer instance '{name}' of group "
                               f"'{group}'", error_code=RestErrorCode.CONSUMER_INSTANCE_NOT_FOUND)
    return json_response({"broker": broker.config.broker_id})


async def held_elsewhere(parts: BrokerParts, group: str, name: str) -> int | None:
    """The other live broker that holds (group, name), asking each (bounded); None when none does."""
    me = parts.config.broker_id

    async def ask(broker_id: int) -> int | None:
        try:
            status, _ = await asyncio.wait_for(parts.cluster.routing.broker_json(broker_id, _lookup_path(group, name)),
                                               LOOKUP_TIMEOUT_S)
        except (OSError, KelpError, aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            return None  # unreachable or dying: it holds nothing a client could use
        return broker_id if status == 200 else None

    found = await asyncio.gather(*(ask(b) for b in sorted(parts.cluster.state.brokers) if b != me))
    return next((b for b in found if b is not None), None)


async def _holder(parts: BrokerParts, registry: ConsumerRegistry, group: str, name: str) -> int | None:
    generated = registry.holder_of(name)
    if generated is not None:
        return generated
    remembered = registry.remote_holders.get((group, name))
    if remembered is not None:
        return remembered
    found = await held_elsewhere(parts, group, name)
    registry.remember_holder(group, name, found)
    return found


async def forward_if_held_elsewhere(request: web.Request, parts: BrokerParts,
                                    registry: ConsumerRegistry) -> web.StreamResponse | None:
    """The holder's answer when the instance the path names is another broker's; None to serve it here."""
    group, name = request.match_info["group"], request.match_info["instance"]
    if (group, name) in registry.instances or request.headers.get(FORWARDED_BY) is not None:
        return None
    holder = await _holder(parts, registry, group, name)
    me = parts.config.broker_id
    if holder is None or holder == me:
        return None
    gone = (f"consumer instance '{name}' of group '{group}' was created on broker {holder}, which holds it; "
            f"broker {holder} is")
    endpoint = parts.cluster.state.brokers.get(holder)
    if endpoint is None:
        registry.remember_holder(group, name, None)
        raise HttpProblem(404, f"{gone} not a live member of the cluster now (it died or left), and the instance "
                               "died with it; create a new consumer instance",
                          error_code=RestErrorCode.CONSUMER_INSTANCE_NOT_FOUND)
    headers = {k: request.headers[k] for k in _RELAYED_REQUEST_HEADERS if k in request.headers}
    headers[FORWARDED_BY] = str(me)
    session = registry.forward_session()
    principal = principal_of(request)
    if "Authorization" not in request.headers and principal != ANONYMOUS:
        # Proven by a certificate only: this broker vouches for the client, authenticated as a broker.
        headers[FORWARDED_PRINCIPAL] = quote(str(principal), safe="")
        session = parts.cluster.session.session()
    body = await read_body(request)
    try:
        async with session.request(
                request.method, f"{endpoint.http_url}{request.rel_url}", data=body or None, headers=headers,
                allow_redirects=False, timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S)) as resp:
            payload = await resp.read()
            relayed = {k: resp.headers[k] for k in _RELAYED_ANSWER_HEADERS if k in resp.headers}
            if resp.status == 404 or (request.method == "DELETE" and resp.status < 300):
                registry.remember_holder(group, name, None)  # gone from there: ask again next time
            return web.Response(status=resp.status, body=payload, headers=relayed)
    except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, ConnectionError) as exc:
        registry.remember_holder(group, name, None)
        raise HttpProblem(404, f"{gone} not reachable at {endpoint.http_url} ({exc}): it died or is restarting, "
                               "and the instance died with it; create a new consumer instance",
                          error_code=RestErrorCode.CONSUMER_INSTANCE_NOT_FOUND) from None
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        raise HttpProblem(504, f"{gone} did not answer the forwarded request in time ({exc!r}); retry") from None
