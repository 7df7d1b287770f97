"""All partition logs of one broker, spread over its `log.dirs`.

Why it exists: the broker core asks for a partition's log by (topic,
partition) and never deals with directories. At start every
`<topic>-<partition>` directory is opened (and recovered); new partitions go
to the log dir holding the fewest; deleted partitions are first renamed to
`<name>.<uuid>-delete` so a crash mid-delete never resurrects them.

A name is not an identity: each log carries its topic's id
(`partition_metadata`, Kafka's `partition.metadata`), written when it is
created. `get_or_create` is given the id the metadata has for the topic; a
log of the same name with another id is another topic's (the topic was
deleted and re-created while this broker was down or restarting) and never
serves the new one: it is moved aside — `-delete` when its deletion is
recorded (the caller names the removed ids), else `-stray`, kept for an
operator — and the partition starts empty. Periodic
work (retention, time-based rolls and flushes, compaction) is exposed as
plain methods for the broker's scheduler to call. It must never import
networking or decide which partitions a broker should hold.
"""

from __future__ import annotations

import logging
import shutil
import threading
import uuid
from pathlib import Path
from typing import Callable, Container, Iterable

from kelp.clock import WallClockMs, wall_clock_ms
from kelp.config.log_config import LogConfig
from kelp.errors import KafkaStorageError

from .cleaner import DEFAULT_DEDUPE_BUFFER_BYTES, LogCleaner
from .log import Log
from .partition_metadata import read_topic_id, write_topic_id

log = logging.getLogger("kelp.broker.storage")

