"""Fixtures shared by every test tier live in their tier's conftest; this file
only makes the repository root importable for helpers under tests/ and
registers the shared broker-process fixture (`broker`, `broker_factory`)."""

pytest_plugins = ["tests.support.broker_process"]
