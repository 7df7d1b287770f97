"""What the transaction coordinator is given: its broker settings, its topic, and where a transactional id lives.

Why: the state manager, the marker dispatcher, the coordinator and the FindCoordinator answer all read the
same settings (Kafka's names in the comments) and must agree with every other broker (and with Kafka's
tools) on which `__transaction_state` partition holds a transactional id:
`Utils.abs(transactionalId.hashCode()) % transaction.state.log.num.partitions`, Java's String.hashCode, the
same arithmetic as for groups (`kelp.broker.groups.placement`).

This module must never hold transaction state, do I/O, or read broker config anywhere but
`TxnConfig.from_broker`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kelp.config.broker import BrokerConfig

from ..groups.placement import java_string_hashcode

__all__ = ["TXN_TOPIC", "TxnConfig", "partition_for_txn"]

TXN_TOPIC = "__transaction_state"


def partition_for_txn(transactional_id: str, num_partitions: int) -> int:
    """The `__transaction_state` partition (and so the coordinator) of `transactional_id`."""
    if num_partitions <= 0:
        raise ValueError(f"transaction.state.log.num.partitions must be > 0, got {num_partitions}")
    h = java_string_hashcode(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


@dataclass
class TxnConfig:
    """Broker settings the coordinator uses (Kafka names in the comments)."""

    num_partitions: int = 50  # transaction.state.log.num.partitions
    replication_factor: int = 3  # transaction.state.log.replication.factor
    min_isr: int = 2  # transaction.state.log.min.isr (the topic's min.insync.replicas)
    segment_bytes: int = 104857600  # transaction.state.log.segment.bytes
    max_timeout_ms: int = 900000  # transaction.max.timeout.ms: the largest transaction.timeout.ms a producer may ask
    id_expiration_ms: int = 604800000  # transactional.id.expiration.ms
    abort_interval_ms: int = 10000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    expire_interval_ms: int = 3600000  # transaction.remove.expired.transaction.cleanup.interval.ms
    # Kelp's own bounds (Kafka uses request.timeout.ms and the marker channel's backoff for these):
    write_timeout_ms: int = 5000  # an acks=all write to __transaction_state
    marker_backoff_ms: int = 100  # the first retry of a marker; doubles up to marker_max_backoff_ms
    marker_max_backoff_ms: int = 2000
    load_retry_ms: int = 1000  # after a failed replay of a partition this broker still leads
    # AddPartitionsToTxn / AddOffsetsToTxn arriving while the producer's previous transaction is still being
    # completed (its markers) wait this long for it before answering CONCURRENT_TRANSACTIONS (Kafka answers at
    # once; a Java producer then backs off retry.backoff.ms, 100 ms, for a completion that takes a few ms).
    completion_wait_ms: int = 100
    # transaction.partition.verification.enable: partition leaders ask the coordinator before a producer's first
    # transactional batch on a partition (KIP-890 part 1, `verifier`).
    partition_verification: bool = True
    # transaction.version: the finalized level of Kafka's feature (Kafka sets it with kafka-features / at format
    # time; a Kelp broker config here). 1+: __transaction_state values in TransactionLogValue v1; 2: clients may
    # run transactions v2 (KIP-890 part 2), advertised in ApiVersions.
    transaction_version: int = 2

    def topic_configs(self) -> dict[str, str]:
        """`__transaction_state`'s topic configs, as Kafka's TransactionStateManager.transactionTopicConfigs."""
        return {"cleanup.policy": "compact", "compression.type": "uncompressed",
                "min.insync.replicas": str(self.min_isr), "segment.bytes": str(self.segment_bytes),
                "unclean.leader.election.enable": "false"}

    def partition_for(self, transactional_id: str) -> int:
        return partition_for_txn(transactional_id, self.num_partitions)

    @classmethod
    def from_broker(cls, cfg: BrokerConfig) -> "TxnConfig":
        return cls(
            num_partitions=int(cfg["transaction.state.log.num.partitions"]),
            replication_factor=int(cfg["transaction.state.log.replication.factor"]),
            min_isr=int(cfg["transaction.state.log.min.isr"]),
            segment_bytes=int(cfg["transaction.state.log.segment.bytes"]),
            max_timeout_ms=int(cfg["transaction.max.timeout.ms"]),
            id_expiration_ms=int(cfg["transactional.id.expiration.ms"]),
            abort_interval_ms=int(cfg["transaction.abort.timed.out.transaction.cleanup.interval.ms"]),
            expire_interval_ms=int(cfg["transaction.remove.expired.transaction.cleanup.interval.ms"]),
            partition_verification=bool(cfg["transaction.partition.verification.enable"]),
            transaction_version=int(cfg["transaction.version"]),
        )
