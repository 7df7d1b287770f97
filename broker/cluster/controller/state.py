"""What every role of the controller shares: its settings, its state, and the lookups and checks they all make.

Why it exists: the controller is composed of objects by role — the fenced writer of the metadata log
(`writer`), topic administration (`topic_admin`), partition moves (`partition_moves`), what brokers ask
(`broker_requests`), SCRAM users (`scram_admin`), ACLs (`acl_admin`), client quotas (`quota_admin`),
decommissioned brokers (`decommission`) — around the lifecycle in `core`. They decide over one image, one
set of live brokers and one lock; `ControllerState` is that one object, handed to each role explicitly.
What is here only reads the state (a lookup, a check, an election's inputs, an answer's shape) or marks the
controller deposed: nothing here writes the metadata log — every write goes through `writer.MetadataWriter`.

`ControllerSettings` lives here too: it is what the state is configured with.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Mapping

from kelp.config.broker import BrokerConfig
from kelp.config.keys import DEFAULT_ENTITY, parse_bool
from kelp.errors import (
    BrokerIdNotRegisteredError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)

from ...metadata.controller_answers import PartitionAnswer, TopicAnswer
from ...metadata.elections import Election
from ...metadata.image import MetadataImage
from ...metadata.model import BrokerEndpoint, PartitionState, TopicState
from ...metadata.records import MetadataRecord, partition_record, topic_record

__all__ = ["ControllerSettings", "ControllerState", "TopicConfigCheck"]

log = logging.getLogger("kelp.broker.controller")

TopicConfigCheck = Callable[[str, dict[str, str]], None]
"""Checks a topic's config overrides (name, overrides) and normalises them in place; raises ConfigError."""


class ControllerSettings:
    """What the controller reads from the broker config (Kafka names). Dynamic broker configs are not here: the
    controller reads them from its image at use time (`ControllerState.dynamic`)."""

    def __init__(self, cfg: BrokerConfig) -> None:
        self.num_partitions = int(cfg["num.partitions"])
        self.default_replication_factor = int(cfg["default.replication.factor"])
        # The static value; the dynamic ones in the metadata log win over it.
        self.unclean_leader_election = bool(cfg.static("unclean.leader.election.enable"))
        self.producer_id_block = int(cfg["producer.id.block.size"])
        self.lease_duration_ms = int(cfg["lease.duration.ms"])
        self.liveness_check_ms = int(cfg["controller.liveness.check.interval.ms"])
        # Preferred leaders elected again every this many seconds (None: auto.leader.rebalance.enable=false).
        self.leader_balance_s: float | None = float(cfg["leader.imbalance.check.interval.seconds"]) \
            if cfg["auto.leader.rebalance.enable"] else None
        self.snapshot_bytes = int(cfg["metadata.log.max.record.bytes.between.snapshots"])


class ControllerState:
    """The controller's image, epoch, live brokers and lock, shared by its roles; and what they read of them."""

    def __init__(self, *, broker_id: int, settings: ControllerSettings) -> None:
        self.broker_id = broker_id
        self.settings = settings
        self.epoch = -1
        self.image = MetadataImage()
        self.alive: dict[int, BrokerEndpoint] = {}  # the live brokers, as the last liveness check saw them
        self.shutting_down: set[int] = set()  # brokers in a controlled shutdown: they take no leadership
        self.lock = asyncio.Lock()  # serialises every decision: each sees the result of the one before
        self.active = False  # False once deposed (or stopped): nothing more is written or delivered

    @property
    def topics(self) -> Mapping[str, TopicState]:
        return self.image.topics

    def deposed(self, why: str) -> None:
        """Step down: this controller writes nothing more (its next write raises NotControllerError)."""
        if self.active:
            log.warning("controller epoch %d is deposed (%s): stepping down", self.epoch, why)
        self.active = False

    # -- lookups ----------------------------------------------------------
    def topic(self, name: str) -> TopicState:
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
        return topic

    def partition_state(self, topic: str, partition: int) -> tuple[TopicState, PartitionState]:
        t = self.topic(topic)
        if not 0 <= partition < t.partitions:
            raise UnknownTopicOrPartitionError(f"partition {partition} of topic '{topic}' does not exist")
        return t, t.partition(partition)

    def decommissioned(self) -> frozenset[int]:
        return frozenset(b for b, reg in self.image.brokers.items() if reg.decommissioned)

    def eligible(self) -> frozenset[int]:
        return frozenset(set(self.alive) - self.shutting_down)

    def dynamic(self, key: str) -> str | None:
        """A dynamic broker config as this controller's image holds it: its own broker's, else the cluster-wide
        default; None when neither is set (the static value applies)."""
        for entity in (self.broker_id, DEFAULT_ENTITY):
            value = self.image.broker_configs.get(entity, {}).get(key)
            if value is not None:
                return value
        return None

    def election(self, topic: TopicState, alive: set[int], *, allow_unclean: bool = True) -> Election:
        # The topic's override, else the dynamic broker config, else the static one (read at each election).
        key = "unclean.leader.election.enable"
        value = topic.configs.get(key, self.dynamic(key))
        unclean = allow_unclean and (_true(value) if value is not None else self.settings.unclean_leader_election)
        return Election(alive=frozenset(alive), eligible=frozenset(alive - self.shutting_down), unclean=unclean,
                        decommissioned=self.decommissioned())

    # -- checks -----------------------------------------------------------
    def check_replica_list(self, name: str, p: int, replicas: list[int]) -> None:
        if not replicas:
            raise InvalidReplicationFactorError(f"topic '{name}' partition {p}: the replica list is empty")
        if len(set(replicas)) != len(replicas):
            raise InvalidRequestError(f"topic '{name}' partition {p}: replica list {replicas} names a broker twice")
        unknown = [r for r in replicas if r not in self.alive]
        if unknown:
            raise BrokerIdNotRegisteredError(
                f"topic '{name}' partition {p}: broker(s) {unknown} are not live members of the cluster "
                f"(live: {sorted(self.alive)})"
            )

    def check_new_replicas(self, name: str, p: int, replicas: list[int]) -> None:
        """Refuse placing replicas on decommissioned brokers (a manual assignment, a reassignment's added ones)."""
        leaving = sorted(set(replicas) & self.decommissioned())
        if leaving:
            raise InvalidReplicaAssignmentError(
                f"topic '{name}' partition {p}: broker(s) {leaving} are decommissioned (leaving the cluster) and "
                "take no new replicas; recommission them first or choose other brokers")

    # -- records and answers ----------------------------------------------
    def records_for(self, new: TopicState) -> list[MetadataRecord]:
        """A whole-topic record for a new topic or a config/partition-count change; else one per changed partition."""
        old = self.image.topics.get(new.name)
        if old is None or dict(old.configs) != dict(new.configs) or old.partitions != new.partitions:
            return [topic_record(new)]
        return [partition_record(new, p, s) for p, s in enumerate(new.partition_states) if s != old.partition_states[p]]

    # An operation's answer names the metadata offset that holds it: callers wait until they applied it.
    def topic_answer(self, state: TopicState) -> TopicAnswer:
        return {**state.to_json(), "metadata_offset": self.image.offset}

    def partition_answer(self, state: PartitionState) -> PartitionAnswer:
        return {**state.to_json(), "metadata_offset": self.image.offset}


def _true(value: str) -> bool:
    try:
        return parse_bool(value)
    except ValueError:
        return False
