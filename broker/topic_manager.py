"""Topics as this broker knows them: names, partition states, config overrides.

Why: every API that names a topic (Metadata, Produce, Fetch, CreateTopics, the
HTTP admin API) asks one place which topics exist, how their partitions are
placed and led, and which configs override the broker defaults. That place is
a cache of the cluster metadata: the controller decides and pushes
as steps of the ordered metadata log (`apply_delta`); changes a client asks
for (create, delete, grow, alter configs) are checked here, then sent to the
controller through the cluster member (`self.cluster.routing.call`), which returns
once this broker has applied the log entry holding the change, so a client
sees its own change at once. A topic's logs are deleted only for an explicit
deletion in the log, never because a topic is missing from some view.

Dynamic broker configs (`kafka-configs --entity-type brokers`) arrive the same
way: a delta that changes them sets the broker config's dynamic layer, and
every log whose topic does not override a changed default is reconfigured,
in a worker thread (a log's lock may be held by file work).

Internal topics (`__consumer_offsets`) are refused here for every door (Kafka
protocol, HTTP, CLI): a client may not create, delete or grow them nor turn
off their compaction — one such request would lose every group's committed
offsets. The coordinator creates them through the controller directly.

This module must never touch record data: it deletes partition logs through
the LogManager only, and it never does networking itself.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from typing import Callable, Iterable, Mapping, Protocol, cast

from kelp.config.broker import BrokerConfig, validate_broker_configs, validate_topic_configs
from kelp.config.keys import DEFAULT_ENTITY, TOPIC_BROKER_SYNONYMS
from kelp.config.log_config import LogConfig
from kelp.errors import (
    ConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    UnknownTopicOrPartitionError,
)
from kelp.json_types import JsonObject

from .metadata.controller_answers import BrokerConfigsAnswer, TopicAnswer
from .metadata.image import MetadataDelta, MetadataImage
from .metadata.model import INTERNAL_TOPICS, TopicState, topic_from_json
from .storage import LogManager

__all__ = ["TopicManager", "TopicInfo", "TopicListener", "ControllerDoor", "validate_topic_name",
           "check_topic_collision", "refuse_internal"]

log = logging.getLogger("kelp.broker.topics")

MAX_TOPIC_NAME = 249
_LOG_CONFIGS_KEPT = 1024  # distinct topic configs remembered (`log_config`); more start the memo afresh
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
TopicInfo = TopicState  # one type per concept: a topic is its cluster state

TopicListener = Callable[[str, str], None]
"""`callback(event, topic)`: created, deleted, forgotten, partitions, altered, state (`add_listener`)."""


class _MetadataView(Protocol):
    @property
    def image(self) -> MetadataImage: ...


class _ControllerCalls(Protocol):
    async def call(self, op: str, *, timeout_s: float = ..., **kwargs: object) -> JsonObject: ...


class ControllerDoor(Protocol):
    """What the topic manager uses of the cluster member: the metadata image applied here (`state`), the
    controller's operations (`routing`)."""

    @property
    def state(self) -> _MetadataView: ...

    @property
    def routing(self) -> _ControllerCalls: ...


def validate_topic_name(name: object) -> str:
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
            f"invalid topic name '{name}': illegal character(s) {''.join(bad)!r}; allowed are ASCII letters, digits, "
            "'.', '_' and '-'"
        )
    return name


def refuse_internal(name: str, action: str, why: str) -> None:
    """Raise INVALID_TOPIC_EXCEPTION (Kafka's answer for an internal topic) if `name` is internal."""
    if name in INTERNAL_TOPICS:
        raise InvalidTopicError(f"cannot {action} topic '{name}': it is internal ({why}); refused")


_OFFSETS_WHY = "it holds every consumer group's committed offsets"


def check_topic_collision(name: str, existing: Iterable[str]) -> None:
    """Kafka's rule: '.' and '_' are one character in metric names, so `a.b` and `a_b` cannot coexist.

    Every door that creates a topic (CreateTopics, HTTP, CLI, auto-create) reaches it through
    `TopicManager.create_topic` (this broker's view) and the controller's create (the cluster metadata).
    Raises InvalidTopicError (Kafka's INVALID_TOPIC_EXCEPTION) naming the existing topic.
    """
    folded = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == folded:
            raise InvalidTopicError(
                f"topic '{name}' collides with existing topic '{other}': '.' and '_' are the same in "
                "Kafka's metric names, so only one of them may exist"
            )


