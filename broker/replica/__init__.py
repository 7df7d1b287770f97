"""The replica layer (`kelp.broker.replica`): this broker's replicas of partitions and the one door to their data.

Why a package: a replica's state (`partition`), the idempotent-producer state and its rebuild
(`producer_state`, `producer_recovery`), the leader's write path and acks=all wait (`produce`,
`txn_markers`), the read path (`fetch`), the follower path (`follower`), the leader's ISR proposals
(`isr_changes`) and the replication quotas (`replication_quota`) are one concern, composed by
`ReplicaManager` (`manager`); the results it hands in and out are `results`. Callers import the
module they need (`from kelp.broker.replica.manager import ReplicaManager`). It must never import
the request handlers (`kafka`, `http`) nor parse individual records.
"""
