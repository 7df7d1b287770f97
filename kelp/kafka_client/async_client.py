"""An asyncio client of a whole cluster: connections by broker, metadata, leader- and coordinator-following.

Why: the asyncio twin of `BlockingClient`, method for method, for clients
that live on the broker's event loop. Today the replica fetcher needs only an
`AsyncConnection` (the controller tells it where leaders are); issue 22's
REST consumers, members of groups that other brokers coordinate, need this:
`coordinator(group)` finds and caches the group's coordinator
(FindCoordinator), `with_coordinator` runs a request against it and, on
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS
(`COORDINATOR_MOVED`) or a coordinator that stopped answering, forgets it,
backs off and finds it again, a bounded number of times — what a Kafka
consumer does. Partition leaders are followed as in `BlockingClient`.

What it must never do: block the event loop, wait without a timeout, retry
forever, or hold group state (members, generations, assignments belong to
whoever uses it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Self, TypeVar

from kafka.protocol.api_message import ApiMessage

from .async_connection import AsyncConnection
from .client_base import ClusterClientBase
from .errors import BrokerUnavailable, KafkaClientError
from .metadata import FIND_COORDINATOR_VERSION, METADATA_VERSION, ClusterMetadata, Node, PartitionInfo
from .retry import RetryPolicy

__all__ = ["AsyncClient"]

T = TypeVar("T")


class AsyncClient(ClusterClientBase[AsyncConnection]):
    """Connections to the cluster found from `bootstrap` ("host:port,host:port")."""

    async def close(self) -> None:
        connections = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(conn.close() for conn in connections))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- requests ------------------------------------------------------------
    def _new_connection(self, host: str, port: int) -> AsyncConnection:
        return AsyncConnection(host, port, client_id=self.client_id, timeout_s=self.timeout_s,
                               security=self.security)

    async def send(self, node_id: int, request: ApiMessage, version: int, *,
                   timeout_s: float | None = None) -> ApiMessage:
        """One request to broker `node_id` of the last metadata (no retry)."""
        node = self._node(node_id)
        # No decoder: the answer is kafka-python's decoded response, an ApiMessage.
        connection = self.connection(node.host, node.port)
        response: ApiMessage = await connection.request(request, version, timeout_s=timeout_s)
        return response

    async def _any_broker(self, request: ApiMessage, version: int, what: str) -> tuple[ApiMessage, str]:
        """The answer of the first broker that answers (known brokers, then the bootstrap servers)."""
        last: BrokerUnavailable | None = None
        for host, port in self._candidates():
            conn = self.connection(host, port)
            try:
                return await conn.request(request, version), conn.address
            except BrokerUnavailable as exc:
                last = exc
        raise self._none_answered(what, last)

    # -- metadata ------------------------------------------------------------
    async def refresh(self, topics: Iterable[str] | None = None, *,
                      auto_create: bool = False) -> dict[str, dict[int, PartitionInfo]]:
        """As `BlockingClient.refresh`."""
        wanted = None if topics is None else list(topics)
        request = ClusterMetadata.metadata_request(wanted, auto_create=auto_create)
        response, _address = await self._any_broker(request, METADATA_VERSION, "a metadata request")
        return self.metadata.apply(response, wanted)

    async def leader(self, topic: str, partition: int) -> PartitionInfo:
        """As `BlockingClient.leader`."""
        info = self.metadata.leader(topic, partition)
        if info is None:
            await self.refresh([topic])
            info = self.metadata.require_leader(topic, partition)
        return info

    # -- group coordinators --------------------------------------------------
    async def coordinator(self, group: str) -> Node:
        """The group's coordinator: the last one found, else asked of any broker (FindCoordinator v3)."""
        node = self.metadata.coordinators.get(group)
        if node is None:
            response, address = await self._any_broker(ClusterMetadata.find_coordinator_request(group),
                                                        FIND_COORDINATOR_VERSION, f"FindCoordinator for {group!r}")
            node = self.metadata.apply_coordinator(group, response, address=address)
        return node

    async def with_coordinator(self, group: str, what: str,
                               attempt: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """`attempt(connection to the group's coordinator)`, following the coordinator when it moves.

        `attempt` raises `ErrorResponse` for an error code in the answer; a `COORDINATOR_MOVED` code (or the
        coordinator not answering) forgets the coordinator, backs off and finds it again, within
        `coordinator_retry`. Other codes (REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID...) are the caller's."""

        async def on_coordinator() -> T:
            node = await self.coordinator(group)
            return await attempt(self.connection(node.host, node.port))

        async def forget(_error: KafkaClientError) -> None:
            self.metadata.forget_coordinator(group)

        return await self.retrying(what, on_coordinator, recover=forget, policy=self.coordinator_retry)

    # -- retries -------------------------------------------------------------
    async def retrying(self, what: str, attempt: Callable[[], Awaitable[T]], *,
                       recover: Callable[[KafkaClientError], Awaitable[None]] | None = None,
                       policy: RetryPolicy | None = None) -> T:
        """As `BlockingClient.retrying`: `await attempt()`, again after a retriable failure, bounded."""
        attempts = (policy or self.retry).start(what)
        while True:
            try:
                return await attempt()
            except KafkaClientError as exc:
                delay = attempts.failed(exc)
                error = exc
            await asyncio.sleep(delay)
            try:
                await (recover or self._refresh_known)(error)
            except KafkaClientError as exc:
                attempts.recovered(exc)
            else:
                attempts.recovered()

    async def _refresh_known(self, _error: KafkaClientError) -> None:
        await self.refresh(list(self.metadata.partitions) or None)