DELETE_SUFFIX = "-delete"
UNREADABLE_ID = "unreadable"  # the topic id of a log whose partition.metadata cannot be read: matches no topic
STRAY_SUFFIX = "-stray"  # another topic's log of the same name, whose deletion is not recorded: kept, never opened


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) from `<topic>-<partition>`; topic names may hold '-' and '.'; None if not one."""
    topic, sep, number = name.rpartition("-")
    if not sep or not topic or not number.isdigit():
        return None
    return topic, int(number)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class LogManager:
    """The logs of every partition replica on this broker."""

    def __init__(
        self,
        log_dirs: Iterable[str | Path],
        default_config: LogConfig | None = None,
        *,
        clock_ms: WallClockMs = wall_clock_ms,
        config_for: Callable[[str], LogConfig | None] | None = None,
        cleaner_dedupe_buffer_bytes: int = DEFAULT_DEDUPE_BUFFER_BYTES,
    ) -> None:
        """Open every partition directory under `log_dirs` (running recovery on each).

        `config_for(topic)` supplies a topic's config (overrides merged) when
        its logs are opened; None or a None result means `default_config`.
        `cleaner_dedupe_buffer_bytes` bounds the cleaner's key map (`log.cleaner.dedupe.buffer.size`).
        """
        self.log_dirs = [Path(d) for d in log_dirs]
        if not self.log_dirs:
            raise ValueError("log.dirs is empty: give at least one directory")
        self.default_config = default_config or LogConfig()
        self._clock_ms = clock_ms
        self._config_for = config_for
        self._lock = threading.RLock()
        self._logs: dict[tuple[str, int], Log] = {}
        # Logs held per log dir, kept with `_logs`: choosing the least loaded dir for each of 10,000 new
        # partitions by counting every log held took O(n^2) — most of a topic's creation time.
        self._per_dir: dict[Path, int] = {d: 0 for d in self.log_dirs}
        self._doomed: dict[tuple[str, int], Log] = {}  # detached, files not yet removed (`destroy`)
        self.cleaner = LogCleaner(clock_ms=clock_ms, dedupe_buffer_bytes=cleaner_dedupe_buffer_bytes)
        self.uncleanable: dict[tuple[str, int], str] = {}  # logs the cleaner failed on, and why
        for directory in self.log_dirs:
            directory.mkdir(parents=True, exist_ok=True)
            for child in sorted(directory.iterdir()):
                if not child.is_dir():
                    continue
                if child.name.endswith(DELETE_SUFFIX):
                    log.info("finishing the deletion of %s", child)
                    shutil.rmtree(child, ignore_errors=True)
                    continue
                if child.name.endswith(STRAY_SUFFIX):
                    continue
                parsed = parse_partition_dir(child.name)
                if parsed is None:
                    continue
                if parsed in self._logs:
                    raise KafkaStorageError(
                        f"partition {child.name} exists in two log dirs: {self._logs[parsed].directory} and {child}"
                    )
                opened = Log.open(child, self._topic_config(parsed[0]), clock_ms=clock_ms)
                try:
                    opened.topic_id = read_topic_id(child)
                except KafkaStorageError as exc:  # never taken for "no id": it matches no topic, so it is set aside
                    log.error("%s; the log is set aside as another topic's when its partition is placed here", exc)
                    opened.topic_id = UNREADABLE_ID
                self._logs[parsed] = opened
                self._per_dir[directory] += 1

    def _topic_config(self, topic: str) -> LogConfig:
        if self._config_for is not None:
            found = self._config_for(topic)
            if found is not None:
                return found
        return self.default_config

    def _choose_dir(self) -> Path:
        return min(self.log_dirs, key=lambda d: self._per_dir[d])

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None, *,
                      topic_id: str | None = None, removed_ids: Container[str] = ()) -> Log:
        """The log of (topic, partition) of the topic with `topic_id`, created in the least loaded log dir if new.

        A log held under that name for another topic id is moved aside first (`-delete` when its id is in
        `removed_ids`, the deletions recorded in the metadata; `-stray` otherwise, kept) and the partition starts
        empty; a log without an id (written before ids were stored) adopts `topic_id`. File work: worker threads.
        """
        key = (topic, partition)
        with self._lock:
            found = self._logs.get(key)
            if found is not None and topic_id is not None and found.topic_id not in (None, topic_id):
                self._set_aside(key, found, deleted=found.topic_id in removed_ids, new_id=topic_id)
                found = None
            if found is not None:
                if topic_id is not None and found.topic_id is None:
                    write_topic_id(found.directory, topic_id)
                    found.topic_id = topic_id
                    log.info("%s: adopted topic id %s (the log had none stored)", found.name, topic_id)
                if config is not None and config != found.config:
                    found.update_config(config)
                return found
            doomed = self._doomed.pop(key, None)
            if doomed is not None:  # placed here again before its deletion ran: move the old files aside now
                doomed.retire(f".{uuid.uuid4().hex}{DELETE_SUFFIX}")
            parent = self._choose_dir()
            created = Log.open(parent / partition_dir_name(topic, partition), config or self._topic_config(topic),
                               clock_ms=self._clock_ms)
            if topic_id is not None:
                write_topic_id(created.directory, topic_id)
                created.topic_id = topic_id
            self._logs[key] = created
            self._per_dir[parent] += 1
            return created

    def _set_aside(self, key: tuple[str, int], found: Log, *, deleted: bool, new_id: str) -> None:
        """Another topic's log under this name: detached and renamed, so it never serves the new topic."""
        self.uncleanable.pop(key, None)
        del self._logs[key]
        parent = found.directory.parent
        if parent in self._per_dir:
            self._per_dir[parent] -= 1
        suffix = DELETE_SUFFIX if deleted else STRAY_SUFFIX
        found.retire(f".{uuid.uuid4().hex}{suffix}")
        if deleted:
            log.warning("%s-%d: the log on disk belongs to topic id %s, whose deletion is recorded; the topic of that "
                        "name now has id %s: the old log is deleted and the partition starts empty", key[0], key[1],
                        found.topic_id, new_id)
            found.delete()
        else:
            log.error("%s-%d: the log on disk belongs to topic id %s, not to id %s that the metadata has for this "
                      "topic, and no deletion of it is recorded: it is kept as %s (never opened again; remove it by "
                      "hand) and the partition starts empty", key[0], key[1], found.topic_id, new_id, found.directory)

    def topic_ids(self) -> dict[tuple[str, int], str | None]:
        """Every log held and the topic id it carries (None: none stored)."""
        with self._lock:
            return {key: lg.topic_id for key, lg in self._logs.items()}

    def get(self, topic: str, partition: int) -> Log | None:
        """The log of (topic, partition), or None if this broker holds none."""
        return self._logs.get((topic, partition))

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self._logs

    def all_logs(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    def partitions(self) -> list[tuple[str, int]]:
        with self._lock:
            return sorted(self._logs)

    def delete(self, topic: str, partition: int, topic_id: str | None = None) -> bool:
        """Remove the partition's log (of `topic_id`'s topic, when given): rename to `<name>.<uuid>-delete`, then
        delete. False if absent.

        File work (closing, renaming, removing a directory tree): worker threads only. On the event loop,
        `detach` (memory only) then `destroy` in a thread, as `ReplicaManager.delete_log_later` does.
        """
        doomed = self.detach(topic, partition, topic_id)
        if doomed is None:
            return False
        self.destroy(doomed)
        return True

    def detach(self, topic: str, partition: int, topic_id: str | None = None) -> Log | None:
        """Forget the partition's log (memory only: safe on the event loop); `destroy` removes its files.

        From here on `get` answers None; a `get_or_create` of the same partition before `destroy` ran
        first moves the old directory out of the way (one rename) so the new log never opens old files.
        With `topic_id`, only a log of that topic (or one without an id) is detached: the log of a topic re-created
        under the name already is the new topic's, and the old one's deletion must not take it.
        """
        with self._lock:
            held = self._logs.get((topic, partition))
            if held is not None and topic_id is not None and held.topic_id not in (None, topic_id):
                return None
            self.uncleanable.pop((topic, partition), None)
            doomed = self._logs.pop((topic, partition), None)
            if doomed is not None:
                self._doomed[(topic, partition)] = doomed
                parent = doomed.directory.parent
                if parent in self._per_dir:
                    self._per_dir[parent] -= 1
            return doomed

    def destroy(self, doomed: Log) -> None:
        """Close and remove a detached log's files (renamed to `<name>.<uuid>-delete` first). Worker threads only."""
        doomed.retire(f".{uuid.uuid4().hex}{DELETE_SUFFIX}")
        with self._lock:
            for key, log_ in list(self._doomed.items()):
                if log_ is doomed:
                    del self._doomed[key]
        doomed.delete()

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        """Apply a changed topic config to every log of `topic` held here."""
        for (name, _), partition_log in list(self._logs.items()):
            if name == topic:
                partition_log.update_config(config)

    def run_retention(self) -> int:
        """Retention on every log; returns the number of segments deleted."""
        return sum(self._each(lambda lg: lg.enforce_retention()))

    def roll_by_time(self) -> int:
        return sum(self._each(lambda lg: int(lg.maybe_roll_by_time())))

    def flush_by_time(self) -> int:
        """How many logs were fsynced: rolled segments always (the recovery point follows), the active one per
        flush.ms."""
        return sum(self._each(lambda lg: int(any([lg.flush_rolled(), lg.maybe_flush()]))))

    def roll_and_flush_by_time(self) -> int:
        """`roll_by_time` and `flush_by_time` in one pass over the logs that may have something to do (the
        periodic task's, each second, in a worker thread); returns how many logs were looked at closer."""
        due = [lg for lg in self.all_logs() if lg.timed_work_due()]
        self._each_of(due, lambda lg: int(lg.maybe_roll_by_time()))
        self._each_of(due, lambda lg: int(any([lg.flush_rolled(), lg.maybe_flush()])))
        return len(due)

    def run_cleaner(self, now_ms: int | None = None) -> int:
        """Compact every log that is worth it; returns how many logs were cleaned.

        A log the cleaner fails on (a corrupt batch, an I/O error) is marked uncleanable with an
        ERROR naming it and skipped from then on (until the broker restarts), as Kafka's
        `LogCleanerManager.markPartitionUncleanable` does; every other log keeps being cleaned.
        """
        now = self._clock_ms() if now_ms is None else now_ms
        cleaned = 0
        for (topic, partition), partition_log in self._items():
            key = (topic, partition)
            if key in self.uncleanable:
                continue
            try:
                if not partition_log.cleanable():
                    continue
                self.cleaner.clean(partition_log, now)
            except Exception as exc:
                self.uncleanable[key] = f"{type(exc).__name__}: {exc}"
                log.error("log cleaner failed on %s; marking it uncleanable (it is still served; it is not "
                          "compacted again until the broker restarts): %s", partition_log.name, exc, exc_info=True)
                continue
            cleaned += 1
        return cleaned

    def _items(self) -> list[tuple[tuple[str, int], Log]]:
        with self._lock:
            return list(self._logs.items())

    def flush_all(self) -> None:
        self._each(lambda lg: lg.flush())

    def checkpoint_all(self) -> None:
        """Persist high watermarks and log starts (the broker calls this periodically)."""
        self._each(lambda lg: lg.write_checkpoint())

    def close_all(self) -> None:
        self._each(lambda lg: lg.close())

    def _each(self, action: Callable[[Log], int | None]) -> list[int]:
        return self._each_of(self.all_logs(), action)

    @staticmethod
    def _each_of(logs: list[Log], action: Callable[[Log], int | None]) -> list[int]:
        results = []
        for partition_log in logs:
            try:
                results.append(action(partition_log) or 0)
            except KafkaStorageError as exc:
                log.error("%s: %s", partition_log.name, exc)
        return results
