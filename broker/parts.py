"""`BrokerParts`: every part of a broker that serves, as its Kafka handlers and HTTP routes reach them.

Why: the listeners call into the broker's core, and they used to be handed the composition root itself,
untyped: nothing said which parts a handler could reach, and a part not built yet (the broker builds
them one after another while it starts: logs recover, the cluster member joins) looked the same as a part
that does not exist. Now the composition root (`kelp.broker.app.Broker`) builds every part first and then
hands the listeners one `BrokerParts`: the Kafka listener accepts connections from then on
(`KafkaServer.serve(parts)`, the handlers' `RequestContext.broker`), and the HTTP routes behind the
starting gate read it (`kelp.broker.http.serving.serving`). What answers while the broker starts —
`/healthz`, `/readyz`, `/metrics`, the controller's metadata deliveries — reads the `Broker` itself, as
`kelp.broker.http.keys.HttpBroker` describes.

No part is optional. A broker that runs alone is a cluster of one (its own file-backed cluster directory,
`BrokerConfig._resolve_standalone`): its `ClusterMember` elects it controller, so there is no mode
without one; every broker runs a group coordinator and a transaction coordinator. What is optional says so
where it is chosen: the metrics registry (`Broker(metrics=...)`, the process-wide one by default).

This module must never hold behaviour: it names the parts, the composition root builds them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kelp.config.broker import BrokerConfig

from .acl_manager import AclManager
from .client_quota_manager import ClientQuotaManager
from .cluster.member import ClusterMember
from .groups.group_coordinator import GroupCoordinator
from .replica.manager import ReplicaManager
from .storage import LogManager
from .topic_manager import TopicManager
from .transactions.coordinator import TransactionCoordinator

__all__ = ["BrokerParts"]


@dataclass(frozen=True, slots=True)
class BrokerParts:
    """The parts of a broker that serves, each built and started (see the module docstring)."""

    config: BrokerConfig
    logs: LogManager  # this broker's partition logs on disk
    topics: TopicManager  # the cluster's topics as this broker sees them; changes go through the controller
    replicas: ReplicaManager  # this broker's replicas: produce, fetch, offsets, follower state
    cluster: ClusterMember  # membership, the controller's decisions, routing to the controller and leaders
    groups: GroupCoordinator  # the groups of the `__consumer_offsets` partitions this broker leads
    transactions: TransactionCoordinator  # the transactional ids of the `__transaction_state` partitions it leads
    acls: AclManager  # the cluster's ACLs and every authorization decision (allows all without an authorizer)
    quotas: ClientQuotaManager  # client byte-rate quotas: what each client produced and fetched, its throttle
