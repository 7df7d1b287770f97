"""What a broker process costs and whether it serves: CPU and RSS from /proc, a Metadata round trip.

Why: Kelp and Apache Kafka are compared on the same terms — CPU-seconds
(utime + stime) and resident memory summed over the broker's process tree,
read from `/proc` before and after a case (`pidstat` is not installed), and
"serving" meaning a Kafka Metadata response that lists the expected number of
brokers, the first thing every client asks.

It must never count a process outside the broker's tree, nor call a broker
serving before a Metadata response lists it.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path
from typing import Callable

__all__ = ["tree_pids", "cpu_seconds", "rss_bytes", "steal_seconds", "metadata_brokers", "latest_offset",
           "recv_exactly", "poll_until", "wait_serving"]

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (field 3 onwards), None if the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def tree_pids(root: int) -> list[int]:
    """`root` and every live descendant (one scan of /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def cpu_seconds(roots: list[int]) -> float:
    """utime + stime of every process in the trees under `roots` (all threads included), in seconds."""
    ticks = 0
    for root in roots:
        for pid in tree_pids(root):
            fields = _stat_fields(pid)
            if fields is not None:
                ticks += int(fields[11]) + int(fields[12])
    return ticks / _TICKS


def steal_seconds() -> float:
    """CPU time the hypervisor gave to others while this VM's CPUs wanted it (/proc/stat `steal`), summed
    over the CPUs; 0.0 where the kernel does not report it."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return 0.0
    return int(fields[8]) / _TICKS if len(fields) > 8 else 0.0


def rss_bytes(roots: list[int]) -> int:
    """Resident set size summed over the trees under `roots` (VmRSS)."""
    total = 0
    for root in roots:
        for pid in tree_pids(root):
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            except OSError:
                continue
    return total


def metadata_brokers(bootstrap: str, *, timeout_s: float = 2.0) -> int:
    """Brokers listed in a Metadata v4 response (no topics asked for) from the first address in `bootstrap`.

    v4 because Kafka 4 no longer answers v0-v3 and Kelp answers v0-v12;
    hand-encoded so the probe costs one small request, not a client library's start-up.
    """
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    client_id = b"kelp-bench-probe"
    body = struct.pack(">hhih", 3, 4, 1, len(client_id)) + client_id + struct.pack(">i?", 0, False)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        head = recv_exactly(sock, 4)
        frame = recv_exactly(sock, struct.unpack(">i", head)[0])
    # correlation id (4), throttle_time_ms (4), brokers array length (4)
    brokers: int = struct.unpack_from(">i", frame, 8)[0]
    return brokers


def latest_offset(bootstrap: str, topic: str, partition: int = 0, *, timeout_s: float = 2.0) -> tuple[int, int]:
    """(error code, offset) of a ListOffsets v2 "latest" (-1) for one partition, read_uncommitted: the high watermark.

    v2 because Kafka 4 answers v1 onwards and its response is not yet the
    flexible encoding (v6+); hand-encoded like `metadata_brokers`.
    """
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    client_id, name = b"kelp-bench-probe", topic.encode()
    body = (struct.pack(">hhih", 2, 2, 1, len(client_id)) + client_id
            + struct.pack(">ibih", -1, 0, 1, len(name)) + name + struct.pack(">iiq", 1, partition, -1))
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        frame = recv_exactly(sock, struct.unpack(">i", recv_exactly(sock, 4))[0])
    # correlation id (4), throttle_time_ms (4), topics (4), name (2 + n), partitions (4), partition (4)
    at = 12 + 2 + struct.unpack_from(">h", frame, 12)[0] + 4 + 4
    error, _timestamp, offset = struct.unpack_from(">hqq", frame, at)
    return error, offset


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed mid-response")
        buf += chunk
    return bytes(buf)


def poll_until(check: Callable[[], str | None], *, what: str, timeout_s: float = 60.0,
               alive: Callable[[], bool] = lambda: True, interval_s: float = 0.02) -> float:
    """Call `check()` until it returns None; the `time.perf_counter()` at which it did.

    `check()` returns what it saw while not there yet (an OSError counts as
    not yet, so a port still closed is polled again); `alive()` is asked
    between attempts so a broker that died is reported at once, not after
    the timeout. `what` names the wait in the errors.
    """
    deadline = time.monotonic() + timeout_s
    last: Exception | str = "no answer"
    while time.monotonic() < deadline:
        try:
            seen = check()
            if seen is None:
                return time.perf_counter()
            last = seen
        except OSError as exc:
            last = exc
        if not alive():
            raise RuntimeError(f"{what}: the broker exited first ({last})")
        time.sleep(interval_s)
    raise RuntimeError(f"{what}: not within {timeout_s:.0f} s ({last})")


def wait_serving(bootstrap: str, *, brokers: int = 1, timeout_s: float = 60.0,
                 alive: Callable[[], bool] = lambda: True) -> float:
    """Poll with Metadata until it lists `brokers` brokers; the `time.perf_counter()` at which it did."""
    def check() -> str | None:
        seen = metadata_brokers(bootstrap)
        return None if seen >= brokers else f"Metadata lists {seen} of {brokers} brokers"

    return poll_until(check, what=f"broker at {bootstrap} serving", timeout_s=timeout_s, alive=alive)
