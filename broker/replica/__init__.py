"""The replica layer (`kelp.broker.replica`): this broker's replicas of partitions and the one door to their data.

Why a package: replication is one concern with several roles, each an object of its own that
`ReplicaManager` (`manager`) composes — no mixins: the partition table (`table`), the leader's
write path (`leader`), the purgatory of acks=all waits (`purgatory`), the transaction markers
(`txn_markers`), the read path (`fetch`), the follower's path (`follower`), the leader's ISR
proposals (`isr_changes`), the worker-thread jobs on a replica's log (`jobs`) and the rolls and
producer snapshots both write paths make (`rolls`). Beneath them: a replica's state (`partition`),
the idempotent-producer state and its rebuild (`producer_state`, `producer_recovery`), the
replication quotas (`replication_quota`), what the layer is handed (`interfaces`) and hands out
(`results`). Callers import the module they need (`from kelp.broker.replica.manager import
ReplicaManager`) and call only the manager's methods. It must never import the request handlers
(`kafka`, `http`) nor parse individual records.
"""
