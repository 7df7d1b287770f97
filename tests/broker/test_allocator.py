"""A broker process reuses its large buffers from the heap: no page faults for each megabyte frame.

Why: glibc maps every allocation above 128 KiB afresh and unmaps it when freed, so each 1 MB produce frame
or fetch reply was zero-filled page by page again (about 4 µs a fault on a small VM: 1 ms per MB).
`allocator.tune()` (called by `Broker.run`) raises the thresholds; run in a process of its own, since it
changes the process's allocator for good.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_CYCLES = """
import resource, sys
if sys.argv[1] == "tune":
    from kelp.broker import allocator
    print(sorted(allocator.tune()))
def frame():  # a 1 MB frame read the way a connection reads one: a buffer doubling from 64 KiB
    buf = bytearray(65536)
    while len(buf) < 1_000_000:
        buf.extend(bytes(min(len(buf), 1_000_000 - len(buf))))
frame()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    frame()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str, **env: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _CYCLES, mode], capture_output=True, text=True, timeout=60,
                         check=True, env={**os.environ, "PYTHONSAFEPATH": "1", **env}).stdout
    return out.split("\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_tuned_process_reads_100_megabyte_frames_without_faulting_each_one_in() -> None:
    untuned = int(_faults("default")[0])
    names, tuned = _faults("tune")[:2]
    assert names == "['MALLOC_MMAP_THRESHOLD', 'MALLOC_TRIM_THRESHOLD']"
    # glibc's defaults fault about 244 pages of 4 KiB in for every frame (39,200 for the 100 here); tuned, the
    # heap's freed megabyte is the next frame's, and nothing is faulted in again
    assert int(tuned) < 100 * 10, f"{tuned} page faults for 100 frames after tune() ({untuned} untuned)"


def test_the_environment_wins() -> None:
    assert _faults("tune", MALLOC_MMAP_THRESHOLD_="131072", MALLOC_TRIM_THRESHOLD_="131072")[0] == "[]"
