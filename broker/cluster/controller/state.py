"""What every part of the `Controller` shares, declared once: its settings, its state and its helpers.

Why it exists: the controller is split by role into mixins — topic administration (`topic_admin`),
partition moves (`partition_moves`), the requests brokers send (`broker_requests`) — around the core
that loads the log, watches the brokers and writes entries (`core`), and decommissioned
brokers (`decommission`). Each part works on the same
fields, which `Controller.__init__` sets, and calls helpers another part defines. Declaring them here
once gives every part, and a type checker, one picture of them: a call to a helper is checked against
its real signature (mypy checks each definition against this declaration).

`ControllerSettings` lives here too: it is what the state is configured with. This module must never
hold logic or set a value: it is a list of names and types.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from kelp.config.broker import BrokerConfig

from ...metadata.controller_answers import PartitionAnswer, TopicAnswer
from ...metadata.elections import Election
from ...metadata.image import MetadataImage
from ...metadata.model import BrokerEndpoint, PartitionState, TopicState
from ...metadata.records import MetadataRecord

__all__ = ["ControllerSettings", "ControllerState", "TopicConfigCheck"]

TopicConfigCheck = Callable[[str, dict[str, str]], None]
"""Checks a topic's config overrides (name, overrides) and normalises them in place; raises ConfigError."""


class ControllerSettings:
    """What the controller reads from the broker config (Kafka names). Dynamic broker configs are not here: the
    controller reads them from its image at use time (`Controller._dynamic`)."""

    def __init__(self, cfg: BrokerConfig) -> None:
        self.num_partitions = int(cfg["num.partitions"])
        self.default_replication_factor = int(cfg["default.replication.factor"])
        # The static value; the dynamic ones in the metadata log win over it.
        self.unclean_leader_election = bool(cfg.static("unclean.leader.election.enable"))
        self.producer_id_block = int(cfg["producer.id.block.size"])
        self.lease_duration_ms = int(cfg["lease.duration.ms"])
        self.liveness_check_ms = int(cfg["controller.liveness.check.interval.ms"])
        self.snapshot_bytes = int(cfg["metadata.log.max.record.bytes.between.snapshots"])


class ControllerState:
    """The fields and helpers of `Controller` its parts use (set by `Controller.__init__`, defined by the parts)."""

    broker_id: int
    settings: ControllerSettings
    epoch: int
    image: MetadataImage
    alive: dict[int, BrokerEndpoint]  # the live brokers, as the last liveness check saw them
    active: bool
    _lock: asyncio.Lock  # serialises every decision: each sees the result of the one before
    _shutting_down: set[int]
    _topic_config_check: TopicConfigCheck | None

    if TYPE_CHECKING:  # defined by `Controller` and its parts; declared for the type checker alone, never here
        @property
        def topics(self) -> Mapping[str, TopicState]: ...

        # -- writing (controller.py) --
        def _check_fresh(self) -> None: ...

        async def _resolve_doubt(self) -> None: ...

        async def _append(self, records: list[MetadataRecord], *,
                          unknown_outcome: type[Exception] = ...) -> None: ...

        async def _commit(self, states: Iterable[TopicState], *, unknown_outcome: type[Exception] = ...) -> None: ...

        def _records_for(self, new: TopicState) -> list[MetadataRecord]: ...

        def _topic_answer(self, state: TopicState) -> TopicAnswer: ...

        def _partition_answer(self, state: PartitionState) -> PartitionAnswer: ...

        # -- elections (controller.py) --
        def _election(self, topic: TopicState, alive: set[int], *, allow_unclean: bool = ...) -> Election: ...

        def _eligible(self) -> frozenset[int]: ...

        def _dynamic(self, key: str) -> str | None: ...

        # -- decommissioned brokers (decommission.py) --
        def _decommissioned(self) -> frozenset[int]: ...

        def _check_new_replicas(self, name: str, p: int, replicas: list[int]) -> None: ...

        # -- lookups (topic_admin.py) --
        def _topic(self, name: str) -> TopicState: ...

        def _partition_state(self, topic: str, partition: int) -> tuple[TopicState, PartitionState]: ...

        def _check_replica_list(self, name: str, p: int, replicas: list[int]) -> None: ...
