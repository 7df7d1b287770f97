"""What the asyncio and the blocking cluster clients share: their settings, connections by address, metadata.

Why: `AsyncClient` and `BlockingClient` are twins method for method; the part of them that never does I/O —
the settings they were made with, one connection per broker address, the cluster's metadata, which broker
`send` names, where `refresh` asks, what is said when no broker answers — is written once here, so the two
differ only in how they wait (`await` or a blocking call).

What it must never do: open a socket itself (a connection is made by the subclass, lazily, and connects on
its first request) or hold any state but the metadata and the connections.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from .errors import BrokerUnavailable
from .metadata import ClusterMetadata, Node, PartitionInfo, parse_bootstrap
from .retry import COORDINATOR_MOVED, RetryPolicy
from .security import PLAINTEXT, ConnectionSecurity

__all__ = ["ClusterClientBase"]

C = TypeVar("C")


class ClusterClientBase(Generic[C]):
    """Connections (of type C) to the cluster found from `bootstrap` ("host:port,host:port")."""

    def __init__(self, bootstrap: str, *, client_id: str, timeout_s: float = 30.0,
                 retry: RetryPolicy | None = None, coordinator_retry: RetryPolicy | None = None,
                 security: ConnectionSecurity = PLAINTEXT) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.security = security
        self.coordinator_retry = coordinator_retry or RetryPolicy(retriable_codes=COORDINATOR_MOVED)
        self.metadata = ClusterMetadata()
        self._connections: dict[tuple[str, int], C] = {}

    @property
    def brokers(self) -> dict[int, tuple[str, int]]:
        return self.metadata.brokers

    @property
    def partitions(self) -> dict[str, dict[int, PartitionInfo]]:
        return self.metadata.partitions

    def _new_connection(self, host: str, port: int) -> C:
        raise NotImplementedError

    def connection(self, host: str, port: int) -> C:
        """The one connection to `host:port` (made on first use; it connects on its first request)."""
        conn = self._connections.get((host, port))
        if conn is None:
            conn = self._connections[(host, port)] = self._new_connection(host, port)
        return conn

    def _node(self, node_id: int) -> Node:
        """Broker `node_id` of the last metadata; BrokerUnavailable naming the known ones when it is not there."""
        node = self.metadata.broker(node_id)
        if node is None:
            raise BrokerUnavailable(f"broker {node_id} is not in the cluster's metadata (known: "
                                    f"{sorted(self.metadata.brokers)})")
        return node

    def _candidates(self) -> list[tuple[str, int]]:
        """Where a request any broker may answer goes, in turn: the known brokers, then the bootstrap servers."""
        return [*self.metadata.brokers.values(), *self.bootstrap]

    def _none_answered(self, what: str, last: BrokerUnavailable | None) -> BrokerUnavailable:
        servers = ",".join(f"{h}:{p}" for h, p in self.bootstrap)
        return BrokerUnavailable(f"no broker of {servers} answered {what}: {last}", address=servers)
