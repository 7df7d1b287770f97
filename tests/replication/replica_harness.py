"""In-process replicas for deterministic replication tests: no sockets, no sleeps, no clocks.

A `Node` is one broker's `ReplicaManager` over real logs in a temporary
directory; the test plays the controller (`push` a partition state, as the
cluster layer applies one) and the network (`PeerStub` answers a follower's
OffsetForLeaderEpoch and Fetch requests from the leader `Node` through the
leader's real handlers — the follower's fetches in their fetch session, KIP-227 — and
can hold an answer back until the test releases it). The follower's
`ReplicaFetcher` is the real one; its background loop is cancelled before it
ever runs, so the test drives each truncation round and fetch by hand.
"""

from __future__ import annotations

import asyncio
import os
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kafka.protocol.consumer import FetchRequest, OffsetForLeaderEpochRequest

from kelp.broker.cluster.replica_fetcher import ReplicaFetcherManager
from kelp.broker.kafka.handlers.fetch import handle_fetch
from kelp.broker.kafka.handlers.offsets import handle_offset_for_leader_epoch
from kelp.broker.kafka.handlers.registry import RequestContext
from kelp.broker.metadata.image import MetadataDelta
from kelp.broker.metadata.model import PartitionState, TopicState
from kelp.broker.replica.manager import FetchPartition, ReplicaManager
from kelp.broker.replica.results import SegmentSlice
from kelp.broker.storage import LogManager
from kelp.broker.topic_manager import TopicManager
from kelp.config.broker import BrokerConfig
from kelp.config.log_config import LogConfig
from kelp.errors import KelpError
from kelp.kafka_client.fetch_request import FollowerFetch
from kelp.kafka_client.framing import encode_request
from kelp.records.build import build_batch
from kelp.records.record import Record
from tests.support.acls import open_acls

TOPIC = "t"
TOPIC_ID = "0" * 32


def batch(n: int = 1, *, value: bytes = b"v", producer_id: int = -1, producer_epoch: int = -1,
          base_sequence: int = -1, size: int = 0) -> bytes:
    """A RecordBatch of `n` records (idempotent when `producer_id` >= 0)."""
    payload = value + b"." * size
    return build_batch([Record(b"k", payload) for _ in range(n)], producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=base_sequence, now_ms=1_700_000_000_000)


