"""The fault suite's short seeded form, part of `make test`: each targeted fault of issue 17 once, plus the
regression list; then issue 31's faults once at the default settings, and a power loss of every broker once with
every record fsynced (`log.flush.interval.messages=1`, what `power-loss-all` needs to promise anything).

Three brokers of its own (network namespaces when root, else loopback with
process faults only), idempotent acks=all producers and two consumer
groups, the faults of the nemesis' first round for seed 1 that aim at issue 17's
items (each once, deterministic parameters) and every fault of
tests/chaos/regressions.json; then the checker's verdict on the history.
The run's directory (history, broker logs, verdict) is kept under pytest's
temporary directory and named in the failure message; replay it with
`python -m tests.chaos.runner --replay <dir>/history.jsonl.gz`.

A violation fails the test: the suite exists to find bugs, never to pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chaos.nemesis import available_kinds
from tests.chaos.runner import run_capabilities
from tests.chaos.topology import make_topology

pytestmark = pytest.mark.clients

ROOT = Path(__file__).resolve().parents[2]
SEED = 1
BOUND_S = 720
# The faults aimed at issue 17's items (the other targeted kinds run in `make chaos`): about 2-3 minutes.
KINDS = ["leader-kill-then-next", "double-failover", "controller-pause-short", "controller-pause-long",
         "control-plane-delay", "sigterm-fast-restart", "reassign-cancel-failover"]


# Issue 31's (about 2 minutes): topics re-created under a down replica, the metadata store failing and going back,
# one broker's power loss, a wall-clock step; and a power loss of all (about 1 minute), which needs fsync-each.
KINDS_31 = ["topic-churn", "store-errors", "store-rollback", "power-loss-one", "clock-step"]
RUNS = {
    "issue-17-and-regressions": (KINDS, []),
    "issue-31": (KINDS_31, ["--no-regressions"]),
    "power-loss-all": (["power-loss-all"], ["--no-regressions", "--set", "log.flush.interval.messages=1"]),
}


@pytest.mark.timeout(BOUND_S + 60)
@pytest.mark.parametrize("run", list(RUNS))
def test_short_seeded_fault_run_finds_no_violation(tmp_path: Path, run: str) -> None:
    kinds, extra = RUNS[run]
    out = tmp_path / "run"
    code = ("import runpy, sys; sys.path.append(sys.argv.pop(1)); sys.argv[0] = 'runner'; "
            "runpy.run_module('tests.chaos.runner', run_name='__main__', alter_sys=True)")
    try:
        proc = subprocess.run([sys.executable, "-c", code, str(ROOT), "--short", "--seed", str(SEED), "--kinds",
                               ",".join(kinds), "--out", str(out), *extra],
                              capture_output=True, text=True, timeout=BOUND_S)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the short chaos run did not finish within {BOUND_S} s; see {out}/runner.log") from exc
    verdict_file = out / "verdict.json"
    assert verdict_file.exists(), f"no verdict (exit {proc.returncode}):\n{proc.stderr[-5000:]}"
    verdict = json.loads(verdict_file.read_text())
    settings = dict(a.split("=", 1) for a in extra if "=" in a)
    capabilities = run_capabilities(make_topology(tmp_path / "probe", 3, seed=SEED).capabilities, settings)
    applied = {k for k, n in verdict["faults"].items() if n}
    wanted = set(kinds) & set(available_kinds(capabilities))
    assert wanted <= applied, f"targeted faults not applied: {wanted - applied}; skipped: {verdict['skipped']}"
    assert verdict["stats"]["acked"] > 1000 and verdict["stats"]["delivered"] > 1000
    assert proc.returncode == 0 and verdict["ok"], \
        f"the chaos run found violations (run dir {out}):\n{(out / 'verdict.txt').read_text()}"
