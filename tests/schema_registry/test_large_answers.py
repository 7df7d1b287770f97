"""A registry answer listing many subjects or schemas is encoded on the CPU pool, not the loop, and reads the same.

Why: `GET /schemas` of a large registry is megabytes of schema text; json.dumps of it on the event loop is tens of
milliseconds during which no other client is served (issue 33's bound). The threshold is lowered here so a few
schemas take the large path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from kelp.broker.http import schema_registry_routes
from kelp.broker.http.app import build_http_app
from tests.authorization.harness import InProcessBroker

CT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def _schema(field: str) -> str:
    return json.dumps({"type": "record", "name": "R", "fields": [{"name": field, "type": "int", "default": 0}]})


async def test_a_long_listing_is_encoded_off_the_loop_and_answers_the_same(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    async with InProcessBroker(tmp_path, **{"super.users": "User:ANONYMOUS"}) as b:
        async with TestClient(TestServer(build_http_app(b.broker))) as client:
            for i in range(3):
                r = await client.post(f"/subjects/big-{i}/versions", json={"schema": _schema(f"f{i}")}, headers=CT)
                assert r.status == 200, await r.text()
            small = await (await client.get("/schemas?subjectPrefix=big-")).json()
            monkeypatch.setattr(schema_registry_routes, "LARGE_ANSWER_ITEMS", 1)
            r = await client.get("/schemas?subjectPrefix=big-")
            assert r.status == 200 and r.content_type == "application/vnd.schemaregistry.v1+json"
            assert await r.json() == small and [s["subject"] for s in small] == ["big-0", "big-1", "big-2"]
            assert await (await client.get("/subjects?subjectPrefix=big-")).json() == ["big-0", "big-1", "big-2"]
