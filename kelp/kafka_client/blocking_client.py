"""A blocking client of a whole cluster: connections by broker, metadata, leader-following, bounded retries.

Why: the Spark source (`kelp.spark.wire.KafkaWire`, which adds its requests
on top) reaches the leader of each partition it reads or writes, found from
the bootstrap servers, and rides out a leader change: a request that meets
NOT_LEADER_OR_FOLLOWER (or another `LEADER_MOVED` code) or a broker that
stopped answering is retried after a back-off and a metadata refresh, a
bounded number of times (`RetryPolicy`). It mirrors `AsyncClient` method
for method; the rules both follow are `retry.py`'s and `metadata.py`'s.

What it must never do: block without a timeout (every request has one), retry
forever, or route a request to a leader it was not told of.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Self, TypeVar

from kafka.protocol.api_message import ApiMessage

from .blocking_connection import BlockingConnection
from .client_base import ClusterClientBase
from .errors import BrokerUnavailable, KafkaClientError
from .metadata import METADATA_VERSION, ClusterMetadata, PartitionInfo
from .retry import RetryPolicy

__all__ = ["BlockingClient"]

T = TypeVar("T")


class BlockingClient(ClusterClientBase[BlockingConnection]):
    """Connections to the cluster found from `bootstrap` ("host:port,host:port")."""

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ------------------------------------------------------------
    def _new_connection(self, host: str, port: int) -> BlockingConnection:
        return BlockingConnection(host, port, client_id=self.client_id, timeout_s=self.timeout_s,
                                  security=self.security)

    def send(self, node_id: int, request: ApiMessage, version: int, *,
             timeout_s: float | None = None) -> ApiMessage:
        """One request to broker `node_id` of the last metadata (no retry)."""
        node = self._node(node_id)
        return self.connection(node.host, node.port).request(request, version, timeout_s=timeout_s)

    # -- metadata ------------------------------------------------------------
    def refresh(self, topics: Iterable[str] | None = None, *,
                auto_create: bool = False) -> dict[str, dict[int, PartitionInfo]]:
        """Ask the first broker that answers (known brokers, then the bootstrap servers) for the metadata
        of `topics` (None: every topic); returns the topics it holds (`ClusterMetadata.apply`)."""
        wanted = None if topics is None else list(topics)
        request = ClusterMetadata.metadata_request(wanted, auto_create=auto_create)
        last: BrokerUnavailable | None = None
        for host, port in self._candidates():
            try:
                response = self.connection(host, port).request(request, METADATA_VERSION)
            except BrokerUnavailable as exc:
                last = exc
                continue
            return self.metadata.apply(response, wanted)
        raise self._none_answered("a metadata request", last)

    def leader(self, topic: str, partition: int) -> PartitionInfo:
        """The partition's leader, refreshing the topic's metadata first when it is not known."""
        info = self.metadata.leader(topic, partition)
        if info is None:
            self.refresh([topic])
            info = self.metadata.require_leader(topic, partition)
        return info

    # -- retries -------------------------------------------------------------
    def retrying(self, what: str, attempt: Callable[[], T], *,
                 recover: Callable[[KafkaClientError], None] | None = None,
                 policy: RetryPolicy | None = None) -> T:
        """`attempt()`, again after a retriable failure (see `RetryPolicy`), bounded.

        Between attempts: back off, then `recover(error)` — by default refresh the metadata of the topics
        known (which is what follows a moved leader)."""
        attempts = (policy or self.retry).start(what)
        while True:
            try:
                return attempt()
            except KafkaClientError as exc:
                delay = attempts.failed(exc)
                error = exc
            time.sleep(delay)
            try:
                (recover or self._refresh_known)(error)
            except KafkaClientError as exc:
                attempts.recovered(exc)
            else:
                attempts.recovered()

    def _refresh_known(self, _error: KafkaClientError) -> None:
        self.refresh(list(self.metadata.partitions) or None)
