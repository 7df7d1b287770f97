"""The chaos topology leaves nothing behind: namespaces, links and tmpfs mounts go with cleanup(), and what a killed
runner left is swept by the next one. Partitions and client isolation really cut the traffic they name.

Needs root, iproute2 and iptables (network namespaces); skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.chaos.topology import NetnsTopology, make_topology, sweep_stale

pytestmark = pytest.mark.skipif(make_topology(Path("/nonexistent"), 1, seed=0).kind != "netns",
                                reason="network namespaces need root, ip, iptables and mount")


def _netns() -> set[str]:
    return {line.split()[0] for line in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                                       timeout=10).stdout.splitlines() if line.strip()}


def _mounts() -> str:
    return Path("/proc/mounts").read_text()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _reach(topo: NetnsTopology, src: int | None, dst: int, port: int, timeout: float = 1.0) -> bool:
    """Can `src`'s namespace (None: the root namespace, where the clients are) connect to broker dst's port?"""
    code = (f"import socket; s = socket.create_connection(('{topo.broker_host(dst)}', {port}), timeout={timeout}); "
            "s.close()")
    cmd = ["python3", "-c", code]
    if src is not None:
        cmd = ["ip", "netns", "exec", topo.ns(src), *cmd]
    return subprocess.run(cmd, capture_output=True, timeout=timeout + 10).returncode == 0


def test_setup_cleanup_and_the_faults_cut_what_they_name(tmp_path: Path) -> None:
    topo = NetnsTopology(tmp_path, 2, seed=1, disk_mb=8)
    listeners: list[subprocess.Popen] = []
    try:
        topo.setup()
        assert {topo.ns(0), topo.ns(1), topo.hub} <= _netns()
        assert f"kelpchaos-{os.getpid()} {tmp_path / 'broker-0'} tmpfs" in _mounts()
        for i in range(2):  # a listener on each broker's Kafka port, inside its namespace
            listeners.append(subprocess.Popen(["ip", "netns", "exec", topo.ns(i), "python3", "-c",
                                               "import socket, time; s = "
                                               f"socket.create_server(('{topo.broker_host(i)}', 9092)); "
                                               "s.listen(); time.sleep(60)"]))
        deadline = time.monotonic() + 10
        while not (_reach(topo, None, 0, 9092) and _reach(topo, None, 1, 9092)):
            assert time.monotonic() < deadline, "the brokers' namespaces are not reachable from the clients"
        assert _reach(topo, 0, 1, 9092)
        topo.partition_brokers([[0], [1]])
        assert not _reach(topo, 0, 1, 9092) and _reach(topo, None, 1, 9092)
        topo.heal_network()
        topo.isolate_clients(1)
        assert not _reach(topo, None, 1, 9092) and _reach(topo, 0, 1, 9092) and _reach(topo, None, 0, 9092)
        topo.heal_network()
        assert _reach(topo, None, 1, 9092)
        taken = topo.fill_disk(0)
        assert taken > 6 << 20
        with pytest.raises(OSError):
            (tmp_path / "broker-0" / "more").write_bytes(b"x" * 65536)
        topo.free_disk(0)
        (tmp_path / "broker-0" / "more").write_bytes(b"x" * 65536)
    finally:
        for p in listeners:
            p.kill()
            p.wait(5)
        topo.cleanup()
    assert not {topo.ns(0), topo.ns(1), topo.hub} & _netns()
    assert f"kelpchaos-{os.getpid()}" not in _mounts()
    assert f"{topo.rid}r" not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=10).stdout


def test_sweep_removes_what_a_dead_runner_left_and_nothing_else(tmp_path: Path) -> None:
    dead = _dead_pid()
    ns, mine = f"kc{dead}b0", f"kc{os.getpid()}b9"
    target = tmp_path / "left"
    target.mkdir()
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=10)
    subprocess.run(["ip", "netns", "add", mine], check=True, timeout=10)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", f"kelpchaos-{dead}", str(target)], check=True, timeout=10)
    try:
        removed = sweep_stale()
        assert f"netns {ns}" in removed and any(str(target) in r for r in removed)
        assert ns not in _netns() and f"kelpchaos-{dead}" not in _mounts()
        assert mine in _netns(), "the sweep removed a live runner's namespace"
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", mine], capture_output=True, timeout=10)
        subprocess.run(["umount", "-l", str(target)], capture_output=True, timeout=10)
