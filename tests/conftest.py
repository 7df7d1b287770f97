"""Fixtures shared by every test tier live in their tier's conftest; this file
only makes the repository root importable for helpers under tests/ and
registers the shared broker-process fixtures (`broker`, `broker_factory`,
`cluster_factory`)."""

import pytest

pytest_plugins = ["tests.support.broker_process", "tests.support.cluster"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Expose each phase's report on the item (`item.rep_call`) so fixtures can dump logs on failure."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
