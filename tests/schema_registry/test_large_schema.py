"""A schema of 1 MB is answered while the broker's event loop never runs a step over 50 ms (issue 37 item 5).

Why: a 653 KB Avro schema (20,000 fields) was parsed on the event loop of the broker leading `_schemas`: the loop
stalled 1.9-3.6 s, the broker's lease expired and the registration failed with 500. Parsing and compatibility
checks now run on the CPU pool and a schema over `MAX_SCHEMA_BYTES` (Confluent's 1 MiB request-body limit) is
refused with 422 naming the limit before it is parsed. The probe (`tests/support/loop_guard.py`) times every
loop step in CPU time of the loop's thread; the client is a thread of its own (urllib), so the loop runs only
the broker's work.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kelp.broker.schema_registry.requests import MAX_SCHEMA_BYTES
from tests.authorization.harness import InProcessBroker
from tests.support.loop_guard import StepProbe

pytestmark = pytest.mark.timeout(300)

BOUND_S = 0.05
CT = "application/vnd.schemaregistry.v1+json"


def _record(fields: int, evolved: bool = False) -> str:
    """An Avro record of `fields` string fields (`evolved`: and an int field with a default, a compatible
    second version)."""
    more = [{"name": "added", "type": "int", "default": 0}] if evolved else []
    return json.dumps({"type": "record", "name": "Big", "fields": [
        {"name": f"f{i:06d}", "type": "string"} for i in range(fields)] + more})


def _fields_under_limit() -> int:
    per_field = len(_record(2)) - len(_record(1))
    return (MAX_SCHEMA_BYTES - len(_record(0))) // per_field


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": CT})
    try:
        with urllib.request.urlopen(request, timeout=240) as answer:
            return int(answer.status), json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read())


async def test_a_1_mb_schema_is_registered_and_checked_and_more_refused_off_the_loop(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path, **{"super.users": "User:ANONYMOUS"}) as b:
        base = f"http://127.0.0.1:{b.broker.http_port}"
        warm = await asyncio.to_thread(_post, f"{base}/subjects/warm/versions", {"schema": _record(3)})
        assert warm[0] == 200, warm
        fields = _fields_under_limit()
        schema, evolved, over = _record(fields - 2), _record(fields - 2, evolved=True), _record(fields + 1)
        assert 1_000_000 < len(schema) < len(evolved) <= MAX_SCHEMA_BYTES < len(over)
        probe = StepProbe()
        took = []
        with probe.measuring():
            start = time.monotonic()
            registered = await asyncio.to_thread(_post, f"{base}/subjects/big/versions", {"schema": schema})
            took.append(time.monotonic() - start)
            # a second version: parsed, and every one of its fields compared with the first's (on the CPU pool)
            checked = await asyncio.to_thread(_post, f"{base}/compatibility/subjects/big/versions/latest",
                                              {"schema": evolved})
            took.append(time.monotonic() - start - sum(took))
            second = await asyncio.to_thread(_post, f"{base}/subjects/big/versions", {"schema": evolved})
            took.append(time.monotonic() - start - sum(took))
            refused = await asyncio.to_thread(_post, f"{base}/subjects/big/versions", {"schema": over})
            took.append(time.monotonic() - start - sum(took))
        print(f"{fields} fields, {len(schema)} bytes: answered in {', '.join(f'{t:.1f}' for t in took)} s "
              f"(register, check the second version, register it, refuse one field more); "
              f"longest loop step {probe.longest_s * 1000:.1f} ms ({probe.longest}), "
              f"gc {probe.gc_s * 1000:.0f} ms")
        assert registered[0] == 200 and registered[1]["version"] == 1, registered
        assert checked == (200, {"is_compatible": True}), checked
        assert second[0] == 200 and second[1]["version"] == 2, second
        assert refused[0] == 422 and refused[1]["error_code"] == 42201, refused
        assert f"limit of {MAX_SCHEMA_BYTES} bytes" in refused[1]["message"]
        assert probe.longest_s <= BOUND_S, f"{probe.longest_s * 1000:.0f} ms in {probe.longest}"
