"""Per-log settings (`LogConfig`), mapped from Kafka's topic property names.

Why it exists: one immutable object says how a partition's log rolls, keeps,
compacts and flushes; the topic manager builds it from broker defaults plus
topic overrides with `LogConfig.from_kafka`. It must never read globals or the
environment: settings are passed in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from kelp.errors import ConfigError

_DAY_MS = 24 * 60 * 60 * 1000
# compression.type's values, as Kafka's: "producer" keeps each batch's codec, "uncompressed" stores none.
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
UNLIMITED = -1


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one log. Each field names its unit; -1 means unlimited where noted."""

    segment_bytes: int = 1024 * 1024 * 1024  # segment.bytes: roll the active segment at this size
    segment_ms: int = 7 * _DAY_MS  # segment.ms: roll when the active segment's first batch is this old
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes: roll when the offset index is this big
    retention_ms: int = 7 * _DAY_MS  # retention.ms: delete closed segments whose newest timestamp is older; -1 keeps
    retention_bytes: int = UNLIMITED  # retention.bytes: delete oldest closed segments above this size; -1 keeps
    index_interval_bytes: int = 4096  # index.interval.bytes: one sparse index entry per this many log bytes
    max_message_bytes: int = 1048588  # max.message.bytes: largest batch accepted
    cleanup_policy: str = "delete"  # cleanup.policy: "delete", "compact" or "compact,delete"
    delete_retention_ms: int = _DAY_MS  # delete.retention.ms: how long tombstones survive compaction
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio: dirty/total bytes making a log worth cleaning
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms: records newer than this are not compacted
    flush_messages: int = UNLIMITED  # flush.messages: fsync after this many appended records; -1 leaves it to the OS
    flush_ms: int = UNLIMITED  # flush.ms: fsync when the last fsync is this old; -1 leaves it to the OS
    message_timestamp_type: str = "CreateTime"  # message.timestamp.type: "CreateTime" or "LogAppendTime"
    # compression.type: "producer" keeps the producer's codec, else the codec batches are stored in
    compression_type: str = "producer"

    def __post_init__(self) -> None:
        def positive(name: str, value: int) -> None:
            if value <= 0:
                raise ConfigError(f"{_KAFKA_NAMES[name]}={value} is invalid: it must be > 0")

        positive("segment_bytes", self.segment_bytes)
        positive("segment_ms", self.segment_ms)
        if self.index_interval_bytes < 0:
            raise ConfigError(f"index.interval.bytes={self.index_interval_bytes} is invalid: it must be >= 0")
        positive("max_message_bytes", self.max_message_bytes)
        if self.segment_bytes < 14:
            raise ConfigError(f"segment.bytes={self.segment_bytes} is invalid: it must be at least 14")
        if self.segment_index_bytes < 8:
            raise ConfigError(f"segment.index.bytes={self.segment_index_bytes} is invalid: it must be at least 8")
        for name in ("retention_ms", "retention_bytes", "flush_messages", "flush_ms"):
            value = getattr(self, name)
            if value < -1 or (name.startswith("flush") and value == 0):
                raise ConfigError(f"{_KAFKA_NAMES[name]}={value} is invalid: it must be -1 (unlimited) or > 0")
        if self.delete_retention_ms < 0 or self.min_compaction_lag_ms < 0:
            raise ConfigError("delete.retention.ms and min.compaction.lag.ms must be >= 0")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ConfigError(
                f"min.cleanable.dirty.ratio={self.min_cleanable_dirty_ratio} is invalid: it must be between 0 and 1"
            )
        policies = {p.strip() for p in self.cleanup_policy.split(",") if p.strip()}
        if not policies or not policies <= {"delete", "compact"}:
            raise ConfigError(
                f"cleanup.policy={self.cleanup_policy!r} is invalid: use delete, compact or compact,delete"
            )
        if self.compression_type not in COMPRESSION_TYPES:
            raise ConfigError(
                f"compression.type={self.compression_type!r} is invalid: use one of {', '.join(COMPRESSION_TYPES)}"
            )
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ConfigError(
                f"message.timestamp.type={self.message_timestamp_type!r} is invalid: use CreateTime or LogAppendTime"
            )

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def max_index_entries(self) -> int:
        return max(1, self.segment_index_bytes // 8)

    @classmethod
    def from_kafka(cls, props: Mapping[str, Any], *, base: "LogConfig | None" = None) -> "LogConfig":
        """Build from Kafka property names (`segment.bytes`, ...) over `base` (defaults if None).

        Unknown keys and unparsable values raise `ConfigError` naming the key.
        Keys that are not log settings (e.g. `min.insync.replicas`) are ignored
        when listed in `IGNORED_KAFKA_KEYS`.
        """
        changes: dict[str, Any] = {}
        for key, raw in props.items():
            if key in IGNORED_KAFKA_KEYS:
                continue
            name = _FIELD_FOR.get(key)
            if name is None:
                raise ConfigError(f"unknown topic config {key!r}; known: {', '.join(sorted(_FIELD_FOR))}")
            kind = _TYPES[name]
            try:
                if kind is str:
                    value: Any = str(raw).strip()
                elif kind is float:
                    value = float(raw)
                else:
                    value = int(str(raw).strip())
            except (TypeError, ValueError):
                raise ConfigError(f"invalid value {raw!r} for topic config {key!r}: expected {kind.__name__}") from None
            changes[name] = value
        return dataclasses.replace(base or cls(), **changes)

    def to_kafka(self) -> dict[str, str]:
        """Kafka property names to string values (for DescribeConfigs)."""
        return {key: str(getattr(self, name)) for key, name in _FIELD_FOR.items()}


_FIELD_FOR = {f.name.replace("_", "."): f.name for f in dataclasses.fields(LogConfig)}
_KAFKA_NAMES = {v: k for k, v in _FIELD_FOR.items()}
_TYPES = {f.name: type(getattr(LogConfig(), f.name)) for f in dataclasses.fields(LogConfig)}

# Topic configs Kafka accepts that are not settings of the log itself.
IGNORED_KAFKA_KEYS = frozenset(
    {
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "message.downconversion.enable",
        "message.format.version",
        "preallocate",
        "file.delete.delay.ms",
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "max.compaction.lag.ms",
        "message.timestamp.difference.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.after.max.ms",
        "local.retention.ms",
        "local.retention.bytes",
        "remote.storage.enable",
    }
)
