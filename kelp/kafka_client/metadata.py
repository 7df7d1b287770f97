"""What a client knows of a cluster: its brokers, each partition's leader, each group's coordinator.

Why: to follow leadership a client keeps the last Metadata answer — brokers
by id, partition leaders with their epochs — and asks again when a request
meets a moved leader; to follow a group's coordinator it keeps the last
FindCoordinator answer per group and forgets it when the coordinator moves.
Building those two requests and reading their answers is the same for the
blocking and the asyncio client, so it is here, free of I/O. Versions:
Metadata v12 and FindCoordinator v3 (one key), served by Kelp and by Apache
Kafka 3.x and 4.x alike.

A listing of every topic (`topics=None`) leaves internal topics out
(`__consumer_offsets`, names starting with `__`), as Kafka's clients do by
default. What this module must never do: I/O, or guess a leader it was not
told (a partition without a leader is reported, not routed).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from kelp.errors import ErrorCode

from .errors import ErrorResponse, error_name

__all__ = ["METADATA_VERSION", "FIND_COORDINATOR_VERSION", "PartitionInfo", "Node", "ClusterMetadata",
           "parse_bootstrap"]

METADATA_VERSION = 12
FIND_COORDINATOR_VERSION = 3


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int  # -1: none elected
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """"host:port,host:port" as (host, port) pairs ("[::1]:9092" for IPv6); at least one."""
    out: list[tuple[str, int]] = []
    for entry in servers.split(","):
        if not entry.strip():
            continue
        host, sep, port = entry.strip().rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise ValueError(f"kafka.bootstrap.servers entry {entry.strip()!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("kafka.bootstrap.servers names no broker")
    return out


class ClusterMetadata:
    """The last answers: `brokers` (id -> (host, port)), `partitions` (topic -> partition -> info),
    `coordinators` (group -> node)."""

    def __init__(self) -> None:
        self.brokers: dict[int, tuple[str, int]] = {}
        self.partitions: dict[str, dict[int, PartitionInfo]] = {}
        self.coordinators: dict[str, Node] = {}

    # -- partitions and leaders ----------------------------------------------
    @staticmethod
    def metadata_request(topics: Iterable[str] | None, *, auto_create: bool = False) -> MetadataRequest:
        """Metadata for `topics` (None: every topic); `auto_create` lets the broker create missing ones (as a
        producer's request does; the broker decides, with `auto.create.topics.enable`)."""
        wanted = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        return MetadataRequest(topics=wanted, allow_auto_topic_creation=auto_create and topics is not None,
                               include_topic_authorized_operations=False)

    def apply(self, response: ApiMessage,
              topics: Iterable[str] | None) -> dict[str, dict[int, PartitionInfo]]:
        """Take in the answer to `metadata_request(topics)`; returns the topics it holds (without errors).

        Brokers are replaced; with `topics` None every topic is, else only those asked (a topic asked for but
        not answered without error is forgotten)."""
        self.brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        seen: dict[str, dict[int, PartitionInfo]] = {}
        for t in response.topics:
            if t.error_code != ErrorCode.NONE or (topics is None and (t.is_internal or t.name.startswith("__"))):
                continue
            seen[t.name] = {p.partition_index: PartitionInfo(t.name, p.partition_index, p.leader_id, p.leader_epoch)
                            for p in t.partitions}
        if topics is None:
            self.partitions = dict(seen)
        else:
            for name in topics:
                if name in seen:
                    self.partitions[name] = seen[name]
                else:
                    self.partitions.pop(name, None)
        return seen

    def leader(self, topic: str, partition: int) -> PartitionInfo | None:
        """The partition's info when it is known and has a leader; None means: refresh first."""
        info = self.partitions.get(topic, {}).get(partition)
        return info if info is not None and info.leader >= 0 else None

    def require_leader(self, topic: str, partition: int) -> PartitionInfo:
        """As `leader`, after a refresh: a missing partition or leader is an error (retriable: it may appear)."""
        info = self.partitions.get(topic, {}).get(partition)
        if info is None:
            raise ErrorResponse(f"partition {topic}-{partition} does not exist", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if info.leader < 0:
            raise ErrorResponse(f"partition {topic}-{partition} has no leader", ErrorCode.LEADER_NOT_AVAILABLE)
        return info

    def broker(self, node_id: int) -> Node | None:
        address = self.brokers.get(node_id)
        return None if address is None else Node(node_id, *address)

    # -- group coordinators --------------------------------------------------
    @staticmethod
    def find_coordinator_request(group: str) -> FindCoordinatorRequest:
        return FindCoordinatorRequest(key=group, key_type=0)

    def apply_coordinator(self, group: str, response: ApiMessage, *, address: str) -> Node:
        """Take in the answer to `find_coordinator_request(group)` (asked of the broker at `address`)."""
        if response.error_code != ErrorCode.NONE:
            self.coordinators.pop(group, None)
            detail = f": {response.error_message}" if response.error_message else ""
            raise ErrorResponse(f"broker at {address} found no coordinator for group {group!r}: "
                                f"{error_name(response.error_code)}{detail}", response.error_code, address=address)
        node = self.coordinators[group] = Node(response.node_id, response.host, response.port)
        return node

    def forget_coordinator(self, group: str) -> None:
        self.coordinators.pop(group, None)
