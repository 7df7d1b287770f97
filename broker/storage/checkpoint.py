"""Small files replaced atomically: the partition checkpoint and the helpers behind it.

Why it exists: the log start offset, high watermark, recovery point and
cleaner offset must survive a crash as either the old or the new value, never
a torn mix. Every write goes to a temp file, is fsynced, renamed over the
target, and the directory is fsynced. It must never write in place.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("kelp.broker.storage")

PARTITION_CHECKPOINT = "partition.checkpoint"
_VERSION = "0"


def fsync_dir(directory: Path) -> None:
    """Make renames and unlinks in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace `path` with `data`: temp file, fsync, rename, fsync of the directory.

    `durable=False` skips both fsyncs: only for content whose loss or a torn
    copy after a crash is harmless (e.g. the checkpoint of a new, empty log).
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


@dataclass(slots=True)
class PartitionCheckpoint:
    """What a partition remembers across restarts besides its segments.

    `recovery_point`: every offset below it is known fsynced (or was written by
    a clean shutdown), so recovery scans only from the segment holding it.
    `cleaner_offset`: the first offset the log cleaner has not compacted yet.
    """

    log_start_offset: int = 0
    high_watermark: int = 0
    recovery_point: int = 0
    cleaner_offset: int = 0

    def write(self, directory: Path, *, durable: bool = True) -> None:
        text = (
            f"{_VERSION}\n"
            f"log_start_offset {self.log_start_offset}\n"
            f"high_watermark {self.high_watermark}\n"
            f"recovery_point {self.recovery_point}\n"
            f"cleaner_offset {self.cleaner_offset}\n"
        )
        write_atomically(directory / PARTITION_CHECKPOINT, text.encode(), durable=durable)

    @classmethod
    def read(cls, directory: Path) -> "PartitionCheckpoint | None":
        """The stored checkpoint, or None when missing or unreadable (then recovery scans everything)."""
        path = directory / PARTITION_CHECKPOINT
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError:
            return None
        try:
            if not lines or lines[0].strip() != _VERSION:
                raise ValueError(f"unknown version line {lines[:1]!r}")
            values = {}
            for line in lines[1:]:
                if line.strip():
                    key, value = line.split()
                    values[key] = int(value)
            return cls(**values)
        except (ValueError, TypeError) as exc:
            log.warning("ignoring unreadable checkpoint %s (%s); recovering the whole log", path, exc)
            return None
