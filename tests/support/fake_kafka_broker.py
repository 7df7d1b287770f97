"""A scripted Kafka-protocol server on 127.0.0.1 for testing clients: each request gets what a handler says.

Why: the client core's promises (timeouts, correlation checks, frame bounds,
reconnects, leader- and coordinator-following, bounded retries) are about how
it reacts to what a broker sends; a real broker never sends a wrong
correlation id or a 2 GiB frame, nor moves leadership on cue. The server is a
real asyncio listener, so the bytes cross a real socket. Requests are decoded
with kafka-python's classes; a handler returns a response object (encoded at
the request's version with its correlation id), raw bytes (sent as they are),
`Truncated(bytes)` (sent, then the connection is closed), `SILENT` (no
answer) or `DROP` (the connection is closed). With `ssl_context` it speaks
TLS; SaslHandshake and SaslAuthenticate decode like any other request.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import FetchRequest, HeartbeatRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

__all__ = ["FakeBroker", "Received", "Truncated", "SILENT", "DROP", "decode_request", "encode_response",
           "metadata_response", "coordinator_response"]

REQUESTS: dict[int, type[ApiMessage]] = {cls.API_KEY: cls for cls in (
    ProduceRequest, FetchRequest, ListOffsetsRequest, MetadataRequest, FindCoordinatorRequest, HeartbeatRequest,
    OffsetForLeaderEpochRequest, ApiVersionsRequest, SaslHandshakeRequest, SaslAuthenticateRequest)}
SILENT = object()
DROP = object()
_HEADER = struct.Struct(">hhi")


@dataclass(frozen=True)
class Truncated:
    data: bytes


@dataclass
class Received:
    api_key: int
    version: int
    correlation_id: int
    request: ApiMessage


Handler = Callable[[Received], object]


def decode_request(frame: bytes) -> Received:
    """A request's frame (size prefix removed) as the broker reads it."""
    api_key, version, correlation_id = _HEADER.unpack_from(frame, 0)
    return Received(api_key, version, correlation_id, REQUESTS[api_key].decode(frame, version=version, header=True))


def encode_response(response: ApiMessage, version: int, correlation_id: int) -> bytes:
    response._header = None  # a scripted answer is encoded again for each request it answers
    response.API_VERSION = version
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


def metadata_response(brokers: dict[int, int], leaders: dict[tuple[str, int], tuple[int, int]]) -> MetadataResponse:
    """Brokers (id -> port on 127.0.0.1) and (topic, partition) -> (leader, leader epoch)."""
    B = MetadataResponse.MetadataResponseBroker
    T = MetadataResponse.MetadataResponseTopic
    P = T.MetadataResponsePartition
    topics: dict[str, list[MetadataResponse.MetadataResponseTopic.MetadataResponsePartition]] = {}
    for (topic, partition), (leader, epoch) in sorted(leaders.items()):
        topics.setdefault(topic, []).append(P(error_code=0, partition_index=partition, leader_id=leader,
                                              leader_epoch=epoch, replica_nodes=[leader], isr_nodes=[leader],
                                              offline_replicas=[]))
    return MetadataResponse(
        throttle_time_ms=0, cluster_id=None, controller_id=0,
        brokers=[B(node_id=b, host="127.0.0.1", port=port, rack=None) for b, port in sorted(brokers.items())],
        topics=[T(error_code=0, name=name, is_internal=False, partitions=parts) for name, parts in topics.items()])


def coordinator_response(node_id: int, port: int, error_code: int = 0) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=error_code, error_message=None, node_id=node_id,
                                   host="127.0.0.1", port=port)


@dataclass
class FakeBroker:
    """`await start()`, point a client at `address`, `await stop()`; `received` lists every request seen."""

    handler: Handler
    received: list[Received] = field(default_factory=list)
    connections: int = 0
    ssl_context: ssl.SSLContext | None = None
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def apis(self, api_key: int) -> list[Received]:
        return [r for r in self.received if r.api_key == api_key]

    async def start(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl_context)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            while True:
                try:
                    (size,) = struct.unpack(">i", await reader.readexactly(4))
                    frame = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                seen = decode_request(frame)
                self.received.append(seen)
                answer = self.handler(seen)
                if answer is DROP:
                    return
                if answer is SILENT:
                    continue
                if isinstance(answer, Truncated):
                    writer.write(answer.data)
                    await writer.drain()
                    return
                if isinstance(answer, ApiMessage):
                    answer = encode_response(answer, seen.version, seen.correlation_id)
                assert isinstance(answer, bytes), f"a handler answered {answer!r}"
                writer.write(answer)
                await writer.drain()
        finally:
            self._writers.discard(writer)
            writer.close()
