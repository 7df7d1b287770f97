"""Fixtures for storage tests: an injected clock (no sleeps anywhere)."""

from __future__ import annotations

import pytest

from .helpers import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
