"""Broker tests start many short-lived brokers: give them a small __consumer_offsets.

Kafka's default of 50 offsets partitions costs ~0.7 s per start (50 logs
created and fsynced); nothing here depends on that number.
"""

from __future__ import annotations

from typing import Callable

import pytest

from tests.support.broker_process import BrokerProcess

FAST_START = {"offsets.topic.num.partitions": 3}


@pytest.fixture
def broker_factory(broker_factory: Callable[..., BrokerProcess]) -> Callable[..., BrokerProcess]:
    def make(*, settings: dict[str, object] | None = None, **kwargs: object) -> BrokerProcess:
        return broker_factory(settings={**FAST_START, **(settings or {})}, **kwargs)

    return make
