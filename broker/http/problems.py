"""JSON error bodies for every failure the HTTP API reports.

Why: scripts, the CLI and the operator read `{"error_code", "message"}` from
any 4xx/5xx, never an HTML page. `KelpError`s carry their Kafka error code
(a `kelp.errors.ErrorCode`) and `http_status`; problems found by the HTTP
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

from kelp.errors import KelpError
from kelp.json_types import JsonData

from .keys import MAX_BODY

__all__ = ["HttpProblem", "error_response", "json_response", "error_middleware"]

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
        return error_response(exc.http_status, exc.code, str(exc))
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
