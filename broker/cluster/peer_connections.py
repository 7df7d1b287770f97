"""One Kafka-protocol connection per peer broker, over the inter-broker listener with its security.

Why: brokers talk to each other over the Kafka protocol in two places besides replication — the
transaction coordinator sends WriteTxnMarkers to partition leaders, and partition leaders ask
coordinators to verify a transaction before appending (KIP-890) — and both need the same thing: a
connection per broker that follows the broker's current endpoint in the metadata image (a restarted
broker may listen elsewhere) and the inter-broker security, with certificates reloaded when they were
renewed. One copy of that lives here.

It must never send anything itself: callers make the requests.
"""

from __future__ import annotations

from kelp.kafka_client import AsyncConnection
from kelp.kafka_client.security import PLAINTEXT

from .member import ClusterMember

__all__ = ["PeerConnections"]


class PeerConnections:
    """Connections to other brokers by id, made on first use and remade when a broker's endpoint moved."""

    def __init__(self, cluster: ClusterMember | None, *, client_id: str, timeout_s: float) -> None:
        self.cluster = cluster
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._connections: dict[int, AsyncConnection] = {}

    def get(self, broker_id: int) -> AsyncConnection:
        """The connection to `broker_id` (this broker too, through its own endpoint); ConnectionError when it is
        not a live member of the cluster."""
        cluster = self.cluster
        if cluster is None:
            raise ConnectionError("no cluster membership to reach other brokers")
        ep = cluster.state.brokers.get(broker_id)
        if ep is None and cluster.state.endpoint is not None and cluster.state.endpoint.id == broker_id:
            ep = cluster.state.endpoint
        if ep is None:
            raise ConnectionError(f"broker {broker_id} is not a live member of the cluster")
        conn = self._connections.get(broker_id)
        if conn is None or (conn.host, conn.port) != (ep.host, ep.port):
            security = cluster.state.inter_broker
            if security is not None:
                security.maybe_reload()
            conn = self._connections[broker_id] = AsyncConnection(
                ep.host, ep.port, client_id=self.client_id, timeout_s=self.timeout_s,
                security=security.kafka if security is not None else PLAINTEXT)
        return conn

    async def close(self) -> None:
        conns, self._connections = list(self._connections.values()), {}
        for conn in conns:
            await conn.close()
