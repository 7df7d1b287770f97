"""Topics: names, partition counts, per-topic config overrides.

Why: every API that names a topic (Metadata, Produce, Fetch, CreateTopics, the
HTTP admin API) needs one authority saying which topics exist, how many
partitions they have and which configs override the broker defaults. The
single-broker store is `<first log dir>/__cluster_metadata.json`, replaced
atomically (write temp file, fsync, rename) so a crash leaves either the old
or the new state, never a torn file.

This module must never touch record data: it opens and deletes partition logs
through the LogManager only, and it never does networking.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

from kelp.errors import (
    ConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from .config import BrokerConfig, validate_topic_configs

__all__ = ["TopicManager", "TopicInfo", "validate_topic_name", "METADATA_FILE"]

log = logging.getLogger("kelp.broker.topics")

METADATA_FILE = "__cluster_metadata.json"
MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def validate_topic_name(name: Any) -> str:
    """Kafka's rules: legal chars `[a-zA-Z0-9._-]`, length 1..249, not `.` or `..`."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError(f"invalid topic name {name!r}: it must not be empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"invalid topic name '{name}': '.' and '..' are not allowed")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopicError(
            f"invalid topic name '{name[:40]}...': {len(name)} characters, the limit is {MAX_TOPIC_NAME}"
        )
    if not _LEGAL.match(name):
        bad = sorted({c for c in name if not re.match(r"[a-zA-Z0-9._-]", c)})
        raise InvalidTopicError(
            f"invalid topic name '{name}': illegal character(s) {''.join(bad)!r}; allowed are ASCII letters, digits, '.', '_' and '-'"
        )
    return name


@dataclass
class TopicInfo:
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)
    topic_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    def to_json(self) -> dict[str, Any]:
        return {
            "partitions": self.partitions,
            "replication_factor": self.replication_factor,
            "configs": dict(self.configs),
            "topic_id": self.topic_id,
        }


