"""Apache Kafka's own Java tools (kafka-tools 4.3.1) against one Kelp broker per module.

Why: "Kafka's admin tools work" is only believable when the tools themselves
run. The jars come from `kelp.kafka_tools` (`make test` fetches them first, so
tests never download); the tier skips, with one line, only when `java` is
absent. Each tool runs as `java -cp <jars> <main class> ...`, bounded by a
timeout; independent tools start in parallel (`run_parallel`) to keep the
tier's wall time small on a loaded machine.
"""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator

import pytest

from kelp import kafka_tools
from tests.support.broker_process import BrokerProcess

TOOL_TIMEOUT_S = 120.0
SETTINGS = {
    "offsets.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 500,
    "transaction.state.log.num.partitions": 3,
    # test_kafka_transactions writes a hanging transaction below any client, which KIP-890's verification
    # exists to prevent: off here, as Kafka's own hanging-transaction tests run.
    "transaction.partition.verification.enable": "false",
}


@dataclass
class ToolRun:
    args: list[str]  # the main class and its arguments (not the JVM's)
    returncode: int
    stdout: str
    stderr: str

    def ok(self) -> "ToolRun":
        assert self.returncode == 0, (f"{' '.join(self.args)} exited {self.returncode}:\n"
                                      f"{self.stdout[-2000:]}\n{self.stderr[-3000:]}")
        return self


class Tools:
    """Runs Kafka's tools against `bootstrap`."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.ran: list[str] = []

    def run(self, main_class: str, *args: str, stdin: str | None = None, timeout: float = TOOL_TIMEOUT_S,
            bootstrap: bool = True) -> ToolRun:
        full = [*args, "--bootstrap-server", self.bootstrap] if bootstrap else list(args)
        command = kafka_tools.java_command(main_class, *full)
        self.ran.append(" ".join([main_class.rsplit(".", 1)[-1], *full]))
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout)
        return ToolRun([main_class, *full], done.returncode, done.stdout, done.stderr)

    def run_parallel(self, *calls: tuple) -> list[ToolRun]:
        """Each call is (main_class, *args) or (main_class, *args, {"stdin": ...}); all start at once."""
        def one(call: tuple) -> ToolRun:
            kwargs = call[-1] if isinstance(call[-1], dict) else {}
            args = call[:-1] if kwargs else call
            return self.run(*args, **kwargs)

        with ThreadPoolExecutor(max_workers=len(calls)) as pool:
            return list(pool.map(one, calls))


@pytest.fixture(scope="module")
def tools_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    if shutil.which("java") is None:
        pytest.skip("java is not installed: Kafka's Java tools cannot run")
    kafka_tools.fetch()  # a no-op after `make test`'s bootstrap; fetches (Maven) when run on its own
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-tools-broker"), settings=SETTINGS)
    bp.start()
    kafka_tools.ensure_archive(bp.bootstrap)  # once per JDK and classpath: halves every tool's start-up CPU
    yield bp
    bp.kill()


@pytest.fixture(scope="module")
def tools(tools_broker: BrokerProcess) -> Tools:
    return Tools(tools_broker.bootstrap)
