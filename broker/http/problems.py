"""JSON error bodies for every failure the HTTP API reports.

Why: scripts, the CLI and the operator read `{"error_code", "message"}` from
any 4xx/5xx, never an HTML page. `KelpError`s carry their Kafka error code
(a `kelp.errors.ErrorCode`) and `http_status`, answered as such on Kelp's own APIs and as Confluent's
code (`confluent_error`, `kelp.rest_errors`) on the REST Proxy's; problems found by the HTTP
layer itself (bad JSON, bad base64, wrong shapes) use `HttpProblem` with the
HTTP status as the code, or an `ErrorCode` / REST Proxy `RestErrorCode`.
Request bodies are read by `json_body.read_json`.

This module must never swallow an error without a message naming its cause.
"""

from __future__ import annotations

import json
import logging
from typing import Mapping

from aiohttp import web
from aiohttp.typedefs import Handler

from kelp.errors import ErrorCode, KelpError
from kelp.json_types import JsonData
from kelp.rest_errors import RestErrorCode, http_status

from .keys import BROKER, MAX_BODY

__all__ = ["HttpProblem", "error_response", "json_response", "error_middleware", "confluent_error", "rest_proxy_path"]

# Kafka errors Confluent's REST Proxy answers 400 with its KAFKA_BAD_REQUEST code (KafkaExceptionMapper).
_BAD_REQUEST = frozenset({
    ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.UNSUPPORTED_VERSION, ErrorCode.TOPIC_ALREADY_EXISTS,
    ErrorCode.INVALID_PARTITIONS, ErrorCode.INVALID_REPLICATION_FACTOR, ErrorCode.INVALID_CONFIG,
    ErrorCode.INVALID_REQUEST, ErrorCode.POLICY_VIOLATION, ErrorCode.SECURITY_DISABLED,
})
# Kafka's authorization failures: Confluent's REST Proxy answers each 403/40301 (AuthorizationException's subclasses)
_AUTHORIZATION = frozenset({
    ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
})

log = logging.getLogger("kelp.broker.http")


class HttpProblem(Exception):
    """A request the HTTP layer refuses: `status` 4xx/5xx, message names what was wrong."""

    def __init__(self, status: int, message: str, *, error_code: int | None = None,
                 details: Mapping[str, JsonData] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_code = status if error_code is None else error_code
        self.details = details or {}  # extra body fields naming what was wrong (e.g. topic, partition, offset)


def json_response(data: JsonData, *, status: int = 200, content_type: str = "application/json") -> web.Response:
    return web.Response(
        body=json.dumps(data, separators=(",", ":")).encode(),
        status=status,
        content_type=content_type,
    )


def error_response(status: int, error_code: int, message: str,
                   details: Mapping[str, JsonData] | None = None) -> web.Response:
    return json_response({"error_code": error_code, "message": message, **(details or {})}, status=status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except HttpProblem as exc:
        return error_response(exc.status, exc.error_code, exc.message, exc.details)
    except KelpError as exc:
        status, code = confluent_error(request, exc) if rest_proxy_path(request.path) else (exc.http_status, exc.code)
        return error_response(status, code, str(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = exc.text if exc.text and not exc.text.startswith(f"{exc.status}:") else exc.reason
        if exc.status == 404:
            message = f"no such endpoint: {request.method} {request.path}"
        elif exc.status == 405:
            message = f"method {request.method} is not allowed on {request.path}"
        elif exc.status == 413:
            limit = request.app.get(MAX_BODY)
            size = f" of {request.content_length} bytes" if request.content_length else ""
            message = (f"request body{size} is too large: one request may carry at most {limit} bytes "
                       "(http.request.max.bytes); split it into several requests"
                       ) if limit else f"request body too large: {exc.text or exc.reason}"
        return error_response(exc.status, exc.status, message)
    except Exception as exc:
        log.exception("HTTP %s %s failed", request.method, request.path)
        return error_response(500, 500, f"internal error handling {request.method} {request.path}: {exc!r}")


def rest_proxy_path(path: str) -> bool:
    """Whether `path` is Confluent's REST Proxy's (v2: /topics, /consumers, /brokers; v3: /v3), whose errors carry
    Confluent's codes; Kelp's own APIs (/admin/v1, /cluster/v1) answer Kafka's."""
    return path.startswith(("/v3/", "/topics", "/consumers", "/brokers"))


def confluent_error(request: web.Request, exc: KelpError) -> tuple[int, int]:
    """(status, error_code) Confluent's REST Proxy answers for a Kafka error (rest-utils' KafkaExceptionMapper and
    kafka-rest's v2 Errors, `kelp.rest_errors`): a bad request 400/40002; an authorization failure 403/40301; a
    missing topic 404/40401 and a missing partition of an existing topic 404/40402 in v2, 404/40403 in v3; a
    throttled mutation 429/42901; others as Kafka's."""
    code = exc.code
    if code in _BAD_REQUEST:
        return _answer(RestErrorCode.KAFKA_BAD_REQUEST)
    if code in _AUTHORIZATION:
        return _answer(RestErrorCode.KAFKA_AUTHORIZATION)
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        if request.path.startswith("/v3/"):
            return _answer(RestErrorCode.KAFKA_UNKNOWN_TOPIC_PARTITION)
        return _answer(RestErrorCode.PARTITION_NOT_FOUND if "partition" in request.match_info
                       and _topic_exists(request) else RestErrorCode.TOPIC_NOT_FOUND)
    if code == ErrorCode.THROTTLING_QUOTA_EXCEEDED:
        return _answer(RestErrorCode.TOO_MANY_REQUESTS)
    return exc.http_status, code


def _answer(code: RestErrorCode) -> tuple[int, int]:
    return http_status(code), code


def _topic_exists(request: web.Request) -> bool:
    broker = request.app.get(BROKER)
    parts = getattr(broker, "parts", None)
    topic = request.match_info.get("topic")
    return parts is not None and topic is not None and parts.topics.exists(topic)
