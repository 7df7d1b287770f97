"""A small blocking Kafka client for the `kelp` data source: metadata, offsets, fetch and produce by partition.

Why not a consumer/producer library: a Spark task reads one exact offset
range of one partition and must hand back columns, and the driver needs
earliest/latest/by-timestamp offsets of many partitions at once; a consumer
library adds groups, prefetch threads and one object per record. This speaks
the protocol with kafka-python's schema classes (the codecs are not written
again) over plain sockets with timeouts, one connection per broker, and
follows leadership: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
FENCED/UNKNOWN_LEADER_EPOCH or a dropped connection refresh the metadata and
retry, a bounded number of times.

Versions: Metadata v12, ListOffsets v5, Fetch v11, Produce v8 — served by Kelp
and by Apache Kafka 3.x and 4.x alike.

What it must never do: block without a timeout, or retry forever.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from typing import Any, Iterable

from kelp.errors import ErrorCode

__all__ = ["KafkaWire", "WireError", "PartitionInfo", "FetchResult", "OffsetOutOfRange"]

METADATA_V, LIST_OFFSETS_V, FETCH_V, PRODUCE_V = 12, 5, 11, 8
EARLIEST, LATEST = -2, -1

# Errors after which the metadata is refreshed and the request retried.
RETRIABLE = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE,
})
_SIZE = struct.Struct(">i")


class WireError(RuntimeError):
    """A request failed for good (after retries), with the broker's error code when there is one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class OffsetOutOfRange(WireError):
    """The fetch offset is outside [log start, log end): retention (or truncation) removed it."""

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        super().__init__(f"offset {offset} of {topic}-{partition} is out of range", ErrorCode.OFFSET_OUT_OF_RANGE)
        self.topic, self.partition, self.offset = topic, partition, offset


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchResult:
    records: bytes
    high_watermark: int
    log_start_offset: int


def _error_name(code: int) -> str:
    try:
        from kafka.errors import for_code

        return for_code(code).__name__
    except Exception:  # noqa: BLE001 - a name is only decoration for the message
        return f"error {code}"


