"""Fixtures for group tests: a broker with small group timeouts, a consumer-process factory."""

from __future__ import annotations

from typing import Callable, Iterator

import pytest

from .procs import ConsumerProc

GROUP_SETTINGS = {
    "offsets.topic.num.partitions": 5,
    "group.initial.rebalance.delay.ms": 200,
    "group.min.session.timeout.ms": 500,
}


@pytest.fixture
def group_broker(broker_factory):
    return broker_factory(settings=dict(GROUP_SETTINGS))


@pytest.fixture
def consumers() -> Iterator[Callable[..., ConsumerProc]]:
    made: list[ConsumerProc] = []

    def make(**kw: object) -> ConsumerProc:
        c = ConsumerProc(**kw)  # type: ignore[arg-type]
        made.append(c)
        return c

    yield make
    for c in made:
        c.kill()