class Node:
    """One broker: a ReplicaManager over its own log directory, fed partition states by the test."""

    def __init__(self, root: Path, broker_id: int, *, settings: dict[str, Any] | None = None,
                 fetching: bool = False) -> None:
        self.broker_id = broker_id
        self.dir = root / f"broker-{broker_id}"
        overrides = {"log.dirs": str(self.dir), "broker.id": broker_id, "num.partitions": 1,
                     **(settings or {})}
        self.config = BrokerConfig.load(env={}, overrides=overrides)
        self.topics = TopicManager(self.config, None)
        self.topics.logs = LogManager([self.dir], LogConfig.from_kafka(self.config.default_topic_config()),
                                      config_for=self.topics.log_config_or_none)
        self.rm = ReplicaManager(self.config, self.topics.logs, self.topics)
        self.fetchers: ReplicaFetcherManager | None = None
        if fetching:
            self.fetchers = ReplicaFetcherManager(replicas=self.rm, broker_id=broker_id,
                                                  endpoint_of=lambda b: None, config=self.config)
            self.rm.fetchers = self.fetchers

    # -- the controller's part ------------------------------------------
    def push(self, *, replicas: tuple[int, ...], leader: int, leader_epoch: int, isr: tuple[int, ...],
             partition_epoch: int = 0, configs: dict[str, str] | None = None) -> None:
        """Apply one partition state (and the topic's configs), as the cluster layer does with the controller's push."""
        state = PartitionState(tuple(replicas), leader, leader_epoch, tuple(isr), partition_epoch)
        topic = TopicState(TOPIC, (state,), topic_id=TOPIC_ID, configs=dict(configs or {}))
        self.topics.apply_delta(MetadataDelta(changed={TOPIC: topic}))
        if self.fetchers is not None:
            for f in self.fetchers._fetchers.values():
                f._task.cancel()  # created, never started: the test drives the fetcher itself

    @property
    def part(self) -> Any:
        return self.rm.get_partition(TOPIC, 0)

    @property
    def log(self) -> Any:
        return self.topics.logs.get(TOPIC, 0)

    def fetcher(self, leader: int) -> Any:
        assert self.fetchers is not None
        return self.fetchers._fetchers[leader]

    def fetch_state(self, leader: int) -> Any:
        return self.fetcher(leader).state.get((TOPIC, 0))

    async def settle(self) -> None:
        """Until no job (producer-state load, truncation) is in flight on the partition."""
        part = self.part
        while part is not None and getattr(part, "busy", None) is not None:
            await asyncio.wait([part.busy], timeout=10)

    async def follower_fetch(self, replica_id: int, offset: int) -> Any:
        """A follower's fetch from this (leader) node: how the leader learns the follower's progress."""
        results = await self.rm.fetch([FetchPartition(TOPIC, 0, offset, 1 << 20)], max_wait_ms=0, min_bytes=0,
                                      max_bytes=1 << 20, replica_id=replica_id)
        return results[0]

    async def drain(self) -> bool:
        """Until the manager's background work (ISR requests, checkpoint writes) is done; False if it is not in 10 s."""
        tasks = list(self.rm._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        return all(t.done() for t in tasks)

    def all_bytes(self) -> bytes:
        lg = self.log
        out, offset = bytearray(), lg.log_start_offset
        while offset < lg.log_end_offset:
            chunk = lg.read(offset, max_bytes=1 << 20)
            if not chunk:
                break
            out += chunk
            from kelp.records.header import iter_headers

            offset = list(iter_headers(chunk))[-1].next_offset
        return bytes(out)

    def close(self) -> None:
        self.rm.close()
        self.topics.logs.close_all()


class PeerStub:
    """Answers a follower's requests from the leader node's ReplicaManager, like the leader's listener would.

    `hold()` makes the next request wait (after its answer was computed, as a slow network would deliver
    an answer late) until `release()`.
    """

    def __init__(self, leader: Node, follower_id: int) -> None:
        self.leader = leader
        self.follower_id = follower_id
        self.requests: list[Any] = []
        self.sessions: list[Any] = []  # the follower's fetches as the leader decoded them (session id, epoch...)
        self._gate: asyncio.Event | None = None  # armed for the next request
        self._held: asyncio.Event | None = None  # the request waiting now
        self.arrived = asyncio.Event()

    def hold(self) -> None:
        self._gate = asyncio.Event()
        self.arrived.clear()

    def release(self) -> None:
        assert self._held is not None, "no request is held"
        self._held.set()

    async def request(self, req: Any, version: int, *, timeout_s: float | None = None,
                      decoder: Any = None) -> Any:
        self.requests.append(req)
        if isinstance(req, OffsetForLeaderEpochRequest):
            broker = SimpleNamespace(replicas=self.leader.rm, acls=open_acls())
            ctx = RequestContext(broker=broker, api_key=23, api_version=version,
                                 correlation_id=len(self.requests), client_id="replica", peer="stub")
            resp = await handle_offset_for_leader_epoch(ctx, req)
        elif isinstance(req, (FetchRequest, FollowerFetch)):
            resp = await self._fetch(req, version, decoder)
        else:  # pragma: no cover - the fetcher sends nothing else
            raise AssertionError(f"unexpected request {type(req).__name__}")
        gate, self._gate = self._gate, None
        if gate is not None:
            self._held = gate
            self.arrived.set()
            await gate.wait()
        return resp

    async def _fetch(self, req: Any, version: int, decoder: Any) -> Any:
        """The leader's answer; the follower's own request (`FollowerFetch`, with its fetch session) goes through
        the leader's real Fetch handler as its listener would pass it (encoded, decoded), and its answer is
        decoded by the fetcher's decoder. Another request is read sessionless from the leader's manager."""
        if isinstance(req, FollowerFetch) and decoder is not None:
            frame = encode_request(req, version, correlation_id=len(self.requests), client_id="replica")
            decoded = FetchRequest.decode(frame[4:], version=version, header=True)
            decoded.max_wait_ms = 0  # the test drives each fetch: never a long poll
            broker = SimpleNamespace(replicas=self.leader.rm, topics=self.leader.topics, acls=open_acls())
            ctx = RequestContext(broker=broker, api_key=1, api_version=version,
                                 correlation_id=len(self.requests), client_id="replica", peer="stub")
            raw = await handle_fetch(ctx, decoded)
            self.sessions.append(decoded)
            return decoder(struct.pack(">i", len(self.requests)) + b"".join(_bytes_of(b) for b in raw.buffers))
        named = ([(topic, p) for topic, ps in req.topics for p in ps] if isinstance(req, FollowerFetch)
                 else [(t.topic, p) for t in req.topics for p in t.partitions])
        wanted = [FetchPartition(topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                                 log_start_offset=p.log_start_offset, current_leader_epoch=p.current_leader_epoch)
                  for topic, p in named]
        results = await self.leader.rm.fetch(wanted, max_wait_ms=0, min_bytes=0, max_bytes=req.max_bytes,
                                             replica_id=req.replica_id)
        topics: dict[str, list] = {}
        for r in results:
            err: KelpError | None = r.error
            records = r.records.read() if hasattr(r.records, "read") else bytes(r.records)
            topics.setdefault(r.topic, []).append(SimpleNamespace(
                partition_index=r.partition, error_code=err.code if err is not None else 0,
                high_watermark=r.high_watermark, log_start_offset=r.log_start_offset, records=records))
        return SimpleNamespace(error_code=0, session_id=0,
                               responses=[SimpleNamespace(topic=t, partitions=ps) for t, ps in topics.items()])


def _bytes_of(buffer: Any) -> bytes:
    """A response buffer's bytes (a segment's range, sent with sendfile by a listener, read here)."""
    if isinstance(buffer, SegmentSlice):
        try:
            return os.pread(buffer.file.fileno(), buffer.size, buffer.position)
        finally:
            buffer.close()
    return bytes(buffer)


async def until(condition: Any, *, rounds: int = 200) -> bool:
    """Yield to the event loop until `condition()` holds (bounded: never a timed sleep)."""
    for _ in range(rounds):
        if condition():
            return True
        await asyncio.sleep(0)
    return bool(condition())
