"""Fixtures for CLI tests: one broker process per module, `kelp` run in-process or as a process."""

from __future__ import annotations

import io
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable, Iterator

import pytest

from kelp.cli.main import main
from tests.support.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def kelp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-cli"),
                       settings={"num.partitions": 1, "group.initial.rebalance.delay.ms": 0})
    bp.start()
    try:
        yield bp
    finally:
        bp.kill()


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(kelp: BrokerProcess, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    """`cli("topics", "list", stdin="...")` runs `kelp` in-process against the module's broker."""
    monkeypatch.setenv("KELP_HTTP", kelp.http_url)
    monkeypatch.setenv("KELP_BOOTSTRAP", kelp.bootstrap)

    def run(*argv: str, stdin: str = "") -> Run:
        capsys.readouterr()
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse usage errors
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


def run_kelp_process(*argv: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    """`kelp` as a real process (exit codes and stderr exactly as a shell sees them)."""
    import os

    full_env = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-m", "kelp.cli.main", *argv], capture_output=True, text=True,
                          timeout=timeout, env=full_env)
