"""What this machine does without Kelp: the yardsticks the broker is compared against.

- `sequential_write`: write N bytes to a file in chunks of the broker's mean
  batch size, no fsync (the broker also leaves data in the page cache; its
  flush policy is time/count based).
- `loopback_read`: send a file's bytes over a loopback TCP connection with
  `socket.sendfile` and receive them into a reused buffer — the ideal fetch
  path (what the broker's design aims at).

It must never fsync: the broker's produce path does not either.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

__all__ = ["sequential_write", "loopback_read"]


def sequential_write(path: Path, *, total_bytes: int, chunk_bytes: int) -> float:
    """Seconds to write `total_bytes` in `chunk_bytes` writes (best of 2, page cache)."""
    chunk = os.urandom(max(1, chunk_bytes))
    best = float("inf")
    for _ in range(2):
        if path.exists():
            path.unlink()
        start = time.perf_counter()
        with open(path, "wb", buffering=0) as fh:
            left = total_bytes
            while left > 0:
                n = fh.write(chunk if left >= len(chunk) else chunk[:left])
                left -= n
        best = min(best, time.perf_counter() - start)
    return best


def loopback_read(path: Path, *, recv_bytes: int = 1 << 20) -> float:
    """Seconds to move the whole file over 127.0.0.1 (sendfile -> recv_into), best of 2."""
    size = path.stat().st_size
    best = float("inf")
    for _ in range(2):
        server = socket.create_server(("127.0.0.1", 0))
        port = server.getsockname()[1]

        def serve() -> None:
            conn, _ = server.accept()  # noqa: B023 (accepted before the join below)
            with conn, open(path, "rb") as fh:
                conn.sendfile(fh)

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        buf = bytearray(recv_bytes)
        view = memoryview(buf)
        with socket.create_connection(("127.0.0.1", port)) as client:
            start = time.perf_counter()
            got = 0
            while got < size:
                n = client.recv_into(view)
                if not n:
                    break
                got += n
            elapsed = time.perf_counter() - start
        t.join(10)
        server.close()
        if got != size:
            raise RuntimeError(f"loopback reference moved {got} of {size} bytes")
        best = min(best, elapsed)
    return best