class _Connection:
    def __init__(self, host: str, port: int, timeout: float, client_id: str) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.correlation = 0

    def request(self, request: Any, version: int) -> Any:
        self.correlation += 1
        request.with_header(correlation_id=self.correlation, client_id=self.client_id)
        self.sock.sendall(bytes(request.encode(version=version, header=True, framed=True)))
        size = _SIZE.unpack(self._exact(4))[0]
        frame = self._exact(size)
        response = _response_class(request).decode(frame, version=version, header=True)
        if response.header.correlation_id != self.correlation:
            raise WireError(f"response correlation id {response.header.correlation_id} does not match "
                            f"request {self.correlation}")
        return response

    def _exact(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            read = self.sock.recv_into(view[got:], n - got)
            if not read:
                raise ConnectionError(f"the broker closed the connection after {got} of {n} bytes")
            got += read
        return bytes(buf)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class KafkaWire:
    """Connections to a cluster found from `bootstrap` ("host:port,host:port")."""

    def __init__(self, bootstrap: str, *, timeout: float = 30.0, client_id: str = "kelp-spark",
                 retries: int = 10, retry_backoff: float = 0.2) -> None:
        self.bootstrap = [_split(b) for b in bootstrap.split(",") if b.strip()]
        if not self.bootstrap:
            raise ValueError("kafka.bootstrap.servers names no broker")
        self.timeout = timeout
        self.client_id = client_id
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.brokers: dict[int, tuple[str, int]] = {}
        self.partitions: dict[str, dict[int, PartitionInfo]] = {}
        self._connections: dict[Any, _Connection] = {}

    # -- connections -----------------------------------------------------
    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    def __enter__(self) -> "KafkaWire":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, key: Any, address: tuple[str, int], request: Any, version: int) -> Any:
        conn = self._connections.get(key)
        if conn is None:
            conn = self._connections[key] = _Connection(address[0], address[1], self.timeout, self.client_id)
        try:
            return conn.request(request, version)
        except (OSError, ConnectionError, ValueError, struct.error):
            conn.close()
            self._connections.pop(key, None)
            raise

    def _to_broker(self, broker_id: int, request: Any, version: int) -> Any:
        address = self.brokers.get(broker_id)
        if address is None:
            raise ConnectionError(f"broker {broker_id} is not in the cluster's metadata")
        return self._send(broker_id, address, request, version)

    # -- metadata --------------------------------------------------------
    def refresh(self, topics: Iterable[str] | None = None, *,
                auto_create: bool = False) -> dict[str, dict[int, PartitionInfo]]:
        """Load brokers and the partitions of `topics` (None: every topic); returns the topics seen.

        `auto_create` asks the broker to create missing topics, as a producer's metadata request does
        (the broker decides, with `auto.create.topics.enable`)."""
        from kafka.protocol.metadata import MetadataRequest

        wanted = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        request = MetadataRequest(topics=wanted, allow_auto_topic_creation=auto_create and topics is not None,
                                  include_topic_authorized_operations=False)
        last: Exception | None = None
        candidates = [(b, a) for b, a in self.brokers.items()] + [(("bootstrap", a), a) for a in self.bootstrap]
        for key, address in candidates:
            try:
                response = self._send(key, address, request, METADATA_V)
                break
            except (OSError, ConnectionError, ValueError, struct.error) as exc:
                last = exc
        else:
            raise WireError(f"no broker of {','.join(f'{h}:{p}' for h, p in self.bootstrap)} answered "
                            f"a metadata request: {last}")
        self.brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        seen: dict[str, dict[int, PartitionInfo]] = {}
        for t in response.topics:
            if t.error_code != ErrorCode.NONE or (topics is None and (t.is_internal or t.name.startswith("__"))):
                continue
            seen[t.name] = {p.partition_index: PartitionInfo(t.name, p.partition_index, p.leader_id,
                                                             p.leader_epoch) for p in t.partitions}
        if topics is None:
            self.partitions = dict(seen)
        else:
            for name in topics:
                if name in seen:
                    self.partitions[name] = seen[name]
                else:
                    self.partitions.pop(name, None)
        return seen

    def topic_names(self) -> list[str]:
        return sorted(self.refresh(None))

    def _leader(self, topic: str, partition: int) -> PartitionInfo:
        info = self.partitions.get(topic, {}).get(partition)
        if info is None or info.leader < 0:
            self.refresh([topic])
            info = self.partitions.get(topic, {}).get(partition)
        if info is None:
            raise WireError(f"partition {topic}-{partition} does not exist", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if info.leader < 0:
            raise WireError(f"partition {topic}-{partition} has no leader", ErrorCode.LEADER_NOT_AVAILABLE)
        return info

    def _retrying(self, what: str, attempt_fn: Any) -> Any:
        """Run `attempt_fn()`; on a retriable error or a lost connection refresh and try again (bounded)."""
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                return attempt_fn()
            except WireError as exc:
                if exc.code not in RETRIABLE:
                    raise
                last = exc
            except (OSError, ConnectionError, struct.error) as exc:
                last = exc
            time.sleep(min(self.retry_backoff * (attempt + 1), 2.0))
            try:
                self.refresh(list(self.partitions) or None)
            except WireError as exc:
                last = exc
        raise WireError(f"{what} failed after {self.retries + 1} attempts: {last}",
                        getattr(last, "code", None))

    # -- offsets ---------------------------------------------------------
    def list_offsets(self, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], tuple[int, int]]:
        """(offset, timestamp) per (topic, partition) for the spec in `wanted`: -2 earliest, -1 latest,
        else the first offset whose timestamp is >= the value (offset -1 when there is none)."""
        from kafka.protocol.consumer import ListOffsetsRequest

        out: dict[tuple[str, int], tuple[int, int]] = {}
        pending = dict(wanted)

        def attempt() -> None:
            by_leader: dict[int, dict[str, list[tuple[int, int, int]]]] = {}
            for (topic, partition), spec in pending.items():
                info = self._leader(topic, partition)
                by_leader.setdefault(info.leader, {}).setdefault(topic, []).append((partition, info.leader_epoch, spec))
            for leader, topics in by_leader.items():
                T = ListOffsetsRequest.ListOffsetsTopic
                request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
                    T(name=topic, partitions=[T.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1,
                                                                      timestamp=spec) for p, _epoch, spec in parts])
                    for topic, parts in topics.items()])
                response = self._to_broker(leader, request, LIST_OFFSETS_V)
                retry: WireError | None = None
                for t in response.topics:
                    for p in t.partitions:
                        if p.error_code == ErrorCode.NONE:
                            out[(t.name, p.partition_index)] = (p.offset, p.timestamp)
                            pending.pop((t.name, p.partition_index), None)
                        else:
                            retry = WireError(f"ListOffsets {t.name}-{p.partition_index}: "
                                              f"{_error_name(p.error_code)}", p.error_code)
                if retry is not None:
                    raise retry

        self._retrying("listing offsets", attempt)
        return out

    # -- fetch -----------------------------------------------------------
    def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int = 8 << 20,
              max_wait_ms: int = 500) -> FetchResult:
        """Records from `offset` of one partition's leader (whole batches; may start before `offset`)."""
        from kafka.protocol.consumer import FetchRequest

        def attempt() -> FetchResult:
            info = self._leader(topic, partition)
            P = FetchRequest.FetchTopic.FetchPartition
            request = FetchRequest(
                replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
                session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                topics=[FetchRequest.FetchTopic(topic=topic, partitions=[P(
                    partition=partition, current_leader_epoch=info.leader_epoch, fetch_offset=offset,
                    last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=max_bytes)])])
            response = self._to_broker(info.leader, request, FETCH_V)
            if response.error_code != ErrorCode.NONE:
                raise WireError(f"Fetch {topic}-{partition}: {_error_name(response.error_code)}", response.error_code)
            p = response.responses[0].partitions[0]
            if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                raise OffsetOutOfRange(topic, partition, offset)
            if p.error_code != ErrorCode.NONE:
                raise WireError(f"Fetch {topic}-{partition} at {offset}: {_error_name(p.error_code)}", p.error_code)
            return FetchResult(bytes(p.records or b""), p.high_watermark, p.log_start_offset)

        return self._retrying(f"fetching {topic}-{partition} at {offset}", attempt)

    # -- produce ---------------------------------------------------------
    def produce(self, topic: str, partition: int, batch: bytes, *, acks: int = -1, timeout_ms: int = 30000) -> int:
        """Append one batch to a partition's leader (acks 1 or -1); returns its base offset."""
        from kafka.protocol.producer import ProduceRequest

        def attempt() -> int:
            info = self._leader(topic, partition)
            T = ProduceRequest.TopicProduceData
            request = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
                T(name=topic, partition_data=[T.PartitionProduceData(index=partition, records=batch)])])
            response = self._to_broker(info.leader, request, PRODUCE_V)
            p = response.responses[0].partition_responses[0]
            if p.error_code != ErrorCode.NONE:
                raise WireError(f"Produce {topic}-{partition}: {_error_name(p.error_code)}"
                                + (f" ({p.error_message})" if getattr(p, "error_message", None) else ""), p.error_code)
            return p.base_offset

        return self._retrying(f"producing to {topic}-{partition}", attempt)


def _response_class(request: Any) -> Any:
    """kafka-python pairs every `XRequest` class with an `XResponse` in the same module."""
    import sys

    cls = type(request)
    base = cls.mro()[1] if getattr(cls, "_class_version", None) is not None else cls
    return getattr(sys.modules[base.__module__], base.__name__[: -len("Request")] + "Response")


def _split(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"kafka.bootstrap.servers entry {address.strip()!r} is not host:port")
    return host.strip("[]"), int(port)
