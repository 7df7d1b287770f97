"""The broker's periodic log work must not run file work on the event loop."""

from __future__ import annotations

import threading

from kelp.broker.app import Broker
from kelp.config.broker import BrokerConfig


class _RecordingLogs:
    def __init__(self) -> None:
        self.threads: dict[str, int] = {}

    def run_retention(self) -> int:
        self.threads["retention"] = threading.get_ident()
        return 1

    def run_cleaner(self) -> int:
        self.threads["cleaner"] = threading.get_ident()
        return 2

    def close_all(self) -> None:
        self.threads["close"] = threading.get_ident()


async def test_retention_cleaner_and_close_run_off_the_event_loop(tmp_path) -> None:
    broker = Broker(BrokerConfig.load(env={}, overrides={"log.dirs": str(tmp_path)}))
    logs = broker.logs = _RecordingLogs()
    assert await broker.run_retention_and_cleaner() == (1, 2)
    await broker.stop()
    loop_thread = threading.get_ident()
    assert set(logs.threads) == {"retention", "cleaner", "close"}
    assert loop_thread not in logs.threads.values()
