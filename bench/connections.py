"""Many idle connections: what they cost a broker in memory, and what they do to a working client's latency.

Why: a broker in a large deployment holds thousands of client connections
that mostly sit idle (consumers of quiet topics, pooled producers). Each
idle connection here is a TCP connection that made one ApiVersions round
trip — what every Kafka client sends first — and then stays open without a
byte. With them open, the end-to-end latency run (bench/latency.py) measures
a working client beside them.

It must never report memory per connection without the count actually held open.
"""

from __future__ import annotations

import socket
import struct
from typing import Any, Callable

from . import latency, probe

__all__ = ["open_idle", "run"]


def _api_versions(sock: socket.socket, correlation_id: int) -> None:
    client_id = b"kelp-bench-idle"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    sock.sendall(struct.pack(">i", len(body)) + body)
    size = struct.unpack(">i", probe.recv_exactly(sock, 4))[0]
    probe.recv_exactly(sock, size)


def open_idle(bootstrap: str, count: int) -> list[socket.socket]:
    """`count` connections to the first broker in `bootstrap`, each after one ApiVersions v0 round trip."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    socks: list[socket.socket] = []
    try:
        for i in range(count):
            sock = socket.create_connection((host, int(port)), timeout=10)
            socks.append(sock)
            _api_versions(sock, i)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def run(bootstrap: str, pids: Callable[[], list[int]], *, count: int, latency_s: float,
        mb_s: float) -> dict[str, Any]:
    """RSS before and with `count` idle connections, and latency meanwhile."""
    rss_before = probe.rss_bytes(pids())
    socks = open_idle(bootstrap, count)
    try:
        rss_with = probe.rss_bytes(pids())
        lat = latency.run(bootstrap, topic="bench-latency-idle", mb_s=mb_s, seconds=latency_s)
    finally:
        for sock in socks:
            sock.close()
    return {"connections": count, "rss_before_bytes": rss_before, "rss_with_bytes": rss_with,
            "bytes_per_connection": (rss_with - rss_before) / count if count else float("nan"), "latency": lat}
