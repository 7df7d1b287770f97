"""A writer killed with SIGKILL loses nothing it acknowledged: appends reach the page
cache before `append_as_leader` returns, and recovery keeps every whole batch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from kelp.broker.storage import Log
from kelp.config.log_config import LogConfig

from .helpers import read_all

WRITER = textwrap.dedent(
    """
    import sys
    from kelp.records.build import build_batch
    from kelp.records.record import Record
    from kelp.config.log_config import LogConfig
    from kelp.broker.storage import Log
    log = Log.open(sys.argv[1], LogConfig(segment_bytes=20_000))
    i = 0
    while True:
        result = log.append_as_leader(build_batch([Record(b"k", b"value-%d" % i, timestamp=i)] * 3), leader_epoch=0)
        print(result.last_offset, flush=True)  # the acknowledgement
        i += 1
    """
)


def test_sigkill_loses_no_acknowledged_record(tmp_path) -> None:
    directory = tmp_path / "t-0"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(directory)], stdout=subprocess.PIPE, text=True)
    try:
        acked = -1
        assert proc.stdout is not None
        for _ in range(600):  # bounded: ~200 batches, several segments
            line = proc.stdout.readline()
            assert line, f"writer exited early with {proc.poll()}"
            acked = int(line)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    log = Log.open(directory, LogConfig(segment_bytes=20_000))
    assert log.log_end_offset > acked
    records = read_all(log)
    assert [r.offset for r in records] == list(range(log.log_end_offset))
    assert len(log.segments) > 1
