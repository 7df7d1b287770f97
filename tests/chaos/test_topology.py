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
        assert f"kelpchaos-{os.getpid()} {tmp_path / 'disk-0'} tmpfs" in _mounts()
        assert f"kelplazyfs-{os.getpid()} {tmp_path / 'broker-0'} fuse" in _mounts()
        assert f"kelplazyfs-{os.getpid()} {tmp_path / 'cluster'} fuse" in _mounts()
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
        # power: what was fsynced survives, what was only written does not; another broker's disk keeps its cache
        with open(tmp_path / "broker-0" / "kept", "wb") as fh:
            fh.write(b"k" * 5000)
            fh.flush()
            os.fsync(fh.fileno())
        (tmp_path / "broker-0" / "kept").open("ab").write(b"lost")
        (tmp_path / "broker-1" / "other").write_bytes(b"cached")
        lost = topo.power_loss([0], store=False)
        assert lost["broker-0"]["dirty_files"] >= 2
        assert (tmp_path / "broker-0" / "kept").read_bytes() == b"k" * 5000
        assert (tmp_path / "broker-0" / "more").read_bytes() == b""  # created and written, never fsynced
        assert (tmp_path / "broker-1" / "other").read_bytes() == b"cached"
        # the metadata store fails on demand, and heals
        (tmp_path / "cluster" / "metadata").mkdir()
        topo.store_errors("EIO", 30, ["write"])
        with pytest.raises(OSError, match="Input/output"):
            (tmp_path / "cluster" / "metadata" / "x").write_bytes(b"x")
        (tmp_path / "cluster" / "leases-x").write_bytes(b"ok")  # only the store
        topo.heal_store()
        (tmp_path / "cluster" / "metadata" / "x").write_bytes(b"x")
    finally:
        for p in listeners:
            p.kill()
            p.wait(5)
        topo.cleanup()
    assert not {topo.ns(0), topo.ns(1), topo.hub} & _netns()
    assert f"kelpchaos-{os.getpid()}" not in _mounts() and f"kelplazyfs-{os.getpid()}" not in _mounts()
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


def test_a_stepped_wall_clock_moves_realtime_only(tmp_path: Path) -> None:
    """The clock shim (clockstep.c) as a broker gets it (`Topology.env`): time.time() moves by the offset the file
    holds, forward and back; the monotonic clocks do not."""
    from tests.chaos.topology import Topology

    topo = Topology(tmp_path, 1)
    topo.setup()
    assert topo.clock_shim is not None and "clock" in topo.capabilities, "no C compiler for the clock shim"
    code = ("import time, sys; w, m = time.time(), time.monotonic(); open(sys.argv[1], 'w').write('-45000'); "
            "time.sleep(0.1); print(round(time.time() - w), round(time.monotonic() - m))")
    topo.step_clock(0, 0)
    out = subprocess.run(["python3", "-c", code, str(topo.clock_file(0))], env={**os.environ, **topo.env(0)},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["-45", "0"]
