"""Helpers for storage tests: an injectable clock, batch builders, reading a whole log, a file system that blocks."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from kelp.records.build import build_batch
from kelp.records.header import iter_headers
from kelp.records.record import Record, iter_records

WAIT_S = 10  # a bounded wait for another thread's event


class FakeClock:
    """A wall clock in milliseconds (`kelp.clock.WallClockMs`, what `Log` takes) that only moves when told."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


def batch(*values: bytes, key: bytes | None = b"k", timestamp: int = 1_700_000_000_000, **kwargs) -> bytes:
    """One batch holding `values` (all with `key`), every record at `timestamp`."""
    return build_batch([Record(key, v, timestamp=timestamp) for v in values], **kwargs)


def keyed(pairs: list[tuple[bytes, bytes | None]], *, timestamp: int = 1_700_000_000_000) -> bytes:
    return build_batch([Record(k, v, timestamp=timestamp) for k, v in pairs])


def read_all(log, start: int | None = None, *, max_bytes: int = 1 << 20) -> list:
    """Every record from `start` (default: log start) to the log end, following batch boundaries."""
    offset = log.log_start_offset if start is None else start
    found = []
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes=max_bytes)
        if not data:
            break
        found.extend(r for r in iter_records(data) if r.offset >= offset)
        offset = list(iter_headers(data))[-1].next_offset
    return found


def count_preads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of every `os.pread` from now on (until `monkeypatch.undo()` or the test's end)."""
    reads: list[int] = []
    real = os.pread

    def counting(fd: int, n: int, pos: int) -> bytes:
        reads.append(n)
        return real(fd, n, pos)

    monkeypatch.setattr(os, "pread", counting)
    return reads


def log_files(directory: Path, suffix: str) -> list[Path]:
    return sorted(directory.glob(f"*{suffix}"))


class BlockingOpen:
    """`os.open` that blocks the first open of `<name>.log` until released, after saying it entered."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        self.name = name
        self.entered = threading.Event()
        self.release = threading.Event()
        self.threads: list[int] = []
        self._real = os.open
        self._done = False
        monkeypatch.setattr(os, "open", self)

    def __call__(self, path, flags, *args, **kwargs):  # os.open's signature
        if not self._done and os.fspath(path).endswith(self.name):
            self._done = True
            self.threads.append(threading.get_ident())
            self.entered.set()
            assert self.release.wait(WAIT_S), "the test never released the blocked open"
        return self._real(path, flags, *args, **kwargs)
