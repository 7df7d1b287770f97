"""Disk logs of partition replicas (`kelp.broker.storage`): segments, indexes, recovery, retention, compaction.

Public API (see docs/internals.md): `LogConfig`, `Log`, `AppendResult`,
`FileSlice`, `LogManager`, `LogCleaner`. This package must never import
networking or anything above it (checked by tests/layout).
"""

from .cleaner import CleanerStats, LogCleaner
from .config import LogConfig
from .log import AppendResult, FileSlice, Log
from .log_manager import LogManager

__all__ = ["AppendResult", "CleanerStats", "FileSlice", "Log", "LogCleaner", "LogConfig", "LogManager"]
