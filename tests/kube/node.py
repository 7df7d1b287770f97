"""A real worker node for the kube tier: containerd + runc + CNI bridge + kubelet, all local.

Why this exists: Pods created by the control-plane tier stay Pending; this
module lets a test run a Pod's process for real. Everything comes from Debian
(containerd, runc, containernetworking-plugins, busybox-static) or is built
from Go modules (kubelet); images are built here as OCI archives from
busybox-static and imported into containerd, since no image can be pulled.

What it must never do: touch the machine's own containerd (/run/containerd,
/var/lib/containerd) or kubelet directories, bind fixed ports, or leave
processes, mounts or the bridge behind. It needs root (mounts, cgroups,
network namespaces); callers skip otherwise.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
CNI_BIN_DIR = Path("/usr/lib/cni")
PAUSE_IMAGE = "docker.io/kelp/pause:1"
BUSYBOX_IMAGE = "docker.io/kelp/busybox:1"
_APPLETS = ("sh", "sleep", "echo", "cat", "ls", "hostname", "id", "ip", "wc")


# The kubelet sets these kernel tunables at start (setupKernelTunables with
# protectKernelDefaults=false); the node fixture puts the machine's values back.
KUBELET_SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic",
                   "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")


def read_kubelet_sysctls() -> dict[str, str]:
    values = {}
    for key in KUBELET_SYSCTLS:
        try:
            values[key] = (Path("/proc/sys") / key).read_text().strip()
        except OSError:
            pass
    return values


def restore_sysctls(values: dict[str, str]) -> None:
    for key, value in values.items():
        path = Path("/proc/sys") / key
        try:
            if path.read_text().strip() != value:
                path.write_text(value + "\n")
        except OSError:
            pass


CGROUP_V1 = Path("/sys/fs/cgroup")


def make_cgroup_root(name: str) -> list[Path]:
    """Create ``/<name>`` in every cgroup v1 hierarchy: this node's private cgroupRoot.

    Returns every path to remove afterwards, including the hybrid unified one.

    Two kubelets sharing the default root (``/kubepods``) would each clean up
    the other's pod cgroups; a root per node keeps concurrent runs apart.
    """
    made = []
    for hierarchy in sorted(CGROUP_V1.iterdir()):
        if not (hierarchy / "cgroup.procs").exists():
            continue
        path = hierarchy / name
        made.append(path)  # the unified (v2) one is created by runc; returned for cleanup
        if hierarchy.name == "unified":
            continue
        path.mkdir(exist_ok=True)
        if hierarchy.name == "cpuset":  # a new v1 cpuset starts empty and accepts no task
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (path / knob).write_text((hierarchy / knob).read_text())
    return made


def remove_cgroup_tree(roots: list[Path]) -> list[str]:
    """rmdir every cgroup below and including ``roots``, deepest first; returns what stayed."""
    left = []
    for root in roots:
        if not root.exists():
            continue
        dirs = sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for path in [*dirs, root]:
            for _attempt in range(20):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                left.append(str(path))
    return left


def missing_prerequisites() -> list[str]:
    """What this machine lacks to run a node; empty when everything is there."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (kubelet mounts volumes and manages cgroups)")
    for tool in ("containerd", "runc", "ctr"):
        if shutil.which(tool) is None:
            missing.append(f"{tool} (Debian: containerd / runc)")
    for plugin in ("bridge", "host-local", "loopback"):
        if not (CNI_BIN_DIR / plugin).exists():
            missing.append(f"{CNI_BIN_DIR / plugin} (Debian: containernetworking-plugins)")
    if not (CGROUP_V1 / "memory" / "cgroup.procs").exists():
        missing.append("cgroup v1 hierarchies under /sys/fs/cgroup (node.py handles v1 only)")
    if not BUSYBOX.exists() or "static" not in _file_kind(BUSYBOX):
        missing.append(f"static {BUSYBOX} (Debian: busybox-static)")
    return missing


def _file_kind(path: Path) -> str:
    try:
        out = subprocess.run(["file", "-L", str(path)], capture_output=True, text=True, timeout=10)
        return out.stdout
    except (OSError, subprocess.TimeoutExpired):
        # No `file`: a static busybox has no PT_INTERP, i.e. no "/lib64/ld-linux" string.
        return "" if b"/lib64/ld-linux" in path.read_bytes()[:4096] else "static"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def build_busybox_image(out: Path, *, ref: str, cmd: list[str]) -> None:
    """Write a one-layer OCI image archive (oci-layout tar) of busybox-static to ``out``."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for d in ("bin", "tmp", "proc", "sys", "dev", "etc", "var"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tf.addfile(info)
        data = BUSYBOX.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        tf.addfile(info, io.BytesIO(data))
        for applet in _APPLETS:
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tf.addfile(info)
    diff = raw.getvalue()
    layer = gzip.compress(diff, mtime=0)
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": cmd, "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [_digest(diff)]},
    }).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": _digest(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _digest(layer), "size": len(layer)}],
    }).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": _digest(manifest), "size": len(manifest),
        "annotations": {"org.opencontainers.image.ref.name": ref, "io.containerd.image.name": ref},
    }]}).encode()
    with tarfile.open(out, "w") as tf:
        def add(name: str, payload: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(payload), 0o644
            tf.addfile(info, io.BytesIO(payload))
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", index)
        for blob in (config, manifest, layer):
            add("blobs/sha256/" + _digest(blob)[7:], blob)


def containerd_config(base: Path) -> str:
    """A containerd 1.6 config whose every path lives under ``base``."""
    return f"""version = 2
root = "{base}/root"
state = "{base}/state"
[grpc]
  address = "{base}/containerd.sock"
[ttrpc]
  address = "{base}/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # Root here lacks CAP_SYS_RESOURCE, so runc cannot lower oom_score_adj below
  # containerd's own (the pause container asks for -998): without this, sandbox
  # creation fails with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{base}/net.d"
"""


def cni_conflist(base: Path, *, service_net: str = "10.0.0.0/24") -> tuple[str, str]:
    """A bridge network with a random name and /24, so concurrent nodes do not collide."""
    tag = f"{random.randrange(16**4):04x}"
    bridge = f"kelp{tag}"
    subnet = f"10.{random.randrange(200, 250)}.{random.randrange(256)}.0/24"
    conf = {"cniVersion": "0.4.0", "name": f"kelp-{tag}", "plugins": [
        {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False,
         # Pods route the service range (10.0.x.0/24, the API server's `kubernetes` Service at
         # 10.0.x.1) to the node, as kube-proxy's nodes do; nothing else leaves the bridge.
         "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "routes": [{"dst": service_net}],
                  "dataDir": str(base / "ipam")}},
        {"type": "loopback"},
    ]}
    return bridge, json.dumps(conf, indent=1)


def kubelet_config(base: Path, *, port: int, healthz_port: int, cgroup_root: str,
                   extra: dict[str, str] | None = None) -> str:
    """The node's KubeletConfiguration; `extra`: top-level fields a test module adds (`KUBELET_CONFIG`)."""
    more = "".join(f"{k}: {v}\n" for k, v in (extra or {}).items())
    return f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /{cgroup_root}
containerRuntimeEndpoint: unix://{base}/containerd.sock
imageServiceEndpoint: unix://{base}/containerd.sock
failSwapOn: false
address: 127.0.0.1
port: {port}
healthzBindAddress: 127.0.0.1
healthzPort: {healthz_port}
readOnlyPort: 0
podLogsDir: {base}/pod-logs
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization: {{mode: AlwaysAllow}}
evictionHard: {{}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: /etc/resolv.conf
serializeImagePulls: false
{more}"""
