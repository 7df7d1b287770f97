"""Fixtures of the authorization tests: `b`, one in-process broker with the ACL matrix's topic, broker ACL and group.

Why here: the ACL matrix's files (`test_acl_matrix*.py`) and the tests that reuse its principals and requests
(`matrix.py`) all run against the same broker; a file that needs another defines its own `b`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.authorization.harness import InProcessBroker
from tests.authorization.matrix import BROKER, SECRET, acl, coordinating


@pytest.fixture
async def b(tmp_path: Path):
    async with InProcessBroker(tmp_path) as broker:
        await broker.parts.topics.create_topic(SECRET, 1, 1)
        await broker.parts.acls.create([acl("CLUSTER", "kafka-cluster", "CLUSTER_ACTION", BROKER)])
        await coordinating(broker)
        yield broker
