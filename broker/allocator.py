"""The C allocator's thresholds for a broker process: large buffers reused from the heap, not mapped afresh.

Why: a broker allocates megabyte buffers all the time — a produce frame (up to `message.max.bytes` per batch,
read into a buffer that doubles as it arrives), a follower's fetch reply (up to
`replica.fetch.response.max.bytes`), the bytes objects asyncio's streams make of them. glibc serves every
allocation above its mmap threshold (128 KiB, raised only as far as the largest block freed so far) with a
fresh `mmap` and gives it back with `munmap` when freed, and it trims the heap's free top back to the
kernel beyond 128 KiB. Every such buffer is then zero-filled page by page on first touch: on this project's
2-core VM a fault costs about 4 µs, so reading 1 MB into a fresh buffer took 1,060 µs against 56 µs into
heap memory freed a moment before (`docs/performance.md`, "Page faults"). On the leader that was 15% of its
samples at 150 MB/s of acks=all produce.

`tune()` sets `M_MMAP_THRESHOLD` to 32 MiB (glibc's largest; a buffer above it still gets its own mapping,
so one huge frame is given back when done) and `M_TRIM_THRESHOLD` to 64 MiB: up to that much freed memory
at the top of the heap is kept for the next buffers instead of being returned. The cost is resident memory
kept after a burst of large requests, bounded by the trim threshold plus what fragmentation strands (which
glibc's own defaults can strand too); an idle broker that never saw large requests is unchanged.

Only a broker that owns its process calls it (`Broker.run`); a `MALLOC_MMAP_THRESHOLD_` or
`MALLOC_TRIM_THRESHOLD_` in the environment (glibc's own tunables) wins, and on a C library without
`mallopt` (musl) nothing changes. It must never be called from a library or a test process.
"""

from __future__ import annotations

import ctypes
import logging
import os

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "tune", "trim"]

log = logging.getLogger("kelp.broker")

MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
TRIM_THRESHOLD_BYTES = 64 << 20
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3


def _libc() -> ctypes.CDLL | None:
    """The C library's symbols as the process sees them (`dlopen(NULL)`): no `ctypes.util.find_library`, which
    runs `ldconfig` in a subprocess and imports tempfile and shutil with their compressors (issue 38)."""
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def tune() -> dict[str, int]:
    """Set the thresholds not already set in the environment; what was set (option name -> bytes)."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        log.debug("no mallopt in the C library: allocator thresholds left as they are")
        return {}
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done: dict[str, int] = {}
    for option, env, value in ((_M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", MMAP_THRESHOLD_BYTES),
                               (_M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_", TRIM_THRESHOLD_BYTES)):
        if env in os.environ:
            continue
        if mallopt(option, value) == 1:
            done[env.strip("_")] = value
        else:
            log.warning("mallopt refused %s=%d: large buffers keep the C library's defaults", env.strip("_"), value)
    return done


def trim() -> bool:
    """Give the free memory of the C heap back to the kernel once (glibc's `malloc_trim(0)`); False without it.

    Called once when start-up is done (`Broker.start`, a broker owning its process): what start-up allocated and
    freed (module loading, log recovery, the first metadata image) stays resident otherwise, since `tune` keeps
    up to 64 MiB of free heap; about 1 MiB of an empty broker's 41 (issue 38). One pass over the heap, a
    millisecond or less at start.
    """
    malloc_trim = getattr(_libc(), "malloc_trim", None)
    if malloc_trim is None:
        return False
    malloc_trim.argtypes = (ctypes.c_size_t,)
    malloc_trim.restype = ctypes.c_int
    malloc_trim(0)
    return True
