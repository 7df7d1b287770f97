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
from .errors import BrokerUnavailable, KafkaClientError
from .metadata import METADATA_VERSION, ClusterMetadata, PartitionInfo, parse_bootstrap
from .retry import RetryPolicy
from .security import PLAINTEXT, ConnectionSecurity

__all__ = ["BlockingClient"]

T = TypeVar("T")


class BlockingClient:
    """Connections to the cluster found from `bootstrap` ("host:port,host:port")."""

    def __init__(self, bootstrap: str, *, client_id: str, timeout_s: float = 30.0,
                 retry: RetryPolicy | None = None, security: ConnectionSecurity = PLAINTEXT) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.security = security
        self.metadata = ClusterMetadata()
        self._connections: dict[tuple[str, int], BlockingConnection] = {}

    @property
    def brokers(self) -> dict[int, tuple[str, int]]:
        return self.metadata.brokers

    @property
    def partitions(self) -> dict[str, dict[int, PartitionInfo]]:
        return self.metadata.partitions

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ------------------------------------------------------------
    def connection(self, host: str, port: int) -> BlockingConnection:
        conn = self._connections.get((host, port))
        if conn is None:
            conn = self._connections[(host, port)] = BlockingConnection(
                host, port, client_id=self.client_id, timeout_s=self.timeout_s, security=self.security)
        return conn

    def send(self, node_id: int, request: ApiMessage, version: int, *,
             timeout_s: float | None = None) -> ApiMessage:
        """One request to broker `node_id` of the last metadata (no retry)."""
        node = self.metadata.broker(node_id)
        if node is None:
            raise BrokerUnavailable(f"broker {node_id} is not in the cluster's metadata (known: "
                                    f"{sorted(self.metadata.brokers)})")
        return self.connection(node.host, node.port).request(request, version, timeout_s=timeout_s)

    # -- metadata ------------------------------------------------------------
    def refresh(self, topics: Iterable[str] | None = None, *,
                auto_create: bool = False) -> dict[str, dict[int, PartitionInfo]]:
        """Ask the first broker that answers (known brokers, then the bootstrap servers) for the metadata
        of `topics` (None: every topic); returns the topics it holds (`ClusterMetadata.apply`)."""
        wanted = None if topics is None else list(topics)
        request = ClusterMetadata.metadata_request(wanted, auto_create=auto_create)
        last: BrokerUnavailable | None = None
        for host, port in [*self.metadata.brokers.values(), *self.bootstrap]:
            try:
                response = self.connection(host, port).request(request, METADATA_VERSION)
            except BrokerUnavailable as exc:
                last = exc
                continue
            return self.metadata.apply(response, wanted)
        servers = ",".join(f"{h}:{p}" for h, p in self.bootstrap)
        raise BrokerUnavailable(f"no broker of {servers} answered a metadata request: {last}", address=servers)

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
