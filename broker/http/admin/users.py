"""Admin API `/admin/v1/users`: SCRAM users, the operator's door to what `kafka-configs --entity-type users` does.

The contract (the operator's KelpUser reconciler is built against it):

- `GET /admin/v1/users` -> `{"users": [{"name": "alice", "credentials": [{"mechanism": "SCRAM-SHA-512",
  "iterations": 8192}]}]}`, every user with a credential, by name;
- `PUT /admin/v1/users/{name}/scram-credentials` with `{"mechanism", "iterations", "salt": base64,
  "saltedPassword": base64}` (the client salts, as Kafka's admin client does: the password never travels)
  -> 200 and the user as `GET` shows it; 400 naming what is wrong (an unknown mechanism, iterations outside
  4096..16384, bad base64);
- `DELETE /admin/v1/users/{name}/scram-credentials?mechanism=SCRAM-SHA-512` -> 200 and the user's remaining
  credentials, 404 when the user has no such credential.

The rules are `kelp.broker.cluster.scram_users`' (shared with AlterUserScramCredentials); a change is
answered once this broker applied it. This module only translates JSON; it never sees a password.
"""

from __future__ import annotations

import base64
import binascii

from aiohttp import web

from kelp.errors import ErrorCode
from kelp.json_types import JsonData

from ...cluster.scram_users import (
    SaltedUpsertion,
    UserCredentials,
    alter_user_scram_credentials,
    describe_user_scram_credentials,
)
from ...parts import BrokerParts
from ..json_body import read_json
from ..problems import HttpProblem, json_response
from ..serving import serving

__all__ = ["routes"]

routes = web.RouteTableDef()
PREFIX = "/admin/v1/users"
# Kafka's per-user error codes as HTTP statuses.
_STATUS: dict[int, int] = {ErrorCode.RESOURCE_NOT_FOUND: 404, ErrorCode.DUPLICATE_RESOURCE: 409,
           ErrorCode.UNACCEPTABLE_CREDENTIAL: 400, ErrorCode.UNSUPPORTED_SASL_MECHANISM: 400}


def _view(user: UserCredentials) -> JsonData:
    return {"name": user.name, "credentials": [{"mechanism": m.mechanism_name, "iterations": i}
                                               for m, i in user.credentials]}


def _user(broker: BrokerParts, name: str) -> JsonData:
    found = describe_user_scram_credentials(broker.cluster.state.image, [name])[0]
    return _view(found) if found.error_code == ErrorCode.NONE else {"name": name, "credentials": []}


def _b64(value: object, key: str) -> bytes:
    if not isinstance(value, str) or not value:
        raise HttpProblem(400, f"'{key}' must be a non-empty base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise HttpProblem(400, f"'{key}' is not valid base64") from None


async def _apply(broker: BrokerParts, name: str, *, upsertion: SaltedUpsertion | None = None,
                 deletion: tuple[str, str] | None = None) -> None:
    (result,) = await alter_user_scram_credentials(broker.cluster, upsertions=[upsertion] if upsertion else [],
                                                   deletions=[deletion] if deletion else [])
    code = result["error_code"]
    if code:
        raise HttpProblem(_STATUS.get(code, 500), f"user {name!r}: {result['error_message']}", error_code=code)


@routes.get(PREFIX)
async def list_users(request: web.Request) -> web.Response:
    broker = serving(request)
    users = describe_user_scram_credentials(broker.cluster.state.image, None)
    return json_response({"users": [_view(u) for u in users]})


@routes.put(PREFIX + "/{name}/scram-credentials")
async def put_scram_credential(request: web.Request) -> web.Response:
    broker = serving(request)
    name = request.match_info["name"]
    body = await read_json(request)
    if not isinstance(body, dict):
        raise HttpProblem(400, 'the body must be {"mechanism", "iterations", "salt", "saltedPassword"}')
    mechanism, iterations = body.get("mechanism"), body.get("iterations")
    if not isinstance(mechanism, str):
        raise HttpProblem(400, "'mechanism' must be SCRAM-SHA-256 or SCRAM-SHA-512")
    if isinstance(iterations, bool) or not isinstance(iterations, int):
        raise HttpProblem(400, "'iterations' must be an integer (4096..16384)")
    upsertion = SaltedUpsertion(name, mechanism, iterations, _b64(body.get("salt"), "salt"),
                                _b64(body.get("saltedPassword"), "saltedPassword"))
    await _apply(broker, name, upsertion=upsertion)
    return json_response(_user(broker, name))


@routes.delete(PREFIX + "/{name}/scram-credentials")
async def delete_scram_credential(request: web.Request) -> web.Response:
    broker = serving(request)
    name = request.match_info["name"]
    mechanism = request.query.get("mechanism")
    if not mechanism:
        raise HttpProblem(400, "the query parameter 'mechanism' (SCRAM-SHA-256 or SCRAM-SHA-512) is required")
    await _apply(broker, name, deletion=(name, mechanism))
    return json_response(_user(broker, name))
