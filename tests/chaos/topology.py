"""Where the suite's brokers live, and the network and disk faults done to them there.

Why: faults must hit the network, not the brokers' code, so they keep
meaning the same thing whatever the brokers say to each other. With root
and iproute2 (`NetnsTopology`), each broker runs in a network namespace of
its own with an address on a bridge in a hub namespace; the runner (the
clients) reaches them through one veth pair from the root namespace
(10.213.S.1, a /24 no other interface uses). In each broker namespace:

- a `CHAOS` iptables chain hooked into INPUT and OUTPUT: partitions between
  brokers (every port) and between clients and one broker (its Kafka port)
  are DROP rules added there and flushed to heal;
- DNAT rules send connections to a peer's HTTP port through the
  control-plane proxy (proxy.py), one listener per ordered pair, which drops
  or delays them on the nemesis' word; a partition between two brokers
  blocks that pair in the proxy too;
- each broker's "disk" is a tmpfs of its own (`disk.mb`), so one can be
  filled to ENOSPC and freed; its log directory is a `lazyfs` mount over it
  (the page cache above the disk: writes not fsynced are lost when the broker
  loses power, `power_loss`); the brokers' shared `cluster.dir` (leases and
  the metadata store) is a `lazyfs` mount over a directory of the run too, so
  the store can fail with EIO or ENOSPC on demand (`store_errors`) and lose
  power with every broker;
- each broker's wall clock can be stepped (`step_clock`) by an LD_PRELOAD
  shim (`clockstep.c`, built with the machine's C compiler) that offsets
  CLOCK_REALTIME only, as a settimeofday or an NTP step does.

Everything created is named after the runner's pid (`kc<pid>...`, tmpfs
source `kelpchaos-<pid>`, FUSE `kelplazyfs-<pid>`), removed by `cleanup()` in every case, and
`sweep_stale()` removes what a killed runner left (its pid is gone).
Without root or `ip` (`LoopbackTopology`), brokers listen on 127.0.0.1 and
only process faults are possible; the runner says so.

It must never touch an interface, namespace, rule or mount it did not create.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from kelp.cli.supervisor import die_with_parent

from .lazy_mounts import LazyMount, fuse_available

__all__ = ["Topology", "NetnsTopology", "LoopbackTopology", "make_topology", "sweep_stale"]

HTTP_PORT = 8080
KAFKA_PORT = 9092
CMD_TIMEOUT_S = 15.0
FILL_NAME = ".chaos-fill"


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=CMD_TIMEOUT_S, check=check)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Topology:
    """The loopback form: every broker on 127.0.0.1, ports chosen by the kernel at first start and kept."""

    kind = "loopback"
    capabilities: frozenset[str] = frozenset()
    why_limited = ""

    def __init__(self, run_dir: Path, brokers: int) -> None:
        self.run_dir = run_dir
        self.n = brokers
        self.clock_shim: Path | None = None
        # The wall-clock shim needs a C compiler, nothing else: clock steps work in every form.
        self.capabilities = frozenset({"clock"} if shutil.which("cc") or shutil.which("gcc") else ())

    def setup(self) -> None:
        for i in range(self.n):
            self.log_dir(i).mkdir(parents=True, exist_ok=True)
        self.cluster_dir.mkdir(parents=True, exist_ok=True)
        self.clock_shim = build_clock_shim(self.run_dir)

    def cleanup(self) -> None:
        pass

    def log_dir(self, i: int) -> Path:
        return self.run_dir / f"broker-{i}"

    @property
    def cluster_dir(self) -> Path:
        return self.run_dir / "cluster"

    # -- the wall clock ------------------------------------------------------------------------
    def clock_file(self, i: int) -> Path:
        return self.run_dir / f"clock-offset-{i}.ms"

    def env(self, i: int) -> dict[str, str]:
        """What broker i's process gets in its environment: the clock shim, when it could be built."""
        if self.clock_shim is None:
            return {}
        return {"LD_PRELOAD": str(self.clock_shim), "CHAOS_CLOCK_OFFSET_FILE": str(self.clock_file(i))}

    def step_clock(self, i: int, offset_ms: int) -> None:
        """Broker i's wall clock reads `offset_ms` away from the machine's from now on (0: back to it)."""
        if self.clock_shim is None:
            raise NotImplementedError("no C compiler: the wall-clock shim was not built")
        tmp = self.clock_file(i).with_suffix(".tmp")
        tmp.write_text(f"{int(offset_ms)}\n")
        os.replace(tmp, self.clock_file(i))

    def broker_host(self, i: int) -> str:
        return "127.0.0.1"

    def ports(self, i: int) -> tuple[int, int]:
        """(kafka, http) ports for broker i's first start; 0 = ephemeral."""
        return 0, 0

    def wrap(self, i: int, cmd: list[str]) -> list[str]:
        return cmd

    # -- faults; the loopback form has none of these -------------------------------------------
    def partition_brokers(self, groups: list[list[int]]) -> None:
        raise NotImplementedError(self.why_limited)

    def isolate_clients(self, i: int) -> None:
        raise NotImplementedError(self.why_limited)

    def control_plane(self, rules: list[dict[str, Any]]) -> None:
        raise NotImplementedError(self.why_limited)

    def heal_network(self) -> None:
        pass

    def fill_disk(self, i: int) -> int:
        raise NotImplementedError(self.why_limited)

    def free_disk(self, i: int) -> None:
        pass

    def proxy_stats(self) -> dict[str, Any]:
        return {}

    def power_loss(self, brokers: list[int], *, store: bool) -> dict[str, Any]:
        raise NotImplementedError(self.why_limited)

    def store_errors(self, errno_name: str, seconds: float, ops: list[str]) -> None:
        raise NotImplementedError(self.why_limited)

    def heal_store(self) -> None:
        pass