class TopicManager:
    """Authority on topics for one broker; persists every change before returning."""

    def __init__(self, config: BrokerConfig, logs: Any) -> None:
        self.config = config
        self.logs = logs
        self._dir = config.log_dirs[0]
        self._path = self._dir / METADATA_FILE
        self._topics: dict[str, TopicInfo] = {}
        self._listeners: list[Any] = []

    # -- persistence ----------------------------------------------------
    def load(self) -> None:
        """Read the metadata file (before the LogManager opens the logs)."""
        self._dir.mkdir(parents=True, exist_ok=True)
        if self._path.exists():
            try:
                data = json.loads(self._path.read_text())
            except (OSError, ValueError) as exc:
                raise ConfigError(f"cannot read topic metadata {self._path}: {exc}") from None
            for name, entry in data.get("topics", {}).items():
                self._topics[name] = TopicInfo(
                    name=name,
                    partitions=int(entry["partitions"]),
                    replication_factor=int(entry.get("replication_factor", 1)),
                    configs=dict(entry.get("configs", {})),
                    topic_id=entry.get("topic_id") or uuid.uuid4().hex,
                )

    def attach_logs(self, logs: Any) -> None:
        """Use `logs` (a LogManager) and make sure every partition has its log."""
        self.logs = logs
        for info in self._topics.values():
            for p in range(info.partitions):
                self.logs.get_or_create(info.name, p, self.log_config(info.name))

    def _save(self) -> None:
        data = {"version": 1, "topics": {n: t.to_json() for n, t in sorted(self._topics.items())}}
        tmp = self._path.with_suffix(".json.tmp")
        with open(tmp, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._path)
        try:
            fd = os.open(self._dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            pass

    def add_listener(self, callback: Any) -> None:
        """`callback(event, topic)` after create/delete/grow/alter (e.g. the HTTP layer, groups)."""
        self._listeners.append(callback)

    def _notify(self, event: str, topic: str) -> None:
        for cb in list(self._listeners):
            try:
                cb(event, topic)
            except Exception:  # a listener must not break the topic change
                log.exception("topic listener failed on %s %s", event, topic)

    # -- queries --------------------------------------------------------
    def list_topics(self) -> list[TopicInfo]:
        return [self._topics[n] for n in sorted(self._topics)]

    def exists(self, name: str) -> bool:
        return name in self._topics

    def get(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def describe(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
        return info

    def partition_count(self, name: str) -> int:
        return self.describe(name).partitions

    def check_partition(self, name: str, partition: int) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
        if not 0 <= partition < info.partitions:
            raise UnknownTopicOrPartitionError(
                f"partition {partition} of topic '{name}' does not exist (it has {info.partitions})"
            )
        return info

    def effective_configs(self, name: str) -> dict[str, tuple[str, bool]]:
        """topic config name -> (value, is_default)."""
        info = self.describe(name)
        out = {k: (v, True) for k, v in self.config.default_topic_config().items()}
        for k, v in info.configs.items():
            out[k] = (v, False)
        return out

    def log_config_or_none(self, name: str) -> Any:
        """For LogManager(config_for=...): None for unknown topics (defaults apply)."""
        return self.log_config(name) if name in self._topics else None

    def log_config(self, name: str) -> Any:
        from kelp.broker.storage import LogConfig

        merged = self.config.default_topic_config()
        info = self._topics.get(name)
        if info is not None:
            merged.update(info.configs)
        return LogConfig.from_kafka(merged)

    # -- changes --------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        configs: Mapping[str, Any] | None = None,
        *,
        validate_only: bool = False,
    ) -> TopicInfo:
        validate_topic_name(name)
        if name in self._topics:
            raise TopicAlreadyExistsError(f"topic '{name}' already exists")
        if partitions is None or partitions == -1:
            partitions = int(self.config["num.partitions"])
        if replication_factor is None or replication_factor == -1:
            replication_factor = int(self.config["default.replication.factor"])
        if partitions <= 0:
            raise InvalidPartitionsError(f"topic '{name}': number of partitions must be > 0, got {partitions}")
        if partitions > 100_000:
            raise InvalidPartitionsError(f"topic '{name}': {partitions} partitions is over the limit of 100000")
        if replication_factor <= 0:
            raise InvalidReplicationFactorError(
                f"topic '{name}': replication factor must be > 0, got {replication_factor}"
            )
        if replication_factor > 1:
            raise InvalidReplicationFactorError(
                f"topic '{name}': replication factor {replication_factor} is larger than the 1 available broker"
            )
        clean = validate_topic_configs(configs, topic=name)
        info = TopicInfo(name=name, partitions=partitions, replication_factor=replication_factor, configs=clean)
        # Validate the merged LogConfig too (storage knows its own limits).
        merged = self.config.default_topic_config()
        merged.update(clean)
        from kelp.broker.storage import LogConfig

        log_config = LogConfig.from_kafka(merged)
        if validate_only:
            return info
        self._topics[name] = info
        self._save()
        for p in range(partitions):
            self.logs.get_or_create(name, p, log_config)
        log.info("created topic %s with %d partition(s), configs %s", name, partitions, clean or "{}")
        self._notify("created", name)
        return info

    def ensure_topic(self, name: str) -> TopicInfo:
        """Auto-create for Metadata/Produce when `auto.create.topics.enable`."""
        info = self._topics.get(name)
        if info is not None:
            return info
        validate_topic_name(name)
        if not self.config["auto.create.topics.enable"]:
            raise UnknownTopicOrPartitionError(
                f"topic '{name}' does not exist and auto.create.topics.enable is false"
            )
        return self.create_topic(name)

    def delete_topic(self, name: str) -> None:
        info = self.describe(name)
        if not self.config["delete.topic.enable"]:
            raise ConfigError(f"cannot delete topic '{name}': delete.topic.enable is false")
        del self._topics[name]
        self._save()
        for p in range(info.partitions):
            try:
                self.logs.delete(name, p)
            except Exception as exc:  # already gone on disk is fine
                log.warning("deleting log of %s-%d: %s", name, p, exc)
        log.info("deleted topic %s", name)
        self._notify("deleted", name)

    def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> TopicInfo:
        info = self.describe(name)
        if total < info.partitions:
            raise InvalidPartitionsError(
                f"topic '{name}' has {info.partitions} partitions; partitions can only grow, not shrink to {total}"
            )
        if total == info.partitions:
            raise InvalidPartitionsError(f"topic '{name}' already has {total} partitions")
        if total > 100_000:
            raise InvalidPartitionsError(f"topic '{name}': {total} partitions is over the limit of 100000")
        if validate_only:
            return info
        old = info.partitions
        info.partitions = total
        self._save()
        cfg = self.log_config(name)
        for p in range(old, total):
            self.logs.get_or_create(name, p, cfg)
        log.info("topic %s grown from %d to %d partitions", name, old, total)
        self._notify("partitions", name)
        return info

    def alter_config(
        self,
        name: str,
        configs: Mapping[str, Any],
        *,
        replace: bool = False,
        delete: tuple[str, ...] | list[str] = (),
        validate_only: bool = False,
    ) -> TopicInfo:
        """Set (or with `replace`, replace all) overrides; `delete` drops keys back to defaults."""
        info = self.describe(name)
        clean = validate_topic_configs(configs, topic=name)
        new = {} if replace else dict(info.configs)
        new.update(clean)
        for key in delete:
            new.pop(key, None)
        merged = self.config.default_topic_config()
        merged.update(new)
        from kelp.broker.storage import LogConfig

        log_config = LogConfig.from_kafka(merged)
        if validate_only:
            return info
        info.configs = new
        self._save()
        self.logs.update_topic_config(name, log_config)
        log.info("altered config of topic %s: %s", name, new)
        self._notify("altered", name)
        return info
