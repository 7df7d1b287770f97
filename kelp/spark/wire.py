"""The `kelp` data source's requests: offsets, fetch and produce by partition, on the blocking client core.

Why these and not a consumer/producer library: a Spark task reads one exact
offset range of one partition and must hand back columns, and the driver
needs earliest/latest/by-timestamp offsets of many partitions at once; a
consumer library adds groups, prefetch threads and one object per record
(`kelp.kafka_client` says what was checked). Connections, timeouts, metadata
and leader-following are `kelp.kafka_client.BlockingClient`'s: a request that
meets NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
FENCED/UNKNOWN_LEADER_EPOCH (`LEADER_MOVED`) or a broker that stopped
answering is retried after a metadata refresh, a bounded number of times.
Fetched records stay the leader's bytes for `kelp.spark.codec` to decode.

Versions: Metadata v12, ListOffsets v5, Fetch v11, Produce v8 — served by Kelp
and by Apache Kafka 3.x and 4.x alike. `read_committed` (the query's
`kafka.isolation.level`) sends isolation level 1 on ListOffsets ("latest" is
the last stable offset) and Fetch (records up to the LSO, with the aborted
transactions of the range).

What it must never do: block without a timeout, or retry forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.producer import ProduceRequest

from kelp.errors import ErrorCode
from kelp.kafka_client import (
    BlockingClient,
    ErrorResponse,
    KafkaClientError,
    PartitionInfo,
    RetryPolicy,
    connection_security,
)
from kelp.kafka_client.errors import error_name

from .options import OptionError

__all__ = ["KafkaWire", "WireError", "PartitionInfo", "FetchResult", "OffsetOutOfRange"]

LIST_OFFSETS_V, FETCH_V, PRODUCE_V = 5, 11, 8
EARLIEST, LATEST = -2, -1

# Every failure of this client (after its retries) is one: the source's callers catch this name.
WireError = KafkaClientError


class OffsetOutOfRange(ErrorResponse):
    """The fetch offset is outside [log start, log end): retention (or truncation) removed it."""

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        super().__init__(f"offset {offset} of {topic}-{partition} is out of range", ErrorCode.OFFSET_OUT_OF_RANGE)
        self.topic, self.partition, self.offset = topic, partition, offset


@dataclass(frozen=True, slots=True)
class FetchResult:
    records: bytes
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int = -1
    aborted: tuple[tuple[int, int], ...] = ()  # (producer id, first offset): read_committed fetches only


class KafkaWire(BlockingClient):
    """Connections to a cluster found from `bootstrap` ("host:port,host:port"); `retries` after the first
    attempt, backing off `retry_backoff` × the attempt number (at most 2 s) before each. `properties` are the
    query's Kafka client settings (the `kafka.*` options without the prefix): their security options make
    every connection TLS and/or SASL (`kelp.kafka_client.security`)."""

    def __init__(self, bootstrap: str, *, timeout: float = 30.0, client_id: str = "kelp-spark",
                 retries: int = 10, retry_backoff: float = 0.2, properties: Mapping[str, str] | None = None,
                 read_committed: bool = False) -> None:
        try:
            security = connection_security(properties or {}, prefix="kafka.")
        except ValueError as exc:
            raise OptionError(str(exc)) from None
        super().__init__(bootstrap, client_id=client_id, timeout_s=timeout,
                         retry=RetryPolicy(retries=retries, backoff_s=retry_backoff), security=security)
        self.isolation_level = 1 if read_committed else 0

    def topic_names(self) -> list[str]:
        return sorted(self.refresh(None))

    # -- offsets ---------------------------------------------------------
    def list_offsets(self, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], tuple[int, int]]:
        """(offset, timestamp) per (topic, partition) for the spec in `wanted`: -2 earliest, -1 latest (the
        last stable offset reading read_committed), else the first offset whose timestamp is >= the value
        (offset -1 when there is none)."""
        out: dict[tuple[str, int], tuple[int, int]] = {}
        pending = dict(wanted)

        def attempt() -> None:
            by_leader: dict[int, dict[str, list[tuple[int, int]]]] = {}
            for (topic, partition), spec in pending.items():
                info = self.leader(topic, partition)
                by_leader.setdefault(info.leader, {}).setdefault(topic, []).append((partition, spec))
            for leader, topics in by_leader.items():
                T = ListOffsetsRequest.ListOffsetsTopic
                request = ListOffsetsRequest(replica_id=-1, isolation_level=self.isolation_level, topics=[
                    T(name=topic, partitions=[T.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1,
                                                                      timestamp=spec) for p, spec in parts])
                    for topic, parts in topics.items()])
                response = self.send(leader, request, LIST_OFFSETS_V)
                retry: ErrorResponse | None = None
                for t in response.topics:
                    for p in t.partitions:
                        if p.error_code == ErrorCode.NONE:
                            out[(t.name, p.partition_index)] = (p.offset, p.timestamp)
                            pending.pop((t.name, p.partition_index), None)
                        else:
                            retry = ErrorResponse(f"ListOffsets {t.name}-{p.partition_index}: "
                                                  f"{error_name(p.error_code)}", p.error_code)
                if retry is not None:
                    raise retry

        self.retrying("listing offsets", attempt)
        return out

    # -- fetch -----------------------------------------------------------
    def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int = 8 << 20,
              max_wait_ms: int = 500) -> FetchResult:
        """Records from `offset` of one partition's leader (whole batches; may start before `offset`)."""

        def attempt() -> FetchResult:
            info = self.leader(topic, partition)
            P = FetchRequest.FetchTopic.FetchPartition
            request = FetchRequest(
                replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes,
                isolation_level=self.isolation_level,
                session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                topics=[FetchRequest.FetchTopic(topic=topic, partitions=[P(
                    partition=partition, current_leader_epoch=info.leader_epoch, fetch_offset=offset,
                    last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=max_bytes)])])
            response = self.send(info.leader, request, FETCH_V)
            if response.error_code != ErrorCode.NONE:
                raise ErrorResponse(f"Fetch {topic}-{partition}: {error_name(response.error_code)}",
                                    response.error_code)
            p = response.responses[0].partitions[0]
            if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                raise OffsetOutOfRange(topic, partition, offset)
            if p.error_code != ErrorCode.NONE:
                raise ErrorResponse(f"Fetch {topic}-{partition} at {offset}: {error_name(p.error_code)}",
                                    p.error_code)
            aborted = tuple((a.producer_id, a.first_offset) for a in p.aborted_transactions or [])
            return FetchResult(bytes(p.records or b""), p.high_watermark, p.log_start_offset,
                               p.last_stable_offset, aborted)

        return self.retrying(f"fetching {topic}-{partition} at {offset}", attempt)

    # -- produce ---------------------------------------------------------
    def produce(self, topic: str, partition: int, batch: bytes, *, acks: int = -1, timeout_ms: int = 30000) -> int:
        """Append one batch to a partition's leader (acks 1 or -1); returns its base offset."""

        def attempt() -> int:
            info = self.leader(topic, partition)
            T = ProduceRequest.TopicProduceData
            request = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
                T(name=topic, partition_data=[T.PartitionProduceData(index=partition, records=batch)])])
            response = self.send(info.leader, request, PRODUCE_V)
            p = response.responses[0].partition_responses[0]
            if p.error_code != ErrorCode.NONE:
                raise ErrorResponse(f"Produce {topic}-{partition}: {error_name(p.error_code)}"
                                    + (f" ({p.error_message})" if getattr(p, "error_message", None) else ""),
                                    p.error_code)
            base_offset: int = p.base_offset
            return base_offset

        return self.retrying(f"producing to {topic}-{partition}", attempt)
