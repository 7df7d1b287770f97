"""Topic administration decided by the controller: create, delete, grow, alter configs, internal topics.

Why: these are the client-facing controller operations (CreateTopics, DeleteTopics, CreatePartitions,
AlterConfigs, the offsets topic's lazy creation); they share validation (names, collisions, replica
lists, limits) and placement, and nothing of leader election. Composed by `core.Controller`, which
gives it the shared state (`state`: the lock, the image, the live brokers, the shared checks and
answers), the one fenced write path (`writer`) and the topic config check. Every change is one
metadata-log entry; nothing here does I/O itself.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Mapping

from kelp.errors import (
    CoordinatorNotAvailableError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
)

from ...metadata.controller_answers import DeleteTopicAnswer, TopicAnswer
from ...metadata.model import INTERNAL_TOPICS, PartitionState, TopicState
from ...metadata.placement import assign_replicas
from ...metadata.records import remove_topic_record, topic_record
from ...topic_manager import check_topic_collision
from .state import ControllerState, TopicConfigCheck
from .writer import MetadataWriter

__all__ = ["TopicAdmin", "MAX_PARTITIONS"]

log = logging.getLogger("kelp.broker.controller")

MAX_PARTITIONS = 100_000


class TopicAdmin:
    """CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs and internal topics, on the controller."""

    def __init__(self, state: ControllerState, writer: MetadataWriter,
                 topic_config_check: TopicConfigCheck | None = None) -> None:
        self.state = state
        self.writer = writer
        self._topic_config_check = topic_config_check

    def _existing_replicas(self) -> list[tuple[int, ...]]:
        return [s.replicas for t in self.state.topics.values() for s in t.partition_states]

    def _racks(self) -> dict[int, str | None]:
        """The brokers new replicas may go to, with their racks: live, not shutting down, not decommissioned."""
        leaving = self.state.decommissioned() | self.state.shutting_down
        return {b.id: b.rack for b in self.state.alive.values() if b.id not in leaving}

    def _assign(self, name: str, *, partitions: int, replication_factor: int,
                first_partition: int = 0) -> list[list[int]]:
        try:
            return assign_replicas(brokers=self._racks(), partitions=partitions, replication_factor=replication_factor,
                                   first_partition=first_partition, existing=self._existing_replicas(), topic=name)
        except InvalidReplicationFactorError as exc:
            leaving = sorted(self.state.decommissioned() & set(self.state.alive))
            if not leaving:
                raise
            raise InvalidReplicationFactorError(f"{exc}; broker(s) {leaving} are decommissioned (leaving the "
                                                "cluster) and take no new replicas") from None

    async def create_topic(self, *, name: str, partitions: int | None = None, replication_factor: int | None = None,
                           configs: Mapping[str, str] | None = None, validate_only: bool = False,
                           assignments: Mapping[int, list[int]] | None = None) -> TopicAnswer:
        async with self.state.lock:
            self.writer.check_fresh()
            if name in self.state.topics:
                raise TopicAlreadyExistsError(f"topic '{name}' already exists")
            check_topic_collision(name, self.state.topics)  # against the cluster metadata, not one broker's cache
            partitions = self.state.settings.num_partitions if partitions in (None, -1) else int(partitions)
            rf = (self.state.settings.default_replication_factor if replication_factor in (None, -1)
                  else int(replication_factor))
            clean = dict(configs or {})
            if self._topic_config_check is not None:
                self._topic_config_check(name, clean)
            if assignments:
                plan = self._manual_assignment(name, {int(k): list(v) for k, v in assignments.items()})
            else:
                if partitions <= 0:
                    raise InvalidPartitionsError(f"topic '{name}': number of partitions must be > 0, got {partitions}")
                if partitions > MAX_PARTITIONS:
                    raise InvalidPartitionsError(f"topic '{name}': {partitions} partitions is over the limit of "
                                                 f"{MAX_PARTITIONS}")
                if rf <= 0:
                    raise InvalidReplicationFactorError(f"topic '{name}': replication factor must be > 0, got {rf}")
                plan = self._assign(name, partitions=partitions, replication_factor=rf)
            state = TopicState(
                name=name,
                partition_states=tuple(PartitionState(tuple(r), r[0], 0, tuple(r), 0) for r in plan),
                configs=clean,
            )
            if validate_only:
                return self.state.topic_answer(state)
            await self.writer.append([topic_record(state)])
            log.info("created topic %s: %d partition(s), replication factor %d, configs %s",
                     name, state.partitions, state.replication_factor, clean or "{}")
            return self.state.topic_answer(state)

    def _manual_assignment(self, name: str, assignments: Mapping[int, list[int]]) -> list[list[int]]:
        keys = sorted(int(k) for k in assignments)
        if keys != list(range(len(keys))):
            raise InvalidRequestError(f"topic '{name}': manual assignment must name partitions "
                                      f"0..{len(keys) - 1}, got {keys}")
        plan = [list(assignments[k]) for k in keys]
        sizes = {len(r) for r in plan}
        if len(sizes) != 1:
            raise InvalidReplicationFactorError(f"topic '{name}': every partition needs the same number of replicas, "
                                                f"got {sorted(sizes)}")
        for p, replicas in enumerate(plan):
            self.state.check_replica_list(name, p, replicas)
            self.state.check_new_replicas(name, p, replicas)
        return plan

    async def ensure_internal_topic(self, *, name: str, partitions: int, configs: Mapping[str, str],
                                    replication_factor: int) -> TopicAnswer:
        """Create an internal topic if missing — only once as many brokers as its replication factor are live.

        Kafka's rule (offsets.topic.replication.factor): creating it with fewer replicas would leave it
        under-replicated for good, so until enough brokers registered the answer is COORDINATOR_NOT_AVAILABLE
        and clients retry.
        """
        if name in self.state.topics:
            return self.state.topic_answer(self.state.topics[name])
        live = len(self._racks())
        if live < replication_factor:
            raise CoordinatorNotAvailableError(
                f"internal topic '{name}' needs {replication_factor} live brokers (its replication factor); "
                f"{live} are live: retry once the others have joined")
        try:
            return await self.create_topic(name=name, partitions=partitions, replication_factor=replication_factor,
                                           configs=configs)
        except TopicAlreadyExistsError:
            return self.state.topic_answer(self.state.topics[name])

    async def delete_topic(self, *, name: str, topic_id: str | None = None) -> DeleteTopicAnswer:
        """Delete topic `name` — only if its id is `topic_id`, when given (DeleteTopics by id: a topic re-created
        under the name since the caller looked is another topic, UNKNOWN_TOPIC_ID)."""
        async with self.state.lock:
            self.writer.check_fresh()
            topic = self.state.topic(name)
            if topic_id is not None and topic.topic_id != topic_id:
                raise UnknownTopicIdError(f"topic id {topic_id} does not exist (topic '{name}' has id "
                                          f"{topic.topic_id})")
            if name in INTERNAL_TOPICS:
                raise InvalidTopicError(
                    f"topic '{name}' is internal: deleting it would lose every consumer group's committed "
                    "offsets; refused"
                )
            await self.writer.append([remove_topic_record(topic)])
            log.info("deleted topic %s (id %s)", name, topic.topic_id)
            return {"name": name, "deleted": True, "metadata_offset": self.state.image.offset}

    async def create_partitions(self, *, name: str, total: int, validate_only: bool = False,
                                assignments: list[list[int]] | None = None) -> TopicAnswer:
        async with self.state.lock:
            self.writer.check_fresh()
            topic = self.state.topic(name)
            if total < topic.partitions:
                raise InvalidPartitionsError(
                    f"topic '{name}' has {topic.partitions} partitions; partitions can only grow, "
                    f"not shrink to {total}")
            if total == topic.partitions:
                raise InvalidPartitionsError(f"topic '{name}' already has {total} partitions")
            if total > MAX_PARTITIONS:
                raise InvalidPartitionsError(f"topic '{name}': {total} partitions is over the limit of "
                                             f"{MAX_PARTITIONS}")
            extra = total - topic.partitions
            if assignments:
                if len(assignments) != extra:
                    raise InvalidRequestError(f"topic '{name}': {len(assignments)} assignment(s) for {extra} "
                                              "new partition(s)")
                for i, replicas in enumerate(assignments):
                    self.state.check_replica_list(name, topic.partitions + i, list(replicas))
                    self.state.check_new_replicas(name, topic.partitions + i, list(replicas))
                plan = [list(r) for r in assignments]
            else:
                plan = self._assign(name, partitions=extra, replication_factor=topic.replication_factor,
                                    first_partition=topic.partitions)
            new = replace(topic, partition_states=topic.partition_states + tuple(
                PartitionState(tuple(r), r[0], 0, tuple(r), 0) for r in plan))
            if not validate_only:
                await self.writer.commit([new])
                log.info("topic %s grown from %d to %d partitions", name, topic.partitions, total)
            return self.state.topic_answer(new)

    async def alter_configs(self, *, name: str, configs: Mapping[str, str], replace_all: bool = False,
                            delete: list[str] | None = None, validate_only: bool = False) -> TopicAnswer:
        async with self.state.lock:
            self.writer.check_fresh()
            topic = self.state.topic(name)
            new_configs = {} if replace_all else dict(topic.configs)
            new_configs.update(configs)
            for key in delete or ():
                new_configs.pop(key, None)
            if self._topic_config_check is not None:
                self._topic_config_check(name, new_configs)
            new = replace(topic, configs=new_configs)
            if not validate_only:
                await self.writer.commit([new])
                log.info("altered config of topic %s: %s", name, new_configs)
            return self.state.topic_answer(new)
