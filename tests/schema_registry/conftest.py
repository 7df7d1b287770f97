"""Fixtures for the Schema Registry tests: one broker process per module and a JSON client for its HTTP API.

Each test uses its own subjects and topics, so they stay independent on a shared broker.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, Callable, Iterator

import pytest

from tests.support.broker_process import BrokerProcess

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@pytest.fixture(scope="module")
def kelp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-sr"), settings={"num.partitions": 1})
    bp.start()
    try:
        yield bp
    finally:
        bp.kill()


def call(base: str, path: str, method: str = "GET", body: Any = None, *, raw: bytes | None = None,
         timeout: float = 30.0) -> tuple[int, Any, str]:
    """(status, JSON body, Content-Type) of one request; never raises on an HTTP error status."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, method=method, data=data, headers={"Content-Type": CONTENT_TYPE})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null"), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null"), exc.headers.get("Content-Type", "")


@pytest.fixture
def sr(kelp: BrokerProcess) -> Callable[..., tuple[int, Any, str]]:
    return lambda path, method="GET", body=None, **kw: call(kelp.http_url, path, method, body, **kw)
