"""Confluent REST v3 resource shapes: `kind`, `metadata.self`, `related` links, `data` lists.

Why: every v3 answer is a resource (`{"kind": "KafkaTopic", "metadata": {"self": ..., "resource_name":
...}, ...}`) or a collection (`{"kind": "KafkaTopicList", "metadata": {"self": ..., "next": null}, "data":
[...]}`), with links to related resources as `{"related": url}` — the shapes of Confluent's published
OpenAPI document (api/v3/openapi.yaml of confluentinc/kafka-rest, which `tests/http/test_rest_v3.py`
validates every route's answers against). The route modules (`cluster`, `groups`, `records`,
`acls`) build their answers with these helpers, so links are spelled one way; URLs are absolute, on the
scheme and host the request came in on, as Confluent's are. The cluster id is the broker's `cluster.id`
(what Kafka's Metadata answers); a path naming another one is answered 404.

This module must never read or change broker state beyond the cluster id and its live brokers: it only shapes
JSON and checks the path's cluster and broker.
"""

from __future__ import annotations

from typing import TypeGuard
from urllib.parse import quote

from aiohttp import web

from kelp.errors import ErrorCode
from kelp.json_types import JsonData, JsonObject, JsonValue

from ..problems import HttpProblem, json_response
from ..serving import serving

__all__ = ["V3", "cluster_id", "Links", "links_of", "live_broker", "resource", "collection", "v3_response",
           "int_path", "is_int", "problem", "body_object"]

V3 = "/v3/clusters"
CLUSTER = V3 + "/{cluster_id}"


def cluster_id(request: web.Request) -> str:
    """This cluster's id; 404 when the path names another cluster."""
    cid = str(serving(request).config["cluster.id"])
    named = request.match_info.get("cluster_id")
    if named is not None and named != cid:
        raise HttpProblem(404, f"cluster '{named}' not found: this is cluster '{cid}' (GET /v3/clusters)",
                          error_code=404)
    return cid


class Links:
    """Absolute URLs and Confluent resource names under this request's cluster."""

    def __init__(self, request: web.Request, cid: str) -> None:
        self.cid = cid
        self.base = f"{request.url.scheme}://{request.host}{V3}/{cid}"

    def url(self, *path: object) -> str:
        """Each segment percent-encoded: group and member ids may hold "/", "?", "#" or spaces."""
        return "/".join([self.base, *(quote(str(p), safe="") for p in path)])

    def related(self, *path: object) -> dict[str, JsonData]:
        return {"related": self.url(*path)}

    def crn(self, *pairs: tuple[str, object]) -> str:
        return f"crn:///kafka={self.cid}" + "".join(f"/{k}={v}" for k, v in pairs)


def links_of(request: web.Request) -> Links:
    """The request's links, under its cluster (404 when the path names another one)."""
    return Links(request, cluster_id(request))


def live_broker(request: web.Request, links: Links, key: str = "broker_id") -> int:
    """The broker id the path names, a live member of the cluster; 404 naming the live ones otherwise."""
    broker_id = int_path(request, key, "broker")
    live = serving(request).cluster.state.brokers
    if broker_id not in live:
        raise HttpProblem(404, f"broker {broker_id} is not a live member of cluster '{links.cid}' (live: "
                               f"{sorted(live)})", error_code=404)
    return broker_id


def resource(kind: str, self_url: str, crn: str | None, /, **fields: JsonData) -> dict[str, JsonData]:
    return {"kind": kind, "metadata": {"self": self_url, "resource_name": crn}, **fields}


def collection(kind: str, self_url: str, data: list[JsonData]) -> dict[str, JsonData]:
    return {"kind": kind, "metadata": {"self": self_url, "next": None}, "data": data}


def v3_response(data: JsonData, *, status: int = 200) -> web.Response:
    return json_response(data, status=status)


def body_object(body: JsonValue, what: str) -> JsonObject:
    """A request body that must be a JSON object: 400 naming the request otherwise."""
    if not isinstance(body, dict):
        raise HttpProblem(400, f"{what}: the body must be a JSON object", error_code=400)
    return body


def is_int(value: JsonValue) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def int_path(request: web.Request, key: str, what: str) -> int:
    raw = request.match_info[key]
    if not raw.isdigit() or len(raw) > 10:
        raise HttpProblem(404, f"{what} '{raw}' not found: it must be a non-negative integer", error_code=404)
    return int(raw)


def problem(status: int, message: str, code: int | None = None) -> HttpProblem:
    """A v3 error: `{"error_code", "message"}`, the code a Kafka error code where one applies."""
    return HttpProblem(status, message, error_code=status if code is None else code)


UNKNOWN_TOPIC = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
