"""A tiny blocking JSON client for the HTTP API tests (4xx/5xx are returned, not raised)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class Reply:
    def __init__(self, status: int, body: bytes, headers: Any) -> None:
        self.status = status
        self.body = body
        self.headers = headers

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"Reply({self.status}, {self.body[:300]!r})"


def call(method: str, url: str, *, body: Any = None, data: bytes | None = None,
         content_type: str = "application/json", accept: str | None = None, timeout: float = 20.0) -> Reply:
    """One HTTP request; 4xx/5xx are returned, not raised."""
    if body is not None:
        data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", content_type)
    if accept:
        req.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return Reply(resp.status, resp.read(), resp.headers)
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, exc.read(), exc.headers)


def create_topic(base: str, name: str, partitions: int = 1, **configs: str) -> dict:
    reply = call("POST", f"{base}/admin/v1/topics",
                 body={"name": name, "partitions": partitions, "configs": configs})
    assert reply.status == 201, reply
    return reply.json()


def log_end_offsets(base: str, topic: str) -> list[int]:
    d = call("GET", f"{base}/admin/v1/topics/{topic}").json()
    return [p["log_end_offset"] for p in d["partitions"]]
