"""Keeping a set of broker processes running: restart with backoff, and no broker outlives its supervisor.

Why: `kelp dev-cluster` (and the fault suite, `tests/chaos`) kill brokers on
purpose, and a user's laptop kills them by accident. A replicated cluster is
built to survive that, so the supervisor restarts a broker that exited —
after a bounded exponential backoff that resets once the broker stayed up a
while — while the others keep serving, and says on stderr which broker
exited, how (exit code or signal) and when it comes back. The other way
round, brokers must never outlive the supervisor: each child asks the kernel
(Linux `prctl(PR_SET_PDEATHSIG, SIGKILL)`, set in the child before exec) to
be killed when the thread that started it dies, and runs in its own session
and process group, so a terminal's Ctrl-C reaches only the supervisor (which
then stops every broker with a controlled shutdown) and `killpg` takes
anything a broker started with it.

Every child is started from the thread that calls `Supervisor.start_all()`
and `Supervisor.poll()`: the death signal follows the *thread* that forked,
so that thread must live as long as the children (the main thread does).

This module must never implement broker behaviour, and never leaves a child
running past `stop_all()`'s bound.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

__all__ = ["RestartBackoff", "Child", "Supervisor", "die_with_parent", "describe_exit"]

PR_SET_PDEATHSIG = 1


@dataclass
class RestartBackoff:
    """Delay before restarting a child: initial_s, doubling per quick exit, at most max_s.

    A child that stayed up at least `reset_after_s` before exiting starts
    again from `initial_s`: one crash after an hour is not a crash loop.
    """

    initial_s: float = 0.5
    max_s: float = 30.0
    reset_after_s: float = 60.0
    failures: int = 0

    def next_delay(self, uptime_s: float) -> float:
        if uptime_s >= self.reset_after_s:
            self.failures = 0
        delay: float = min(self.max_s, self.initial_s * (2 ** self.failures))  # int ** int is Any in typeshed
        self.failures += 1
        return delay


def die_with_parent(signum: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child receive `signum` when its parent thread dies (Linux only; None elsewhere).

    libc is loaded here, in the parent: the child between fork and exec only
    calls prctl and getppid. If the parent died before prctl took effect the
    child would be orphaned already, so it checks getppid() afterwards.
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    parent = os.getpid()

    def preexec() -> None:
        if prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
            os._exit(127)
        if os.getppid() != parent:
            os._exit(127)

    return preexec


def describe_exit(returncode: int) -> str:
    """`exited with code 1` / `was killed by SIGKILL`."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


@dataclass
class Child:
    """One supervised process: its command (a function of the ports it listened on before), and its readiness line."""

    name: str
    command: Callable[["Child"], list[str]]
    env: dict[str, str] | None = None
    stderr_path: Any = None  # a file the child's stderr is appended to (else inherited)
    stdout_sink: Callable[["Child", str], None] | None = None
    backoff: RestartBackoff = field(default_factory=RestartBackoff)
    proc: subprocess.Popen[str] | None = None
    started_at: float = 0.0
    restarts: int = 0
    restart_at: float | None = None     # monotonic time of the pending restart, if any
    info: dict[str, Any] | None = None  # the last `{"event": "listening", ...}` line
    pinned: dict[str, Any] = field(default_factory=dict)  # values a restart must reuse (ports)
    listening: threading.Event = field(default_factory=threading.Event)
    announced: bool = True
    held: bool = False  # down on purpose (a fault suite's kill): not reported, not restarted

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


