"""Confluent REST v3 ACLs: `GET|POST|DELETE /v3/clusters/{cluster_id}/acls`, `POST .../acls:batch`.

Why: Kafka's ACL model is already Kelp's (`kelp/security`, the AclManager, changes through the
controller); v3 clients speak it with snake_case fields — `resource_type`, `resource_name`,
`pattern_type`, `principal`, `host`, `operation`, `permission` — as query parameters (search, delete:
filters, an omitted one matches anything, as Kafka's DescribeAcls/DeleteAcls) or a JSON body (create: one
binding, answered 201; `acls:batch`: `{"data": [binding, ...]}`, every one checked before any is stored).
Search answers a `KafkaAclList`; delete answers the deleted bindings as `data`.
An invalid value is 400 naming the field.

Authorization (`route_access`): DESCRIBE on the cluster to search, ALTER to create or delete, as Kafka's.
This module only translates; the decisions are the AclManager's and the controller's.
"""

from __future__ import annotations

from urllib.parse import urlencode

from aiohttp import web

from kelp.errors import KelpError
from kelp.json_types import JsonData, JsonValue
from kelp.security.acl import InvalidAclError, validate_acl_binding, validate_acl_filter
from kelp.security.acl_json import AclBindingJson, binding_from_json, binding_to_json, filter_from_json

from ..json_body import read_json
from ..problems import HttpProblem, confluent_error
from ..serving import serving
from .views import CLUSTER, Links, body_object, cluster_id, collection, links_of, resource, v3_response

__all__ = ["routes"]

routes = web.RouteTableDef()
ACLS = CLUSTER + "/acls"
# v3 field -> the camelCase field of `acl_json`
_FIELDS = {"resource_type": "resourceType", "resource_name": "resourceName", "pattern_type": "patternType",
           "principal": "principal", "host": "host", "operation": "operation", "permission": "permission"}


def _to_kelp(doc: dict[str, JsonValue], what: str) -> dict[str, JsonValue]:
    unknown = sorted(set(doc) - set(_FIELDS))
    if unknown:
        raise HttpProblem(400, f"{what}: unknown field(s) {', '.join(unknown)}; known: {', '.join(_FIELDS)}",
                          error_code=400)
    return {_FIELDS[k]: v for k, v in doc.items()}


def _acl_data(links: Links, b: AclBindingJson) -> dict[str, JsonData]:
    fields = {"resourceType": b["resourceType"], "resourceName": b["resourceName"], "patternType": b["patternType"],
              "principal": b["principal"], "host": b["host"], "operation": b["operation"],
              "permission": b["permission"]}
    query = urlencode({k: fields[v] for k, v in _FIELDS.items()})
    return resource("KafkaAcl", f"{links.url('acls')}?{query}", None, cluster_id=links.cid,
                    resource_type=b["resourceType"], resource_name=b["resourceName"], pattern_type=b["patternType"],
                    principal=b["principal"], host=b["host"], operation=b["operation"], permission=b["permission"])


def _filter(request: web.Request) -> dict[str, JsonValue]:
    query: dict[str, JsonValue] = {k: v for k, v in request.query.items()}
    return _to_kelp(query, "ACL filter")


@routes.get(ACLS)
async def search_acls(request: web.Request) -> web.Response:
    links = links_of(request)
    try:
        acl_filter = filter_from_json(_filter(request))
        validate_acl_filter(acl_filter)
    except InvalidAclError as exc:
        raise HttpProblem(400, f"ACL filter: {exc}", error_code=400) from None
    data: list[JsonData] = [_acl_data(links, binding_to_json(b)) for b in serving(request).acls.describe(acl_filter)]
    return v3_response(collection("KafkaAclList", links.url("acls"), data))


def _binding_docs(items: list[JsonValue], what: str, *, indexed: bool) -> list[dict[str, JsonValue]]:
    """Each binding of a create request checked (400 naming the first bad one) before any is stored."""
    docs: list[dict[str, JsonValue]] = []
    for i, item in enumerate(items):
        where = f"{what}: data[{i}]" if indexed else what
        if not isinstance(item, dict):
            raise HttpProblem(400, f"{where}: must be a JSON object", error_code=400)
        doc = _to_kelp(item, where)
        try:
            validate_acl_binding(binding_from_json(doc))
        except InvalidAclError as exc:
            raise HttpProblem(400, f"{where}: {exc}", error_code=400) from None
        docs.append(doc)
    return docs


async def _create(request: web.Request, docs: list[dict[str, JsonValue]], what: str, *, indexed: bool
                  ) -> web.Response:
    answer = await serving(request).acls.create(docs)
    failed = [(i, r) for i, r in enumerate(answer["results"]) if r is not None]
    if failed:
        i, result = failed[0]
        where = f"{what}: data[{i}]" if indexed else what
        raise HttpProblem(400, f"{where}: {result['message']}", error_code=400)
    return web.Response(status=201)


@routes.post(ACLS)
async def create_acl(request: web.Request) -> web.Response:
    cluster_id(request)
    body = await read_json(request, what="create ACL body")
    if not isinstance(body, dict):
        raise HttpProblem(400, "create ACL: the body must be a JSON object", error_code=400)
    return await _create(request, _binding_docs([body], "create ACL", indexed=False), "create ACL", indexed=False)


@routes.post(ACLS + ":batch")
async def create_acls(request: web.Request) -> web.Response:
    """Confluent's batch form: `{"data": [binding, ...]}`, every binding checked before any is created."""
    cluster_id(request)
    what = "batch create ACLs"
    body = body_object(await read_json(request, what="batch create ACLs body"), what)
    items = body.get("data")
    if not isinstance(items, list) or not items:
        raise HttpProblem(400, f"{what}: 'data' must be a non-empty list of ACL bindings", error_code=400)
    return await _create(request, _binding_docs(items, what, indexed=True), what, indexed=True)


@routes.delete(ACLS)
async def delete_acls(request: web.Request) -> web.Response:
    links = links_of(request)
    doc = _filter(request)
    try:
        validate_acl_filter(filter_from_json(doc))
    except InvalidAclError as exc:
        raise HttpProblem(400, f"ACL filter: {exc}", error_code=400) from None
    try:
        answer = await serving(request).acls.delete([doc])
    except KelpError as exc:
        status, code = confluent_error(request, exc)
        raise HttpProblem(status, f"delete ACLs: {exc}", error_code=code) from None
    outcome = answer["results"][0]
    if outcome["error"] is not None:
        raise HttpProblem(400, f"delete ACLs: {outcome['error']['message']}", error_code=400)
    return v3_response({"data": [_acl_data(links, b) for b in outcome["deleted"]]})
