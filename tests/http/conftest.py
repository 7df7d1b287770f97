"""Fixtures for the HTTP API tests: one broker process per module, a tiny JSON client.

A module-scoped broker keeps the tier fast (each test uses its own topics,
so tests stay independent); it is killed in teardown.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.support.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def kelp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-http"), settings={"num.partitions": 1})
    bp.start()
    try:
        yield bp
    finally:
        bp.kill()


