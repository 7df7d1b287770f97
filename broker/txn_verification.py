"""Which partitions of a Produce need the transaction coordinator's word before their batch is appended (KIP-890).

Why: Kafka's `ReplicaManager.handleProduceAppend` with `transaction.partition.verification.enable`: a
partition whose first batch is transactional, from a producer with no transaction open there at that epoch,
gets a verification guard from its producer state, the coordinator is asked once for all such partitions
of the request (`transactions.verifier.TxnVerifier`: verify-only for transactions v1, adding the
partitions for a transactions v2 client, Produce v12+), and the partitions the coordinator did not confirm
are answered its error, translated for the Produce version, without being appended. The others are
appended with their guard, which `ProducerStateManager.check_verified` compares in the same synchronous
step as the append: a transaction aborted meanwhile (its marker drops the guard) cannot let the batch in.

The common case costs one byte test per partition: a batch that is not transactional, or whose producer
has its transaction open on the partition already, asks nothing. This module must never append or change
producer state beyond starting a verification.
"""

from __future__ import annotations

import struct
from typing import Protocol

from kelp.clock import wall_clock_ms
from kelp.errors import ErrorCode, KelpError, TxnVerificationError

from .replica.manager import ReplicaManager
from .replica.producer_state import VerificationGuard

__all__ = ["Verifier", "verify_produce", "transactional_batch", "produce_error", "txn_offset_commit_error",
           "FIRST_ADD_PARTITION_PRODUCE_VERSION", "FIRST_ADD_PARTITION_TXN_OFFSET_VERSION"]

_TRANSACTIONAL = 0x10  # RecordBatch v2 attributes bit 4; the attributes' low byte is byte 22 of a batch
_PRODUCER = struct.Struct(">qhi")  # producer id, producer epoch, base sequence at byte 43 of a batch
_PRODUCER_AT = 43

TopicPartition = tuple[str, int]

FIRST_GENERIC_ERROR_PRODUCE_VERSION = 11  # Produce v11+ clients understand TRANSACTION_ABORTABLE
FIRST_ADD_PARTITION_PRODUCE_VERSION = 12  # Produce v12+: transactions v2, the leader adds the partition

# Coordinator answers a client of an older Produce could mistake for fatal: Kafka answers NOT_ENOUGH_REPLICAS
# (retriable, no metadata refresh) naming the underlying error in the message.
_RETRIABLE = frozenset({ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                        ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})


FIRST_ADD_PARTITION_TXN_OFFSET_VERSION = 5  # TxnOffsetCommit v5+: transactions v2, the offsets partition is added
FIRST_GENERIC_ERROR_TXN_OFFSET_VERSION = 4  # TxnOffsetCommit v4+ clients understand TRANSACTION_ABORTABLE


def txn_offset_commit_error(code: int, version: int) -> int:
    """What a TxnOffsetCommit of `version` answers for the coordinator's verification `code`: Kafka's
    AddPartitionsToTxnManager translation, then GroupMetadataManager.maybeConvertOffsetCommitError."""
    if code == ErrorCode.NONE:
        return code
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        return ErrorCode.INVALID_TXN_STATE
    if code == ErrorCode.TRANSACTION_ABORTABLE and version < FIRST_GENERIC_ERROR_TXN_OFFSET_VERSION:
        return ErrorCode.INVALID_TXN_STATE
    if code == ErrorCode.NETWORK_EXCEPTION:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # retried without a coordinator lookup
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return code


def produce_error(code: int, produce_version: int) -> tuple[int, str]:
    """The error a Produce of `produce_version` answers for a partition the coordinator answered `code`
    (not NONE), with its message: Kafka's AddPartitionsToTxnManager then ReplicaManager translations."""
    if code == ErrorCode.PRODUCER_FENCED:
        code = ErrorCode.INVALID_PRODUCER_EPOCH  # producers expect this one from a produce
    elif code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        code = ErrorCode.INVALID_TXN_STATE
    elif code == ErrorCode.TRANSACTION_ABORTABLE and produce_version < FIRST_GENERIC_ERROR_PRODUCE_VERSION:
        code = ErrorCode.INVALID_TXN_STATE
    if code in _RETRIABLE or (code == ErrorCode.CONCURRENT_TRANSACTIONS
                              and produce_version < FIRST_ADD_PARTITION_PRODUCE_VERSION):
        return (ErrorCode.NOT_ENOUGH_REPLICAS, "Unable to verify the partition has been added to the transaction. "
                f"Underlying error: {ErrorCode(code).name}")
    if code == ErrorCode.INVALID_TXN_STATE:
        return code, "Partition was not added to the transaction"
    try:
        name = ErrorCode(code).name
    except ValueError:
        name = str(code)
    return code, f"the transaction coordinator answered {name}"


class Verifier(Protocol):
    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition], *, add: bool = False) -> dict[TopicPartition, int]: ...


def transactional_batch(records: memoryview | bytes | None) -> tuple[int, int, int] | None:
    """(producer id, epoch, base sequence) of `records`' first batch when it is transactional, else None."""
    if records is None or len(records) < _PRODUCER_AT + _PRODUCER.size or not records[22] & _TRANSACTIONAL:
        return None
    return _PRODUCER.unpack_from(records, _PRODUCER_AT)


async def verify_produce(
    replicas: ReplicaManager, verifier: Verifier, transactional_id: str | None,
    batches: dict[TopicPartition, tuple[int, int, int]], *, produce_version: int, add: bool,
) -> dict[TopicPartition, KelpError | VerificationGuard]:
    """For each partition with a transactional first batch ((producer id, epoch, base sequence) in `batches`):
    its guard to append with, or the error to answer. Partitions needing nothing are left out; so are those
    this broker does not lead (the append answers that)."""
    if not batches:
        return {}
    out: dict[TopicPartition, KelpError | VerificationGuard] = {}
    if transactional_id is None:
        # Kafka refuses transactional records without a transactional id before anything else.
        error = TxnVerificationError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                     "transactional records need the produce request's transactional id")
        return {tp: error for tp in batches}
    producers = {(pid, epoch) for pid, epoch, _ in batches.values()}
    if len(producers) > 1:
        error = TxnVerificationError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                                     "transactional records of one produce request carry more than one producer id")
        return {tp: error for tp in batches}
    (pid, epoch), = producers
    now = wall_clock_ms()
    asked: list[TopicPartition] = []
    for tp, (_, _, seq) in batches.items():
        part = replicas.get_partition(*tp)
        if part is None or not part.is_leader:
            continue
        try:
            guard = part.producers.start_verification(pid, epoch, seq, now, supports_epoch_bump=add)
        except KelpError as exc:
            out[tp] = exc
            continue
        if guard is not None:
            out[tp] = guard
            asked.append(tp)
    if not asked:
        return out
    codes = await verifier.verify(transactional_id, pid, epoch, asked, add=add)
    for tp in asked:
        code = codes.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
        if code != ErrorCode.NONE:
            mapped, message = produce_error(code, produce_version)
            out[tp] = TxnVerificationError(
                mapped, f"topic '{tp[0]}' partition {tp[1]}, transactional id '{transactional_id}' producer {pid} "
                        f"epoch {epoch}: {message}")
    return out
