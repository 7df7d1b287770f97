"""Event-loop lag monitor: how late the broker's event loop runs, and what held it when it was very late.

Why: a broker is one asyncio loop; anything that runs on it for 100 ms (a
garbage collection, a file call, a large synchronous encode) delays every
request on every connection by as much, which is what a producer's p99 shows
(issue 23). Request latency cannot say which code did it; this monitor can.

How, cheaply:

- A timer on the loop (`loop.call_at`, a handle, no task) fires every
  `INTERVAL_S`; each firing observes how late it ran into
  `kelp_event_loop_lag_seconds` and raises `kelp_event_loop_lag_max_seconds`.
  About 100 callbacks a second of a few microseconds each.
- A watchdog thread wakes every `watch_s` (a quarter of the threshold, at
  most 25 ms) and compares the time with the timer's last beat. Only when the
  timer is overdue by more than half the threshold does it sample the loop
  thread's stack (`sys._current_frames`), recording module:line and function
  of the innermost frames. A stall of at least the threshold is sampled about
  twice or more; an idle or healthy loop costs the thread one comparison per
  wake-up.
- `gc.callbacks` time every collection of the process; the lag line says how
  much of a delay was garbage collection (which the stack samples cannot show:
  a collection runs inside whatever allocation triggered it) and
  `kelp_gc_pause_seconds{generation}` keeps their distribution.

When a firing is later than `kelp.loop.lag.warn.ms` (default 100), one
WARNING splits the delay: how much of it the loop thread spent on a CPU
(`time.thread_time`: code ran), how long it waited in the kernel's run
queue (Linux `/proc/self/task/<tid>/schedstat`: the machine's CPUs were busy
elsewhere, no fault of the broker's), the rest being time blocked (a system
call such as a file write, the GIL held by another thread, a lock); then
the garbage collector's share and the stack seen most often while the loop
was held. At most one such line per `LOG_EVERY_S`, the next one saying how
many it left out and the worst of them.

What it must never do: touch files or sockets (schedstat is procfs, read
with one `pread`), or hold a lock the loop needs for longer than a deque
append (the samples pass through `deque`s).
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import os
import sys
import threading
import time
from typing import Any

from prometheus_client.metrics import Gauge, Histogram

__all__ = ["LoopLagMonitor", "INTERVAL_S", "LOG_EVERY_S", "format_stack"]

log = logging.getLogger("kelp.broker.loop")

INTERVAL_S = 0.01  # how often the timer fires: finer than the 20 ms the latency goal cares about
LOG_EVERY_S = 10.0  # at most one lag line this often
_STACK_DEPTH = 10  # innermost frames named per sample
_MAX_SAMPLES = 64  # bounded: a very long stall keeps its first samples


def format_stack(frame: Any, depth: int = _STACK_DEPTH) -> str:
    """`module:line function` of the innermost `depth` frames, innermost first, joined by ` <- `
    (`kelp.broker.storage.log:120 append`: the module's name, not the machine's path)."""
    parts: list[str] = []
    while frame is not None and len(parts) < depth:
        module = frame.f_globals.get("__name__") or frame.f_code.co_filename
        parts.append(f"{module}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    return " <- ".join(parts)


class LoopLagMonitor:
    """Measures the running loop's lag into `histogram`/`max_gauge`; warns above `warn_s` naming what held it."""

    def __init__(self, histogram: Histogram, max_gauge: Gauge, gc_pauses: Histogram | None = None, *,
                 warn_s: float = 0.1, interval_s: float = INTERVAL_S, log_every_s: float = LOG_EVERY_S,
                 name: str = "broker") -> None:
        self._histogram = histogram
        self._max_gauge = max_gauge
        self._gc_pauses = gc_pauses
        self._gc_by_gen = [gc_pauses.labels(str(g)) for g in range(3)] if gc_pauses is not None else []
        self.warn_s = warn_s
        self.interval_s = interval_s
        self.log_every_s = log_every_s
        self.name = name
        self.max_lag_s = 0.0
        self.warnings = 0  # lag lines written
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0  # loop time the next firing is due
        self._beat = 0.0  # monotonic time of the last firing (the watchdog reads it)
        self._samples: collections.deque[tuple[float, str]] = collections.deque(maxlen=_MAX_SAMPLES)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop_thread = 0
        self._gc_started = 0.0
        self._gc_total = 0.0  # seconds of collection since start (all generations)
        self._gc_at_beat = 0.0
        self._gc_worst_gen = -1  # highest generation collected since the last firing
        self._cpu_at_beat = 0.0  # the loop thread's CPU time at the last firing
        self._schedstat: int | None = None  # fd of /proc/self/task/<loop thread>/schedstat (Linux), the watchdog's
        self._run_delay: collections.deque[tuple[float, int]] = collections.deque(maxlen=128)
        self._last_log = -float("inf")
        self._left_out = 0
        self._left_out_worst = 0.0

    # -- lifecycle ------------------------------------------------------
    def start(self) -> None:
        """Start on the running loop (call from a coroutine of the loop to watch)."""
        loop = self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        try:  # procfs, not a disk: how long the loop thread waited in the run queue (where the kernel says)
            self._schedstat = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
        except OSError:
            self._schedstat = None
        self._beat = time.monotonic()
        self._cpu_at_beat = time.thread_time()
        self._due = loop.time() + self.interval_s
        self._handle = loop.call_at(self._due, self._tick)
        gc.callbacks.append(self._on_gc)
        self._stop.clear()
        watch_s = min(self.warn_s / 4, 0.025)
        self._thread = threading.Thread(target=self._watch, args=(watch_s,), name=f"kelp-loop-watchdog-{self.name}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the timer and the watchdog (which ends within one `watch_s`; it is a daemon, nothing waits)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._stop.set()
        try:
            gc.callbacks.remove(self._on_gc)
        except ValueError:
            pass

    # -- on the loop ----------------------------------------------------
    def _tick(self) -> None:
        loop = self._loop
        assert loop is not None
        now = loop.time()
        lag = now - self._due
        if lag < 0.0:
            lag = 0.0
        self._histogram.observe(lag)
        if lag > self.max_lag_s:
            self.max_lag_s = lag
            self._max_gauge.set(lag)
        held_since = self._beat
        self._beat = time.monotonic()
        cpu = time.thread_time()
        cpu_s, self._cpu_at_beat = cpu - self._cpu_at_beat, cpu
        gc_s = self._gc_total - self._gc_at_beat
        self._gc_at_beat = self._gc_total
        gen, self._gc_worst_gen = self._gc_worst_gen, -1
        if lag >= self.warn_s:
            self._report(lag, held_since, gc_s, gen, cpu_s)
        elif self._samples:
            self._samples.clear()  # samples of a delay below the threshold
        self._due = now + self.interval_s
        self._handle = loop.call_at(self._due, self._tick)

    def _report(self, lag: float, held_since: float, gc_s: float, gen: int, cpu_s: float) -> None:
        stacks = collections.Counter(stack for beat, stack in list(self._samples) if beat == held_since)
        self._samples.clear()
        now = time.monotonic()
        queued_s = self._queued_since(held_since)
        if now - self._last_log < self.log_every_s:
            self._left_out += 1
            self._left_out_worst = max(self._left_out_worst, lag)
            return
        self._last_log = now
        self.warnings += 1
        if stacks:
            stack, seen = stacks.most_common(1)[0]
            held = f"held by ({seen} of {sum(stacks.values())} samples): {stack}"
        else:
            held = ("no stack sample (the watchdog did not look in time: it waited for a CPU too, or code held the "
                    "GIL)")
        collected = f"; garbage collection {gc_s * 1000:.0f} ms of it (generation {gen})" if gen >= 0 else ""
        skipped = (f"; {self._left_out} more over the threshold since the last line, worst "
                   f"{self._left_out_worst * 1000:.0f} ms" if self._left_out else "")
        self._left_out, self._left_out_worst = 0, 0.0
        queued = "" if queued_s is None else f", {queued_s * 1000:.0f} ms waiting for a CPU (run queue)"
        log.warning("%s: event loop blocked for %.0f ms (kelp.loop.lag.warn.ms=%.0f): %.0f ms of it on a CPU%s%s; "
                    "%s%s", self.name, lag * 1000, self.warn_s * 1000, cpu_s * 1000, queued, collected, held, skipped)

    def _queued_since(self, since: float) -> float | None:
        """Seconds the loop thread waited in the kernel's run queue from about `since` (the watchdog's last
        reading before it) to now; None without schedstat or a reading that old."""
        base = None
        for at, delay in list(self._run_delay):
            if at > since:
                break
            base = delay
        now = self._read_run_delay()
        return None if base is None or now is None else max(0, now - base) / 1e9

    def _read_run_delay(self) -> int | None:
        """The loop thread's run-queue wait so far (ns; schedstat's second field), None when unknown."""
        fd = self._schedstat
        if fd is None:
            return None
        try:
            return int(os.pread(fd, 128, 0).split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        """gc.callbacks: time each collection (of any thread; the loop's share shows as lag)."""
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        took = time.perf_counter() - self._gc_started
        self._gc_total += took
        gen = info.get("generation", 0)
        if gen > self._gc_worst_gen:
            self._gc_worst_gen = gen
        if self._gc_by_gen:
            self._gc_by_gen[min(gen, 2)].observe(took)

    # -- the watchdog thread --------------------------------------------
    def _watch(self, watch_s: float) -> None:
        sample_after = self.warn_s / 2 + self.interval_s
        try:
            self._watch_until_stopped(watch_s, sample_after)
        finally:
            fd, self._schedstat = self._schedstat, None
            if fd is not None:
                os.close(fd)

    def _watch_until_stopped(self, watch_s: float, sample_after: float) -> None:
        while not self._stop.wait(watch_s):
            delay = self._read_run_delay()
            if delay is not None:
                self._run_delay.append((time.monotonic(), delay))
            beat = self._beat
            if time.monotonic() - beat < sample_after:
                continue
            frame = sys._current_frames().get(self._loop_thread)
            if frame is not None and beat == self._beat:
                self._samples.append((beat, format_stack(frame)))
            del frame
