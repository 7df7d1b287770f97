"""`kelp dev-cluster` (what `make run` starts): three brokers that form one cluster, stopped together by Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support.cluster import http_json

pytestmark = pytest.mark.clients


def test_dev_cluster_starts_three_brokers_and_stops_them_on_ctrl_c(tmp_path) -> None:
    kelp = os.path.join(os.path.dirname(sys.executable), "kelp")
    proc = subprocess.Popen([kelp, "dev-cluster", "--brokers", "3", "--data-dir", str(tmp_path),
                             "--kafka-port", "0", "--http-port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the first stdout line is the cluster's readiness line
        info = json.loads(line)
        assert info["event"] == "cluster-listening" and len(info["bootstrap"].split(",")) == 3
        http = info["http"].split(",")[0]
        deadline = time.monotonic() + 20
        while len(http_json(f"{http}/admin/v1/brokers")["brokers"]) < 3:
            assert time.monotonic() < deadline, "three brokers did not join one cluster"
            time.sleep(0.1)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["broker-0", "broker-1", "broker-2", "cluster"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    leftover = subprocess.run(["pgrep", "-f", f"--log-dirs {tmp_path}"], capture_output=True, text=True).stdout
    assert leftover.strip() == "", "a broker outlived dev-cluster"
