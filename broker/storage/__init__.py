"""Disk logs of partition replicas (`kelp.broker.storage`): segments, indexes, recovery, retention, compaction.

Public API (see docs/internals.md): `Log`, `AppendResult`, `FileSlice`,
`LogManager`, `LogCleaner`; a log's settings (`LogConfig`) are the config
package's (`kelp.config.log_config`). This package must never import
networking or anything above it (checked by tests/layout).
"""

from .cleaner import CleanerStats, LogCleaner
from .log import Log
from .log_append import AppendResult
from .log_manager import LogManager
from .log_read import FileSlice

__all__ = ["AppendResult", "CleanerStats", "FileSlice", "Log", "LogCleaner", "LogManager"]
