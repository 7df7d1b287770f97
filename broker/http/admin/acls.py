"""`/admin/v1/acls`: list, create and delete the cluster's ACLs over HTTP, as `kafka-acls` does over Kafka.

Why: the operator (KelpUser's `authorization.acls[]`), `kelp acls` and scripts manage ACLs without speaking
the Kafka admin protocol. The contract, which the operator is built against:

- `GET /admin/v1/acls` with an optional filter in the query (`resourceType`, `resourceName`, `patternType`,
  `principal`, `host`, `operation`, `permission`; an omitted one matches anything, `patternType=MATCH` every
  ACL that applies to a name) -> `{"acls": [binding, ...]}`;
- `POST /admin/v1/acls` `{"acls": [binding, ...]}` -> 200 `{"results": [{"error": null | "message"}, ...]}`,
  one result per binding in order (one already there is a success);
- `POST /admin/v1/acls/delete` `{"filters": [filter, ...]}` -> 200
  `{"results": [{"error": null | "message", "deleted": [binding, ...]}, ...]}`;

a binding being `{"resourceType": "TOPIC"|"GROUP"|"CLUSTER"|"TRANSACTIONAL_ID", "resourceName", "patternType":
"LITERAL"|"PREFIXED", "principal": "User:alice", "host": "*", "operation": "READ"|..., "permission":
"ALLOW"|"DENY"}` (`security.acl_json`). Bindings are checked with Kafka's rules and messages, then created or
deleted by the controller in the metadata log; an answer comes once this broker has applied the change.
Without an authorizer the list answers 409 SECURITY_DISABLED and each binding or filter that error's message,
as Kafka's ACL APIs do. Who may call them (DESCRIBE, ALTER on the cluster) is the route table's
(`route_access`).

This module only translates JSON; the decisions are the AclManager's and the controller's.
"""

from __future__ import annotations

from typing import cast

from aiohttp import web

from kelp.errors import KelpError
from kelp.json_types import JsonData, JsonValue
from kelp.security.acl import InvalidAclError, validate_acl_binding, validate_acl_filter
from kelp.security.acl_json import FIELDS, AclBindingJson, binding_from_json, binding_to_json, filter_from_json

from ..json_body import read_json
from ..problems import HttpProblem, json_response
from ..serving import serving

__all__ = ["routes"]

routes = web.RouteTableDef()
PREFIX = "/admin/v1/acls"


def _json(binding: AclBindingJson) -> JsonData:
    return cast(JsonData, binding)  # a TypedDict of JSON values (mypy#4976)


def _items(body: JsonValue, key: str, what: str) -> list[JsonValue]:
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise HttpProblem(400, f"{what}: the body must be {{\"{key}\": [...]}}")
    return items


@routes.get(PREFIX)
async def list_acls(request: web.Request) -> web.Response:
    unknown = sorted(set(request.query) - set(FIELDS))
    if unknown:
        raise HttpProblem(400, f"unknown ACL filter parameter(s) {', '.join(unknown)}; known: {', '.join(FIELDS)}")
    try:
        acl_filter = filter_from_json(dict(request.query))
        validate_acl_filter(acl_filter)
    except InvalidAclError as exc:
        raise HttpProblem(400, f"ACL filter: {exc}") from None
    bindings = serving(request).acls.describe(acl_filter)
    return json_response({"acls": [_json(binding_to_json(b)) for b in bindings]})


@routes.post(PREFIX)
async def create_acls(request: web.Request) -> web.Response:
    docs = _items(await read_json(request), "acls", "create ACLs")
    results: list[JsonData] = []
    valid: list[tuple[int, JsonValue]] = []
    for i, doc in enumerate(docs):
        try:
            validate_acl_binding(binding_from_json(doc))
            valid.append((i, doc))
            results.append({"error": None})
        except InvalidAclError as exc:
            results.append({"error": str(exc)})
    if valid:
        try:
            answer = await serving(request).acls.create([doc for _, doc in valid])
            outcomes: list[str | None] = [None if r is None else r["message"] for r in answer["results"]]
        except KelpError as exc:
            outcomes = [str(exc)] * len(valid)
        for (i, _), outcome in zip(valid, outcomes, strict=True):
            results[i] = {"error": outcome}
    return json_response({"results": results})


@routes.post(PREFIX + "/delete")
async def delete_acls(request: web.Request) -> web.Response:
    docs = _items(await read_json(request), "filters", "delete ACLs")
    results: list[JsonData] = []
    valid: list[tuple[int, JsonValue]] = []
    for i, doc in enumerate(docs):
        try:
            validate_acl_filter(filter_from_json(doc))
            valid.append((i, doc))
            results.append({"error": None, "deleted": []})
        except InvalidAclError as exc:
            results.append({"error": str(exc), "deleted": []})
    if valid:
        try:
            answer = await serving(request).acls.delete([doc for _, doc in valid])
            for (i, _), outcome in zip(valid, answer["results"], strict=True):
                err = outcome["error"]
                results[i] = {"error": None if err is None else err["message"],
                              "deleted": [_json(b) for b in outcome["deleted"]]}
        except KelpError as exc:
            for i, _ in valid:
                results[i] = {"error": str(exc), "deleted": []}
    return json_response({"results": results})