class Supervisor:
    """Starts children, restarts them when they exit (unless `restart=False`), stops them all within a bound."""

    def __init__(self, children: list[Child], *, restart: bool = True, start_timeout_s: float = 60.0,
                 say: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.children = children
        self.restart = restart
        self.start_timeout_s = start_timeout_s
        self.say = say or _stderr
        self.clock = clock
        self.stopping = False
        self._preexec = die_with_parent()

    # -- starting ----------------------------------------------------------------------
    def start(self, child: Child) -> None:
        env = dict(os.environ, **(child.env or {}))
        child.listening.clear()
        child.info = None
        child.held = False
        stderr = open(child.stderr_path, "ab") if child.stderr_path is not None else None
        try:
            child.proc = subprocess.Popen(child.command(child), stdout=subprocess.PIPE, stderr=stderr, text=True,
                                          env=env, start_new_session=True, preexec_fn=self._preexec)
        finally:
            if stderr is not None:
                stderr.close()
        child.started_at = self.clock()
        threading.Thread(target=self._pump, args=(child, child.proc), daemon=True,
                         name=f"stdout-{child.name}").start()

    def start_all(self) -> None:
        for child in self.children:
            self.start(child)

    def _pump(self, child: Child, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                try:
                    info = json.loads(line)
                except ValueError:
                    info = None
                if isinstance(info, dict) and info.get("event") == "listening" and child.proc is proc:
                    child.info = info
                    child.listening.set()
                    continue
            if child.stdout_sink is not None:
                child.stdout_sink(child, line)

    def wait_listening(self, *, stop: threading.Event) -> dict[str, dict[str, Any]]:
        """Every child's listening line; a child exiting first (a bad setting, a port in use) fails the start."""
        deadline = self.clock() + self.start_timeout_s
        while True:
            for child in self.children:
                if child.proc is not None and child.proc.poll() is not None and not child.listening.is_set():
                    raise ChildFailed(f"{child.name} {describe_exit(child.proc.returncode)} before it listened; "
                                      "see its log above")
            if all(c.listening.is_set() for c in self.children):
                return {c.name: dict(c.info or {}) for c in self.children}
            if stop.is_set():
                raise Interrupted()
            if self.clock() > deadline:
                slow = [c.name for c in self.children if not c.listening.is_set()]
                raise ChildFailed(f"{', '.join(slow)} did not listen within {self.start_timeout_s:.0f}s; "
                                  "see the log above")
            stop.wait(0.05)

    # -- watching ----------------------------------------------------------------------
    def poll(self) -> list[Child]:
        """One supervision round; returns the children that exited in it. Restarts those due (restart=True)."""
        exited: list[Child] = []
        now = self.clock()
        for child in self.children:
            proc = child.proc
            if proc is None or self.stopping or child.held:
                continue
            code = proc.poll()
            if code is not None and child.restart_at is None:
                exited.append(child)
                uptime = now - child.started_at
                if not self.restart:
                    self.say(f"{child.name} (pid {proc.pid}) {describe_exit(code)} after {uptime:.1f} s")
                    continue
                delay = child.backoff.next_delay(uptime)
                child.restart_at = now + delay
                self.say(f"{child.name} (pid {proc.pid}) {describe_exit(code)} after {uptime:.1f} s up; "
                         f"restarting it in {delay:.1f} s (restart {child.restarts + 1}); the others keep serving")
            elif code is not None and child.restart_at is not None and now >= child.restart_at:
                child.restart_at = None
                child.restarts += 1
                child.announced = False
                self.start(child)
            elif code is None and not child.announced:
                if child.listening.is_set():
                    child.announced = True
                    self.on_back(child)
                elif now - child.started_at > self.start_timeout_s:
                    self.say(f"{child.name} (pid {proc.pid}) did not listen within {self.start_timeout_s:.0f} s "
                             "of its restart; killing it")
                    _kill_group(proc, signal.SIGKILL)
                    proc.wait(10)
        return exited

    def on_back(self, child: Child) -> None:
        """A restarted child listens again (dev-cluster prints it)."""
        self.say(f"{child.name} is back (pid {child.pid})")

    # -- stopping ----------------------------------------------------------------------
    def stop_all(self, timeout_s: float) -> dict[str, int | None]:
        """SIGTERM every child at once (each does a controlled shutdown), SIGKILL what is left after `timeout_s`.

        Returns each child's exit code; a child that had to be killed is
        reported on stderr by name.
        """
        self.stopping = True
        for child in self.children:
            child.restart_at = None
            if child.running:
                assert child.proc is not None
                child.proc.send_signal(signal.SIGTERM)
        deadline = self.clock() + timeout_s
        codes: dict[str, int | None] = {}
        for child in self.children:
            proc = child.proc
            if proc is None:
                codes[child.name] = None
                continue
            try:
                proc.wait(max(0.1, deadline - self.clock()))
            except subprocess.TimeoutExpired:
                self.say(f"{child.name} (pid {proc.pid}) did not stop within {timeout_s:.0f} s; killing it")
                _kill_group(proc, signal.SIGKILL)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
            codes[child.name] = proc.returncode
        return codes


class ChildFailed(Exception):
    """A child could not be started (it exited, or did not listen in time)."""


class Interrupted(Exception):
    """The supervisor was asked to stop while waiting."""


def _kill_group(proc: subprocess.Popen[str], signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.send_signal(signum)
    except (ProcessLookupError, OSError):
        pass


def _stderr(text: str, stream: TextIO | None = None) -> None:
    print(f"kelp: {text}", file=stream or sys.stderr, flush=True)
