"""What brokers ask of the controller: ISR changes, controlled shutdowns, producer-id blocks, dynamic configs.

Why: these are the controller operations a broker sends about itself or its partitions, as Kafka's AlterPartition,
ControlledShutdown, AllocateProducerIds and IncrementalAlterConfigs on brokers; they share the checks against the
current epochs and the live brokers, and nothing of topic administration or reassignment. Composed by
`core.Controller`, which gives it the shared state (`state`) and the one fenced write path (`writer`). Every change
is one metadata-log entry; nothing here does I/O itself.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Mapping

from kelp.config.broker import validate_broker_configs
from kelp.config.keys import DEFAULT_ENTITY
from kelp.errors import (
    CoordinatorLoadInProgressError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidRequestError,
    InvalidUpdateVersionError,
    KelpError,
    NotLeaderOrFollowerError,
)

from ...metadata.controller_answers import (
    AlterPartitionItem,
    AlterPartitionResult,
    AlterPartitionsAnswer,
    BrokerConfigsAnswer,
    PartitionAnswer,
    ProducerIdsAnswer,
    ShutdownAnswer,
)
from ...metadata.elections import complete_reassignment, describe_change, elect
from ...metadata.group_configs import config_change
from ...metadata.model import NO_LEADER, PartitionState, TopicState
from ...metadata.records import (
    MetadataRecord,
    broker_config_record,
    broker_record,
    partition_record,
    producer_ids_record,
)
from .state import ControllerState
from .writer import MetadataWriter

__all__ = ["BrokerRequests"]

log = logging.getLogger("kelp.broker.controller")


class BrokerRequests:
    """The operations brokers send the controller about themselves and their partitions."""

    def __init__(self, state: ControllerState, writer: MetadataWriter) -> None:
        self.state = state
        self.writer = writer

    async def alter_partition(self, *, topic: str, partition: int, leader: int, leader_epoch: int,
                              partition_epoch: int, isr: list[int]) -> PartitionAnswer:
        """AlterPartition (KIP-497) from a leader: a new ISR, checked against the current epochs.

        Idempotent: a retry of a request that was applied (same leader and leader epoch, the ISR it asked
        for already current) answers the current state instead of INVALID_UPDATE_VERSION, so a leader whose
        first answer was lost learns the outcome.
        """
        async with self.state.lock:
            self.writer.check_fresh()
            t, state = self.state.partition_state(topic, partition)
            new_state = self._judge(topic, partition, state, leader, leader_epoch, partition_epoch, isr)
            if new_state is not state:
                await self.writer.append([partition_record(t, partition, new_state)])
            return self.state.partition_answer(new_state)

    async def alter_partitions(self, *, leader: int, partitions: list[AlterPartitionItem]) -> AlterPartitionsAnswer:
        """Many AlterPartition items of one leader in one decision: Kafka's AlterPartition request carries every
        ISR change its leader has pending (`AlterPartitionManager`), so a broker that rejoins the ISR of
        thousands of partitions costs a few requests and metadata entries, not one of each per partition.

        Each item is judged exactly as `alter_partition` judges it, in the request's order (a later item for
        the same partition sees the earlier one's outcome), and answered on its own: one item's refusal
        (a stale epoch, an ineligible replica, an unknown partition) changes nothing of the others. The
        accepted changes are appended together; if that write fails, the whole request fails and the leader
        asks again, as for one item.
        """
        async with self.state.lock:
            self.writer.check_fresh()
            results: list[AlterPartitionResult | PartitionState] = []
            current: dict[tuple[str, int], PartitionState] = {}  # changed by an earlier item of this request
            records: list[MetadataRecord] = []
            for item in partitions:
                try:
                    topic, partition = item["topic"], item["partition"]
                    t, state = self.state.partition_state(topic, partition)
                    state = current.get((topic, partition), state)
                    new_state = self._judge(topic, partition, state, leader, item["leader_epoch"],
                                            item["partition_epoch"], item["isr"])
                except KelpError as exc:
                    results.append({"error_code": int(exc.code), "message": str(exc)})
                    continue
                if new_state is not state:
                    current[(topic, partition)] = new_state
                    records.append(partition_record(t, partition, new_state))
                results.append(new_state)
            await self.writer.append(records)
            return {"results": [{"error_code": 0, "state": r.to_json()} if isinstance(r, PartitionState) else r
                                for r in results],
                    "metadata_offset": self.state.image.offset}

    def _judge(self, topic: str, partition: int, state: PartitionState, leader: int, leader_epoch: int,
               partition_epoch: int, isr: list[int]) -> PartitionState:
        """The partition after this ISR change: `state` itself when nothing is to be written (the ISR asked for
        is current: a retry of an applied change), a new state to commit, or the refusal raised."""
        if leader != state.leader or leader_epoch != state.leader_epoch:
            err = FencedLeaderEpochError if leader_epoch < state.leader_epoch else NotLeaderOrFollowerError
            raise err(f"{topic}-{partition}: ISR change from broker {leader} at leader epoch {leader_epoch}, "
                      f"but the leader is {state.leader} at epoch {state.leader_epoch}")
        new_isr = tuple(dict.fromkeys(int(r) for r in isr))
        if partition_epoch != state.partition_epoch:
            if partition_epoch < state.partition_epoch and set(new_isr) == set(state.isr):
                return state
            raise InvalidUpdateVersionError(
                f"{topic}-{partition}: ISR change based on partition epoch {partition_epoch}, current is "
                f"{state.partition_epoch}")
        if leader not in new_isr or any(r not in state.replicas for r in new_isr):
            raise InvalidRequestError(f"{topic}-{partition}: ISR {list(new_isr)} must include the leader and only "
                                      f"replicas {list(state.replicas)}")
        added = [r for r in new_isr if r not in state.isr]
        bad = [r for r in added if r not in self.state.alive or r in self.state.shutting_down]
        if bad:
            raise IneligibleReplicaError(f"{topic}-{partition}: broker(s) {bad} cannot join the ISR: not live "
                                         "or shutting down")
        if set(new_isr) == set(state.isr):
            return state
        new_state = replace(state, isr=new_isr, partition_epoch=state.partition_epoch + 1)
        return complete_reassignment(topic, partition, new_state, self.state.eligible())

    async def controlled_shutdown(self, *, broker_id: int) -> ShutdownAnswer:
        """Move leadership off `broker_id` and take it out of every ISR; returns what it still leads.

        Never an unclean election: the broker asking is alive and in sync, so a partition nobody else can
        lead cleanly stays with it until it stops (then the liveness check decides, with the topic's rule).
        """
        async with self.state.lock:
            self.writer.check_fresh()
            self.state.shutting_down.add(broker_id)
            alive = set(self.state.alive)
            eligible = self.state.eligible()
            changed: list[TopicState] = []
            for topic in list(self.state.topics.values()):
                e = self.state.election(topic, alive, allow_unclean=False)
                new = topic
                for p, state in enumerate(topic.partition_states):
                    if broker_id not in state.replicas:
                        continue
                    if state.leader == broker_id:
                        s2 = elect(topic.name, p, state, e, avoid=broker_id)
                        if s2.leader == NO_LEADER:
                            continue  # nobody else in sync: it keeps leading until it stops
                    elif broker_id in state.isr and len(state.isr) > 1:
                        s2 = replace(state, isr=tuple(r for r in state.isr if r != broker_id),
                                     partition_epoch=state.partition_epoch + 1)
                    else:
                        continue
                    new = new.with_partition(p, s2)
                if new is not topic:
                    changed.append(new)
            for t in changed:
                old = self.state.topics[t.name]
                for p, s2 in enumerate(t.partition_states):
                    describe_change(t.name, p, old.partition_states[p], s2,
                                    f"controlled shutdown of broker {broker_id}")
            records: list[MetadataRecord] = [r for t in changed for r in self.state.records_for(t)]
            reg = self.state.image.brokers.get(broker_id)
            if broker_id in self.state.alive and (reg is None or not reg.shutting_down):
                records.append(broker_record(broker_id, self.state.alive[broker_id].incarnation, shutting_down=True))
            await self.writer.append(records)
            remaining: list[str] = []
            waiting: list[str] = []
            for t in self.state.topics.values():
                for p, s in enumerate(t.partition_states):
                    if s.leader == broker_id:
                        remaining.append(f"{t.name}-{p}")
                        if any(r != broker_id and r in eligible for r in s.replicas):
                            waiting.append(f"{t.name}-{p}")  # another live replica may catch up: worth a retry
            log.info("controlled shutdown of broker %d: leadership moved for %d topic(s); it still leads "
                     "%d partition(s)",
                     broker_id, len(changed), len(remaining))
            return {"broker_id": broker_id, "remaining_leaderships": remaining, "awaiting_replicas": waiting,
                    "metadata_offset": self.state.image.offset}

    async def allocate_producer_ids(self, *, broker_id: int) -> ProducerIdsAnswer:
        """A block of producer ids, durable in the metadata log before it is handed out (ids are never reused).

        A failed write answers a retriable error; as it may have landed all the same, the slot is read back
        before the next write (`writer.resolve_doubt`), so a block is skipped rather than repeated.
        """
        async with self.state.lock:
            self.writer.check_fresh()
            await self.writer.resolve_doubt()
            first = self.state.image.next_producer_id
            count = self.state.settings.producer_id_block
            await self.writer.append([producer_ids_record(first + count)],
                                     unknown_outcome=CoordinatorLoadInProgressError)
            log.info("producer ids %d..%d allocated to broker %d", first, first + count - 1, broker_id)
            return {"first": first, "count": count, "metadata_offset": self.state.image.offset}

    async def alter_broker_configs(self, *, broker: int, configs: Mapping[str, str | None],
                                   replace_all: bool = False, validate_only: bool = False) -> BrokerConfigsAnswer:
        """Set (a value) or delete (None) dynamic broker configs of one entity — a broker id, or -1 for the
        cluster-wide default — in one metadata-log entry; `replace_all` drops the entity's keys not given
        (AlterConfigs). An id no broker has is allowed, as in Kafka. Answers the entity's configs after it."""
        async with self.state.lock:
            self.writer.check_fresh()
            if isinstance(broker, bool) or not isinstance(broker, int) or broker < DEFAULT_ENTITY:
                raise InvalidRequestError(f"broker config entity {broker!r}: a broker id, or -1 for the "
                                          "cluster-wide default")
            if not isinstance(configs, Mapping):
                raise InvalidRequestError("broker configs must map config names to values (or null to delete)")
            clean = validate_broker_configs(configs, portable=True)
            new, change = config_change(self.state.image.broker_configs.get(broker, {}), clean,
                                        replace_all=replace_all)
            if change and not validate_only:
                await self.writer.append([broker_config_record(broker, change)])
                log.info("dynamic broker configs of %s: %s", "the cluster-wide default" if broker == DEFAULT_ENTITY
                         else f"broker {broker}", ", ".join(f"{k}={'(deleted)' if v is None else v}"
                                                            for k, v in change.items()))
            return {"broker": broker, "configs": dict(sorted(new.items())), "metadata_offset": self.state.image.offset}

