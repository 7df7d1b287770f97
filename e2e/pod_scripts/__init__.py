"""Kafka clients the e2e suite runs inside the cluster, as `python -c <script> args...`.

Each file is a standalone script for the Kelp image's Python (kafka-python is
installed there); `script(name)` returns its source. Every script prints one
result line `KELP-E2E-RESULT <json>` last, which `parse_result` reads back
from the pod's log.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULT_PREFIX = "KELP-E2E-RESULT "


def script(name: str) -> str:
    return (Path(__file__).parent / f"{name}.py").read_text()


def parse_result(log: str) -> dict[str, Any] | None:
    """The last result line's JSON in ``log``, or None when the script never printed one."""
    for line in reversed(log.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    return None
