"""The runner's side of `lazyfs`: one FUSE mount over a "disk" directory, started, told, powered off, stopped.

Why a module of its own: the topology mounts several (one per broker's logs, one for the shared cluster
directory) and must be able to cut the power of any of them at the moment a fault says: SIGKILL the daemon
(its cache, the writes not fsynced, dies with it), detach the mount, and mount a fresh daemon over the same
disk, so whatever starts there next reads only what was durable. Each daemon is named `kelplazyfs-<runner
pid>` in /proc/mounts (a killed runner's are found by `topology.sweep_stale`) and dies with the runner.

It must never touch a mount it did not make.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from kelp.cli.supervisor import die_with_parent

__all__ = ["LazyMount", "fuse_available"]

MOUNT_TIMEOUT_S = 20.0
CMD_TIMEOUT_S = 10.0
REPO = Path(__file__).resolve().parents[2]


def fuse_available() -> tuple[bool, str]:
    """(True, "") when this machine can run lazyfs: root, /dev/fuse, libfuse 3 and the mfusepy binding."""
    if os.geteuid() != 0:
        return False, "not root"
    if not os.path.exists("/dev/fuse"):
        return False, "no /dev/fuse"
    try:
        import mfusepy  # noqa: F401  (loads libfuse: fails without it)
    except (ImportError, OSError, EnvironmentError) as exc:
        return False, f"no libfuse 3 / mfusepy ({exc})"
    if shutil.which("fusermount3") is None and shutil.which("umount") is None:
        return False, "no fusermount3 or umount"
    return True, ""


class LazyMount:
    def __init__(self, disk: Path, mount: Path, log: Path) -> None:
        self.disk = disk
        self.mount = mount
        self.log = log
        self.proc: subprocess.Popen[str] | None = None
        self._events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self.power_losses = 0

    def start(self) -> None:
        self.disk.mkdir(parents=True, exist_ok=True)
        self.mount.mkdir(parents=True, exist_ok=True)
        # The checkout goes at the END of sys.path: first, its operator/ would shadow the standard library's.
        cmd = [sys.executable, "-c", "import runpy, sys; sys.path.append(sys.argv.pop(1)); "
               "runpy.run_module('tests.chaos.lazyfs', run_name='__main__', alter_sys=True)", str(REPO),
               "--backing", str(self.disk), "--mount", str(self.mount), "--fsname", f"kelplazyfs-{os.getpid()}"]
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                         start_new_session=True, preexec_fn=die_with_parent())
        with self._cond:
            self._events.clear()
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        event = self._wait("mounted", MOUNT_TIMEOUT_S)
        if event.get("event") != "mounted":
            raise RuntimeError(f"lazyfs over {self.disk} did not mount at {self.mount}: {event}")

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                if proc is self.proc:
                    self._events.append(event)
                    self._cond.notify_all()

    def _wait(self, name: str, timeout: float) -> dict[str, Any]:
        with self._cond:
            ok = self._cond.wait_for(lambda: any(e.get("event") in (name, "error") for e in self._events), timeout)
            if not ok:
                raise RuntimeError(f"lazyfs at {self.mount} did not answer {name!r} within {timeout:.0f} s "
                                   f"(see {self.log})")
            for k, e in enumerate(self._events):
                if e.get("event") in (name, "error"):
                    return self._events.pop(k)
        raise AssertionError("unreachable")

    def command(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._wait(str(cmd["op"]), CMD_TIMEOUT_S)

    def _detach(self) -> None:
        for cmd in (["fusermount3", "-u", "-z", str(self.mount)], ["umount", "-l", str(self.mount)]):
            if shutil.which(cmd[0]) is None:
                continue
            if subprocess.run(cmd, capture_output=True, timeout=15).returncode == 0:
                return

    def power_loss(self) -> dict[str, Any]:
        """Cut the power: the daemon (and every write it held) dies, a fresh one mounts the same disk. Returns
        what the cache held at that moment."""
        held: dict[str, Any] = {}
        try:
            held = self.command({"op": "stats"})
        except (RuntimeError, OSError):
            pass
        self._kill()
        self._detach()
        self.power_losses += 1
        self.start()
        return {k: v for k, v in held.items() if k != "event"}

    def _kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def stop(self) -> None:
        self._kill()
        self._detach()