LoopbackTopology = Topology


CLOCK_SHIM_SOURCE = Path(__file__).with_name("clockstep.c")


def build_clock_shim(run_dir: Path) -> Path | None:
    """The wall-clock shim compiled into the run directory; None when the machine has no C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    out = run_dir / "clockstep.so"
    proc = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(CLOCK_SHIM_SOURCE), "-ldl"],
                          capture_output=True, text=True, timeout=60)
    return out if proc.returncode == 0 else None


class NetnsTopology(Topology):
    kind = "netns"

    def __init__(self, run_dir: Path, brokers: int, *, seed: int, disk_mb: int = 1024) -> None:
        super().__init__(run_dir, brokers)
        self.seed = seed
        self.disk_mb = disk_mb
        self.rid = f"kc{os.getpid()}"
        self.subnet = -1
        self.proxy: subprocess.Popen | None = None
        self.proxy_ports: dict[str, int] = {}
        self._proxy_lines: list[dict] = []
        self._proxy_event = threading.Condition()
        self._created_ns: list[str] = []
        self._mounts: list[Path] = []
        self._root_link: str | None = None
        self._blocked_pairs: set[tuple[int, int]] = set()
        self._cp_rules: list[dict[str, Any]] = []
        self.lazy: dict[str, LazyMount] = {}  # "broker-<i>" and "cluster": the FUSE mounts over the disks
        self.fuse, self.fuse_why = fuse_available()
        caps = {"network", "disk", *self.capabilities}
        if self.fuse:
            caps |= {"power", "store"}
        self.capabilities = frozenset(caps)

    def disk_dir(self, i: int) -> Path:
        """Broker i's "disk": the tmpfs its lazyfs mount (its log directory) writes through to."""
        return self.run_dir / f"disk-{i}"

    # -- names and addresses ----------------------------------------------------------------
    def ns(self, i: int) -> str:
        return f"{self.rid}b{i}"

    @property
    def hub(self) -> str:
        return f"{self.rid}h"

    @property
    def client_ip(self) -> str:
        return f"10.213.{self.subnet}.1"

    def broker_host(self, i: int) -> str:
        return f"10.213.{self.subnet}.{11 + i}"

    def ports(self, i: int) -> tuple[int, int]:
        return KAFKA_PORT, HTTP_PORT

    def wrap(self, i: int, cmd: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns(i), *cmd]

    def _in(self, i: int, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return _run("ip", "netns", "exec", self.ns(i), *cmd, check=check)

    # -- setup ---------------------------------------------------------------------------
    def _pick_subnet(self) -> int:
        used = set(int(m) for m in re.findall(r"10\.213\.(\d+)\.", _run("ip", "-4", "-o", "addr").stdout))
        rng = random.Random(os.getpid())
        for s in rng.sample(range(1, 250), 249):
            if s not in used:
                return s
        raise RuntimeError("no free 10.213.x.0/24 subnet for the chaos network")

    def setup(self) -> None:
        sweep_stale()
        self.subnet = self._pick_subnet()
        hub = self.hub
        _run("ip", "netns", "add", hub)
        self._created_ns.append(hub)
        _run("ip", "-n", hub, "link", "set", "lo", "up")
        _run("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", hub, "link", "set", "br0", "up")
        root, root_peer = f"{self.rid}r", f"{self.rid}q"
        _run("ip", "link", "add", root, "type", "veth", "peer", "name", root_peer)
        self._root_link = root
        _run("ip", "link", "set", root_peer, "netns", hub)
        _run("ip", "-n", hub, "link", "set", root_peer, "master", "br0", "up")
        _run("ip", "addr", "add", f"{self.client_ip}/24", "dev", root)
        _run("ip", "link", "set", root, "up")
        for i in range(self.n):
            ns, inside, peer = self.ns(i), f"{self.rid}v{i}", f"{self.rid}p{i}"
            _run("ip", "netns", "add", ns)
            self._created_ns.append(ns)
            _run("ip", "link", "add", inside, "type", "veth", "peer", "name", peer)
            _run("ip", "link", "set", inside, "netns", ns)
            _run("ip", "-n", ns, "link", "set", inside, "name", "eth0")
            _run("ip", "-n", ns, "addr", "add", f"{self.broker_host(i)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "link", "set", peer, "netns", hub)
            _run("ip", "-n", hub, "link", "set", peer, "master", "br0", "up")
            self._in(i, "iptables", "-N", "CHAOS")
            self._in(i, "iptables", "-I", "INPUT", "1", "-j", "CHAOS")
            self._in(i, "iptables", "-I", "OUTPUT", "1", "-j", "CHAOS")
            disk = self.disk_dir(i) if self.fuse else self.log_dir(i)
            disk.mkdir(parents=True, exist_ok=True)
            _run("mount", "-t", "tmpfs", "-o", f"size={self.disk_mb}m,mode=0755", f"kelpchaos-{os.getpid()}",
                 str(disk))
            self._mounts.append(disk)
            if self.fuse:
                self.lazy[f"broker-{i}"] = LazyMount(disk, self.log_dir(i), self.run_dir / "lazyfs.log")
        if self.fuse:
            self.lazy["cluster"] = LazyMount(self.run_dir / "cluster-disk", self.cluster_dir,
                                             self.run_dir / "lazyfs.log")
        for mount in self.lazy.values():
            mount.start()
        self.cluster_dir.mkdir(parents=True, exist_ok=True)
        self.clock_shim = build_clock_shim(self.run_dir)
        self._start_proxy()
        for i in range(self.n):
            for j in range(self.n):
                if i != j:
                    self._in(i, "iptables", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-d", self.broker_host(j),
                             "--dport", str(HTTP_PORT), "-j", "DNAT",
                             "--to-destination", f"{self.client_ip}:{self.proxy_ports[f'{i}-{j}']}")

    def _start_proxy(self) -> None:
        pairs = [f"{i}:{j}:{self.broker_host(j)}:{HTTP_PORT}" for i in range(self.n) for j in range(self.n) if i != j]
        # The checkout goes at the END of sys.path: first, its operator/ would shadow the standard library's.
        root = str(Path(__file__).resolve().parents[2])
        cmd = [sys.executable, "-c", "import runpy, sys; sys.path.append(sys.argv.pop(1)); "
               "runpy.run_module('tests.chaos.proxy', run_name='__main__', alter_sys=True)", root,
               "--listen", self.client_ip, "--seed", str(self.seed)]
        for p in pairs:
            cmd += ["--pair", p]
        log = open(self.run_dir / "proxy.log", "ab")
        self.proxy = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                      start_new_session=True, preexec_fn=die_with_parent())
        log.close()
        threading.Thread(target=self._read_proxy, daemon=True).start()
        first = self._proxy_wait("proxy-listening", 20)
        self.proxy_ports = first["ports"]

    def _read_proxy(self) -> None:
        assert self.proxy is not None and self.proxy.stdout is not None
        for line in self.proxy.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._proxy_event:
                self._proxy_lines.append(event)
                self._proxy_event.notify_all()

    def _proxy_wait(self, name: str, timeout: float) -> dict:
        with self._proxy_event:
            ok = self._proxy_event.wait_for(lambda: any(e.get("event") == name for e in self._proxy_lines), timeout)
            if not ok:
                raise RuntimeError(f"the control-plane proxy did not answer {name!r} within {timeout}s "
                                   f"(see {self.run_dir / 'proxy.log'})")
            for k, e in enumerate(self._proxy_lines):
                if e.get("event") == name:
                    return self._proxy_lines.pop(k)
        raise AssertionError("unreachable")

    def _proxy_send(self, cmd: dict) -> None:
        assert self.proxy is not None and self.proxy.stdin is not None
        self.proxy.stdin.write(json.dumps(cmd) + "\n")
        self.proxy.stdin.flush()

    # -- faults --------------------------------------------------------------------------------
    def _push_proxy_rules(self) -> None:
        rules = [{"src": a, "dst": b, "action": "drop"} for a, b in sorted(self._blocked_pairs)] + self._cp_rules
        self._proxy_send({"op": "rules", "rules": rules})
        self._proxy_wait("rules", 10)

    def partition_brokers(self, groups: list[list[int]]) -> None:
        """Brokers in different groups cannot reach each other (every port; HTTP in the proxy too)."""
        side = {b: k for k, g in enumerate(groups) for b in g}
        for i in range(self.n):
            for j in range(self.n):
                if i != j and i in side and j in side and side[i] != side[j]:
                    self._in(i, "iptables", "-A", "CHAOS", "-s", self.broker_host(j), "-j", "DROP")
                    self._in(i, "iptables", "-A", "CHAOS", "-d", self.broker_host(j), "-j", "DROP")
                    self._blocked_pairs.add((i, j))
        self._push_proxy_rules()

    def isolate_clients(self, i: int) -> None:
        """The runner's clients cannot reach broker i's Kafka port (the admin API stays reachable)."""
        self._in(i, "iptables", "-A", "CHAOS", "-s", self.client_ip, "-p", "tcp", "--dport", str(KAFKA_PORT), "-j",
                 "DROP")
        self._in(i, "iptables", "-A", "CHAOS", "-d", self.client_ip, "-p", "tcp", "--sport", str(KAFKA_PORT), "-j",
                 "DROP")

    def control_plane(self, rules: list[dict[str, Any]]) -> None:
        self._cp_rules = list(rules)
        self._push_proxy_rules()

    def heal_network(self) -> None:
        for i in range(self.n):
            self._in(i, "iptables", "-F", "CHAOS", check=False)
        self._blocked_pairs.clear()
        self._cp_rules = []
        if self.proxy is not None and self.proxy.poll() is None:
            self._push_proxy_rules()

    def _disk(self, i: int) -> Path:
        return self.disk_dir(i) if self.fuse else self.log_dir(i)

    def fill_disk(self, i: int) -> int:
        """Fill broker i's disk to the last block (ENOSPC for the broker); returns the bytes taken."""
        st = os.statvfs(self._disk(i))
        free = st.f_bavail * st.f_frsize
        taken = 0
        fd = os.open(self._disk(i) / FILL_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            try:
                os.posix_fallocate(fd, 0, free)
                taken = free
            except OSError:
                pass
            os.lseek(fd, 0, os.SEEK_END)
            block = b"\0" * 4096
            for _ in range(free // len(block) + 1024):  # whatever fallocate left, to ENOSPC; bounded
                try:
                    n = os.write(fd, block)
                except OSError:
                    break
                if n <= 0:
                    break
                taken += n
        finally:
            os.close(fd)
        return taken

    def free_disk(self, i: int) -> None:
        try:
            (self._disk(i) / FILL_NAME).unlink()
        except FileNotFoundError:
            pass

    def power_loss(self, brokers: list[int], *, store: bool) -> dict[str, Any]:
        """The lazyfs mounts of these brokers (and of the cluster directory, with `store`) lose power: what was
        not fsynced is gone. The brokers must be down already (killed): their files are closed."""
        lost: dict[str, Any] = {}
        names = [f"broker-{i}" for i in brokers] + (["cluster"] if store else [])
        for name in names:
            lost[name] = self.lazy[name].power_loss()
        return lost

    def store_errors(self, errno_name: str, seconds: float, ops: list[str]) -> None:
        """The metadata store (`<cluster.dir>/metadata/`) answers `errno_name` to these operations for `seconds`."""
        self.lazy["cluster"].command({"op": "fail", "errno": errno_name, "prefix": "metadata/", "ops": ops,
                                      "seconds": seconds})

    def heal_store(self) -> None:
        if "cluster" in self.lazy:
            self.lazy["cluster"].command({"op": "heal"})

    def proxy_stats(self) -> dict[str, Any]:
        if self.proxy is None or self.proxy.poll() is not None:
            return {}
        self._proxy_send({"op": "stats"})
        return self._proxy_wait("stats", 10)

    # -- cleanup -------------------------------------------------------------------------------
    def cleanup(self) -> None:
        """Remove everything setup() made; each step on its own, so one failure does not leave the rest."""
        if self.proxy is not None:
            try:
                if self.proxy.stdin is not None:
                    self.proxy.stdin.close()
                self.proxy.wait(5)
            except Exception:
                pass
            if self.proxy.poll() is None:
                self.proxy.kill()
                self.proxy.wait(5)
        for mount in self.lazy.values():
            mount.stop()
        self.lazy.clear()
        for i, d in enumerate(self._mounts):
            self.free_disk(i)
            if _run("umount", str(d), check=False).returncode != 0:
                _run("umount", "-l", str(d), check=False)
        self._mounts.clear()
        for ns in reversed(self._created_ns):
            _run("ip", "netns", "del", ns, check=False)
        self._created_ns.clear()
        if self._root_link is not None:
            _run("ip", "link", "del", self._root_link, check=False)  # gone with the hub already, normally
            self._root_link = None


def sweep_stale() -> list[str]:
    """Remove namespaces, links and tmpfs mounts of chaos runs whose runner is gone; returns what was removed."""
    removed: list[str] = []
    if shutil.which("ip") is None:
        return removed
    for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        m = re.fullmatch(r"kc(\d+)(h|b\d+)", name)
        if m and not _pid_alive(int(m.group(1))):
            _run("ip", "netns", "del", name, check=False)
            removed.append(f"netns {name}")
    for m in re.finditer(r"^\d+: (kc(\d+)r)[@:]", _run("ip", "-o", "link", check=False).stdout, re.M):
        if not _pid_alive(int(m.group(2))):
            _run("ip", "link", "del", m.group(1), check=False)
            removed.append(f"link {m.group(1)}")
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        mounts = []
    for line in mounts:
        parts = line.split()
        m = re.fullmatch(r"(?:kelpchaos|kelplazyfs)-(\d+)", parts[0]) if parts else None
        if m and not _pid_alive(int(m.group(1))):
            _run("umount", "-l", parts[1].replace("\\040", " "), check=False)
            removed.append(f"mount {parts[1]}")
    return removed


def make_topology(run_dir: Path, brokers: int, *, seed: int, want: str = "auto", disk_mb: int = 1024) -> Topology:
    """netns when possible (root, `ip`, `iptables`), else loopback with the reason kept in `why_limited`."""
    reasons = []
    if os.geteuid() != 0:
        reasons.append("not root")
    for tool in ("ip", "iptables", "mount"):
        if shutil.which(tool) is None:
            reasons.append(f"no `{tool}`")
    if want == "netns" and reasons:
        raise RuntimeError(f"--network netns needs root, ip, iptables and mount: {', '.join(reasons)}")
    if want == "loopback" or reasons:
        topo = Topology(run_dir, brokers)
        topo.why_limited = ("network, disk, power and store faults need network namespaces, a tmpfs and a FUSE "
                            "mount per broker: "
                            + (", ".join(reasons) if reasons else "--network loopback was asked for"))
        return topo
    topo = NetnsTopology(run_dir, brokers, seed=seed, disk_mb=disk_mb)
    if not topo.fuse:
        topo.why_limited = f"power-loss and metadata-store faults need FUSE: {topo.fuse_why}"
    return topo