class TopicManager:
    """This broker's view of the cluster's topics; changes go through the controller."""

    def __init__(self, config: BrokerConfig, logs: LogManager | None = None) -> None:
        self.config = config
        self.logs = logs
        self.cluster: ControllerDoor | None = None  # the ClusterMember (set by the composition root)
        # Deletes one partition's log of one topic id without file work on the event loop
        # (ReplicaManager.delete_log_later, set by the composition root); None: LogManager.delete at once (unit tests
        # without a loop).
        self.log_deleter: Callable[[str, int, str], object] | None = None
        self._topics: dict[str, TopicState] = {}
        self._by_id: dict[str, str] = {}  # topic id (hex) -> name, for requests that name topics by id (KIP-516)
        self._listeners: list[TopicListener] = []
        self._log_configs: dict[frozenset[tuple[str, object]], LogConfig] = {}  # `log_config`'s shared ones
        # A topic's log config is computed and set under its lock, from the current topic and broker configs, by
        # the event loop (topic changes) and by the worker reconfiguring logs after a broker config change alike:
        # whichever runs last sets the current config, never an older one.
        self._config_locks: dict[str, threading.Lock] = {}
        self.reconfiguring: asyncio.Task[None] | None = None  # the newest reconfiguration after a broker config change

    def add_listener(self, callback: TopicListener) -> None:
        """`callback(event, topic)` after a change: created, deleted, forgotten (no longer in the metadata, logs
        kept), partitions, altered, state."""
        self._listeners.append(callback)

    def _notify(self, event: str, topic: str) -> None:
        for cb in list(self._listeners):
            try:
                cb(event, topic)
            except Exception:  # a listener must not break the topic change
                log.exception("topic listener failed on %s %s", event, topic)

    # -- applying the controller's decisions ----------------------------------
    async def prepare_logs(self, image: MetadataImage, states: Iterable[TopicState], *, full: bool = False) -> int:
        """Make ready, in a worker thread, the logs of this broker's replicas among `states` (topics of the
        metadata `image` about to be applied): created with their topic's id and config, and a log of the same name
        held for another topic id set aside first (`LogManager.get_or_create`: `-delete` when that id's deletion is
        in `image.removed`, else `-stray`). `apply_delta` then finds every log in place.

        `full` (the whole image, when this process is registered): also deletes the logs of topics the image no
        longer has whose deletion it records — a topic deleted while this broker was down. Opening 3,000 new logs
        on the event loop held it for seconds, past this broker's lease (issue 23); a log opened by name alone
        served another topic's records (issue 31). Returns how many logs were created or set aside."""
        logs = self.logs
        if logs is None:
            return 0
        broker_id = self.config.broker_id
        wanted: list[tuple[str, int, LogConfig, str]] = []
        for state in states:
            known = self._topics.get(state.name)
            before = known.partition_states if known is not None and known.topic_id == state.topic_id else ()
            config: LogConfig | None = None
            for p, ps in enumerate(state.partition_states):
                if broker_id not in ps.replicas or (p < len(before) and before[p] is ps):
                    continue  # not here, or unchanged since its log was made
                held = logs.get(state.name, p)
                if held is not None and held.topic_id == state.topic_id:
                    continue
                config = config or self.log_config(state.name, dict(state.configs))
                wanted.append((state.name, p, config, state.topic_id))
        removed = dict(image.removed)
        gone: list[tuple[str, int, str]] = []
        if full:
            gone = [(name, p, tid) for (name, p), tid in logs.topic_ids().items()
                    if name not in image.topics and tid is not None and removed.get(tid) == name]
        if not wanted and not gone:
            return 0

        def work() -> None:
            for name, p, config, topic_id in wanted:
                logs.get_or_create(name, p, config, topic_id=topic_id, removed_ids=removed)
            for name, p, topic_id in gone:
                if logs.delete(name, p, topic_id):
                    log.info("%s-%d: deleted (topic id %s was deleted while this broker was away)", name, p, topic_id)

        await asyncio.to_thread(work)
        return len(wanted) + len(gone)

    def apply_delta(self, delta: MetadataDelta) -> None:
        """Apply what one step of the metadata log changed (`metadata.image.MetadataDelta`), in that order:
        removals (logs deleted: only ever for a `remove_topic` record), topics forgotten without a tombstone
        (served no more, their logs kept), then new and changed topics. Dynamic broker configs first, so
        the logs of new topics start with them."""
        if delta.broker_configs is not None:
            self._apply_broker_configs(delta.broker_configs)
        for name, old in delta.removed.items():
            self._remove(name, old.topic_id, delete_logs=True)
        for name in delta.vanished:
            current = self._topics.get(name)
            if current is not None:
                log.error("topic %s (id %s) is not in the metadata snapshot and no deletion of it is recorded: it is "
                          "no longer served, but its logs are kept on disk; delete them by hand if it was deleted",
                          name, current.topic_id)
                self._remove(name, current.topic_id, delete_logs=False)
        for state in delta.changed.values():
            self._apply_state(state)

    def _apply_state(self, state: TopicState) -> None:
        old = self._topics.get(state.name)
        if old is not None and old.topic_id != state.topic_id:
            # Only a remove_topic record deletes data; the metadata log puts one before any re-creation.
            log.error("topic %s changes id %s -> %s without a recorded deletion; the old logs are kept",
                      state.name, old.topic_id, state.topic_id)
            self._remove(state.name, old.topic_id, delete_logs=False)
            old = None
        self._topics[state.name] = state
        self._by_id[state.topic_id] = state.name
        if old is None or dict(old.configs) != dict(state.configs):
            if self.logs is not None:
                with self._config_lock(state.name):
                    self.logs.update_topic_config(state.name, self.log_config(state.name))
        if old is None:
            self._notify("created", state.name)
            return
        if dict(old.configs) != dict(state.configs):
            self._notify("altered", state.name)
        if old.partitions != state.partitions:
            self._notify("partitions", state.name)
        elif old.partition_states != state.partition_states:
            self._notify("state", state.name)

    def _apply_broker_configs(self, configs: Mapping[int, Mapping[str, str]]) -> None:
        """New dynamic broker configs: this broker's and the cluster-wide default take effect here and now."""
        changed = self.config.set_dynamic(default=configs.get(DEFAULT_ENTITY, {}),
                                          broker=configs.get(self.config.broker_id, {}))
        if not changed:
            return
        log.info("dynamic broker configs changed on broker %d: %s", self.config.broker_id,
                 ", ".join(f"{k}={self.config[k]}" for k in sorted(changed)))
        topic_keys = {t for t, keys in TOPIC_BROKER_SYNONYMS.items() if changed & set(keys)}
        affected = [n for n, t in self._topics.items() if topic_keys - set(t.configs)]  # a default it uses
        if self.logs is not None:
            self.logs.default_config = LogConfig.from_kafka(self.config.default_topic_config())
            self._reconfigure(affected)
        for name in affected:
            self._notify("altered", name)

    def _config_lock(self, name: str) -> threading.Lock:
        # setdefault is atomic: one lock per topic name, kept (a re-created topic shares it)
        return self._config_locks.setdefault(name, threading.Lock())

    def _reconfigure(self, names: list[str]) -> None:
        """Give the logs of `names` their current config: in a worker thread, one reconfiguration after the
        other (each computes the configs when it runs); at once when no event loop runs (unit tests)."""
        logs = self.logs
        if logs is None:
            return

        def work() -> None:
            for name in names:
                with self._config_lock(name):
                    if name in self._topics:
                        logs.update_topic_config(name, self.log_config(name))

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            work()
            return
        previous = self.reconfiguring

        async def run() -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            try:
                await asyncio.to_thread(work)
            except Exception:
                log.exception("reconfiguring the logs of %d topic(s) after a broker config change failed", len(names))

        self.reconfiguring = loop.create_task(run(), name="reconfigure-logs")

    def _remove(self, name: str, topic_id: str, *, delete_logs: bool) -> None:
        info = self._topics.get(name)
        if info is None or info.topic_id != topic_id:
            return
        del self._topics[name]
        self._by_id.pop(topic_id, None)
        self._notify("deleted" if delete_logs else "forgotten", name)
        if delete_logs and self.logs is not None:
            for p in range(info.partitions):
                if self.logs.get(name, p) is None:
                    continue
                try:
                    if self.log_deleter is not None:
                        self.log_deleter(name, p, topic_id)  # the replica manager's: files removed in a worker thread
                    else:
                        self.logs.delete(name, p, topic_id)
                except Exception as exc:  # already gone on disk is fine
                    log.warning("deleting log of %s-%d: %s", name, p, exc)
            log.info("topic %s (id %s) deleted", name, topic_id)

    # -- queries --------------------------------------------------------
    def list_topics(self) -> list[TopicState]:
        return [self._topics[n] for n in sorted(self._topics)]

    def exists(self, name: str) -> bool:
        return name in self._topics

    def get(self, name: str) -> TopicState | None:
        return self._topics.get(name)

    def has_partition(self, name: str, partition: int) -> bool:
        """Whether topic `name` exists now with a partition `partition` (Kafka's `metadataCache.contains(tp)`)."""
        info = self._topics.get(name)
        return info is not None and 0 <= partition < info.partitions

    def name_of(self, topic_id: str) -> str | None:
        """The name of the topic with this id (32 hex digits), None if no topic has it."""
        return self._by_id.get(topic_id)

    def describe(self, name: str) -> TopicState:
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
        return info

    def partition_count(self, name: str) -> int:
        return self.describe(name).partitions

    def check_partition(self, name: str, partition: int) -> TopicState:
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

    def removed_ids(self) -> dict[str, str]:
        """The ids of deleted topics (id -> name) the metadata applied here records."""
        return dict(self.cluster.state.image.removed) if self.cluster is not None else {}

    def log_config_or_none(self, name: str) -> LogConfig | None:
        """For LogManager(config_for=...): None for unknown topics (defaults apply)."""
        return self.log_config(name) if name in self._topics else None

    def log_config(self, name: str, overrides: Mapping[str, str] | None = None) -> LogConfig:
        merged = self.config.default_topic_config()
        info = self._topics.get(name)
        if overrides is not None:
            merged.update(overrides)
        elif info is not None:
            merged.update(info.configs)
        # One LogConfig per distinct topic config, shared by every log that has it: a topic's 10,000 logs
        # held 10,000 equal ones (opened at a restart, or applied by hand; issue 38).
        key = frozenset(merged.items())
        found = self._log_configs.get(key)
        if found is None:
            found = LogConfig.from_kafka(merged)
            if len(self._log_configs) >= _LOG_CONFIGS_KEPT:
                self._log_configs.clear()
            self._log_configs[key] = found
        return found

    def check_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """The controller's check of a topic's overrides: each key and value, and the merged log config."""
        validate_topic_name(name)
        clean = validate_topic_configs(configs, topic=name)
        configs.clear()
        configs.update(clean)
        self.log_config(name, clean)

    def dynamic_broker_configs(self, entity: int) -> dict[str, str]:
        """The dynamic configs of one broker entity (-1: the cluster-wide default) in the metadata applied here."""
        if self.cluster is None:
            return {}
        return dict(sorted(self.cluster.state.image.broker_configs.get(entity, {}).items()))

    def group_configs(self, group: str) -> Mapping[str, str]:
        """A group's own configs (GROUP config resources, `metadata.group_configs`) in the metadata applied here."""
        return self.cluster.state.image.group_configs.get(group, {}) if self.cluster is not None else {}

    # -- changes (through the controller) ------------------------------------
    def _controller(self) -> ControllerDoor:
        """Where changes go; the controller's answer is applied here (in metadata-log order) before `call` returns."""
        if self.cluster is None:
            raise ConfigError("this broker has not joined its cluster yet; retry")
        return self.cluster

    @staticmethod
    def _changed_topic(answer: JsonObject) -> TopicState:
        return topic_from_json(cast(TopicAnswer, answer))  # the controller answers a topic change with the topic

    async def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        configs: Mapping[str, object] | None = None,
        *,
        validate_only: bool = False,
        assignments: Mapping[int, list[int]] | None = None,
    ) -> TopicState:
        validate_topic_name(name)
        if name not in self._topics:  # an existing one answers TOPIC_ALREADY_EXISTS, as for any topic
            refuse_internal(name, "create", "the group coordinator creates it with the partition count and configs "
                            "it needs")
        if partitions is not None and partitions != -1 and partitions <= 0:
            raise InvalidPartitionsError(f"topic '{name}': number of partitions must be > 0, got {partitions}")
        if replication_factor is not None and replication_factor != -1 and replication_factor <= 0:
            raise InvalidReplicationFactorError(
                f"topic '{name}': replication factor must be > 0, got {replication_factor}"
            )
        check_topic_collision(name, self._topics)
        clean = validate_topic_configs(configs, topic=name)
        self.log_config(name, clean)
        return self._changed_topic(await self._controller().routing.call(
            "create_topic", name=name, partitions=partitions, replication_factor=replication_factor,
            configs=clean, validate_only=validate_only,
            assignments={str(k): v for k, v in assignments.items()} if assignments else None))

    async def ensure_topic(self, name: str) -> TopicState:
        """Auto-create for Metadata/Produce when `auto.create.topics.enable`."""
        info = self._topics.get(name)
        if info is not None:
            return info
        validate_topic_name(name)
        if not self.config["auto.create.topics.enable"]:
            raise UnknownTopicOrPartitionError(
                f"topic '{name}' does not exist and auto.create.topics.enable is false"
            )
        from kelp.errors import LeaderNotAvailableError, TopicAlreadyExistsError

        try:
            return await self.create_topic(name)
        except TopicAlreadyExistsError:
            found = self._topics.get(name)
            if found is None:
                # It exists in the cluster but not yet in this broker's metadata: retriable, as Kafka answers a
                # topic being created (TOPIC_ALREADY_EXISTS is not, and producers would drop their records).
                raise LeaderNotAvailableError(
                    f"topic '{name}' exists but broker {self.config.broker_id} has not applied it yet; retry") from None
            return found

    async def delete_topic(self, name: str, *, topic_id: str | None = None) -> None:
        """Delete topic `name` (only if its id is `topic_id`, when given: else UnknownTopicIdError)."""
        self.describe(name)
        refuse_internal(name, "delete", _OFFSETS_WHY + "; deleting it would lose them all")
        if not self.config["delete.topic.enable"]:
            raise ConfigError(f"cannot delete topic '{name}': delete.topic.enable is false")
        if topic_id is None:
            await self._controller().routing.call("delete_topic", name=name)
        else:
            await self._controller().routing.call("delete_topic", name=name, topic_id=topic_id)

    async def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> TopicState:
        info = self.describe(name)
        refuse_internal(name, "add partitions to", "a group's offsets live in the partition its id hashes to "
                        "among the current count; another count would lose them")
        if total < info.partitions:
            raise InvalidPartitionsError(
                f"topic '{name}' has {info.partitions} partitions; partitions can only grow, not shrink to {total}"
            )
        if total == info.partitions:
            raise InvalidPartitionsError(f"topic '{name}' already has {total} partitions")
        return self._changed_topic(await self._controller().routing.call(
            "create_partitions", name=name, total=total, validate_only=validate_only))

    async def alter_config(
        self,
        name: str,
        configs: Mapping[str, object],
        *,
        replace: bool = False,
        delete: tuple[str, ...] | list[str] = (),
        validate_only: bool = False,
    ) -> TopicState:
        """Set (or with `replace`, replace all) overrides; `delete` drops keys back to defaults."""
        info = self.describe(name)
        clean = validate_topic_configs(configs, topic=name)
        validate_topic_configs({key: None for key in delete}, topic=name)  # names only: a typo is not a no-op
        new = {} if replace else dict(info.configs)
        new.update(clean)
        for key in delete:
            new.pop(key, None)
        if not self.log_config(name, new).compact:
            refuse_internal(name, "turn off compaction of", _OFFSETS_WHY + ", kept by compaction alone")
        return self._changed_topic(await self._controller().routing.call(
            "alter_configs", name=name, configs=clean, replace_all=replace, delete=list(delete),
            validate_only=validate_only))

    async def alter_broker_configs(self, entity: int, configs: Mapping[str, object], *, replace: bool = False,
                                   validate_only: bool = False) -> dict[str, str]:
        """Set (a value) or delete (None) dynamic broker configs of `entity` (a broker id, or -1 for the
        cluster-wide default); `replace` drops its keys not given. Returns once applied here, with the entity's
        configs. Raises ConfigError naming an unknown, read-only or invalid key, as every door reports it."""
        clean = validate_broker_configs(configs)
        answer = await self._controller().routing.call("alter_broker_configs", broker=entity, configs=clean,
                                               replace_all=replace, validate_only=validate_only)
        return dict(cast(BrokerConfigsAnswer, answer)["configs"])  # the controller's answer to this operation
