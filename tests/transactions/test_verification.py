"""KIP-890 part 1: a partition leader appends a transactional batch only for a partition in the transaction.

The Produce handler on an in-process broker that is also the transaction coordinator (the verifier calls it
directly), the producer state's verification guards alone (Kafka's ABA case: a verification answered before
an abort marker cannot admit a later batch), the remote verifier's coalescing of asks for one coordinator,
and the translation of the coordinator's answers into a Produce's errors per version.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import AddPartitionsToTxnRequest, InitProducerIdRequest, ProduceRequest

from kelp.broker.replica.producer_state import ProducerStateManager
from kelp.broker.transactions.metadata import TxnState
from kelp.broker.transactions.verifier import TxnVerifier
from kelp.broker.txn_verification import produce_error
from kelp.errors import ErrorCode, InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError
from kelp.records.build import build_batch
from tests.authorization.harness import ADMIN, InProcessBroker

TID = "verified"
TOPIC = "out"
AP = AddPartitionsToTxnRequest


@pytest.fixture
async def b(tmp_path: Path):
    async for broker in _coordinating(tmp_path):
        yield broker


@pytest.fixture
async def marking(tmp_path: Path):
    """A broker whose transaction markers reach its partitions: the harness authorizes only its admin, and the
    coordinator's WriteTxnMarkers connection (loopback, PLAINTEXT) authenticates as ANONYMOUS."""
    async for broker in _coordinating(tmp_path, **{"super.users": f"{ADMIN};User:ANONYMOUS"}):
        yield broker


async def _coordinating(tmp_path: Path, **settings: object):
    async with InProcessBroker(tmp_path, **settings) as broker:
        await broker.parts.topics.create_topic(TOPIC, 2, 1)
        for _ in range(250):
            found = await broker.call(FindCoordinatorRequest(key_type=1, coordinator_keys=[TID]), 4)
            if found.coordinators[0].error_code == 0 and broker.parts.transactions.check(TID) == 0 and all(
                    (p := broker.parts.replicas.get_partition(TOPIC, i)) is not None and p.is_leader
                    for i in range(2)):
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError(f"broker never became the coordinator of {TID}")
        yield broker


async def init(b: InProcessBroker, tid: str | None = TID) -> tuple[int, int]:
    for _ in range(100):  # an Ongoing transaction is aborted first: CONCURRENT_TRANSACTIONS until then
        answer = await b.call(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000,
                                                    producer_id=-1, producer_epoch=-1), 4)
        if answer.error_code != ErrorCode.CONCURRENT_TRANSACTIONS:
            break
        await asyncio.sleep(0.02)
    assert answer.error_code == 0
    return answer.producer_id, answer.producer_epoch


def produce(pid: int, epoch: int, seq: int, *, partition: int = 0, tid: str | None = TID) -> ProduceRequest:
    T = ProduceRequest.TopicProduceData
    batch = build_batch([(b"k", b"v")], is_transactional=True, producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq)
    return ProduceRequest(transactional_id=tid, acks=1, timeout_ms=5000, topic_data=[
        T(name=TOPIC, partition_data=[T.PartitionProduceData(index=partition, records=batch)])])


async def code(b: InProcessBroker, request: ProduceRequest, version: int = 9) -> int:
    answer = await b.call(request, version)
    return answer.responses[0].partition_responses[0].error_code


def log_end(b: InProcessBroker, partition: int = 0) -> int:
    part = b.parts.replicas.get_partition(TOPIC, partition)
    assert part is not None
    return part.log.log_end_offset


async def add(b: InProcessBroker, pid: int, epoch: int, partition: int = 0) -> None:
    answer = await b.call(AP(v3_and_below_transactional_id=TID, v3_and_below_producer_id=pid,
                             v3_and_below_producer_epoch=epoch,
                             v3_and_below_topics=[AP.AddPartitionsToTxnTopic(name=TOPIC, partitions=[partition])]), 3)
    assert answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0


async def test_a_partition_not_in_the_transaction_is_refused_and_nothing_is_appended(b: InProcessBroker) -> None:
    pid, epoch = await init(b)
    verifier = b.parts.transactions.verifier
    assert verifier is not None
    assert await code(b, produce(pid, epoch, 0)) == ErrorCode.INVALID_TXN_STATE
    assert log_end(b) == 0
    await add(b, pid, epoch)
    asked = verifier.asked
    assert await code(b, produce(pid, epoch, 0)) == ErrorCode.NONE
    assert verifier.asked == asked + 1
    # The transaction is open on the partition now: the next batches ask the coordinator nothing.
    assert await code(b, produce(pid, epoch, 1)) == ErrorCode.NONE
    assert await code(b, produce(pid, epoch, 2)) == ErrorCode.NONE
    assert verifier.asked == asked + 1 and log_end(b) == 3
    # Another partition of the same transaction, not added: refused, the open one unaffected.
    assert await code(b, produce(pid, epoch, 0, partition=1)) == ErrorCode.INVALID_TXN_STATE
    assert log_end(b, 1) == 0
    assert (verifier.partitions_verified, verifier.partitions_refused) == (3, 2)


async def test_bad_producers_get_kafkas_errors(b: InProcessBroker) -> None:
    pid, epoch = await init(b)
    # transactional records without the request's transactional id
    assert await code(b, produce(pid, epoch, 0, tid=None)) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # a producer id that is not the transactional id's (an idempotent producer's)
    idem_pid, idem_epoch = await init(b, None)
    assert await code(b, produce(idem_pid, idem_epoch, 0)) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    # a fenced epoch: the coordinator's PRODUCER_FENCED reaches a producer as INVALID_PRODUCER_EPOCH
    pid2, epoch2 = await init(b)
    assert (pid2, epoch2) == (pid, epoch + 1)
    assert await code(b, produce(pid, epoch, 0)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log_end(b) == 0


def test_a_guard_from_before_a_marker_admits_nothing() -> None:
    """Kafka's ABA case: verified, then an abort marker, then a new transaction unaware of the partition —
    the stale guard must not let the old batch in."""
    ps = ProducerStateManager("t", 0)
    guard = ps.start_verification(7, 0, 0, now_ms=1000)
    assert guard is not None and ps.start_verification(7, 0, 0, now_ms=1001) is guard
    ps.apply_marker(7, 0, 0, offset=0, commit=False, timestamp=1002)
    with pytest.raises(InvalidTxnStateError):
        ps.check_verified(7, 0, 0, guard)
    fresh = ps.start_verification(7, 0, 3, now_ms=1003)
    assert fresh is not guard
    ps.start_verification(7, 0, 1, now_ms=1004)  # an earlier batch of the same transaction was also seen
    with pytest.raises(OutOfOrderSequenceError):
        ps.check_verified(7, 0, 3, fresh)
    ps.check_verified(7, 0, 1, fresh)
    ps.update(7, 0, 1, 1, 5, 5, 1005, transactional=True)
    assert ps.verification(7) is None and ps.start_verification(7, 0, 2, now_ms=1006) is None  # open: no ask
    ps.update(8, 1, 0, 0, 6, 6, 1008)  # producer 8 at epoch 1
    with pytest.raises(InvalidProducerEpochError):
        ps.start_verification(8, 0, 0, now_ms=1009)
    with pytest.raises(InvalidProducerEpochError):  # a late offsets batch (no sequence) of an older epoch
        ps.check_epoch(8, 0)
    ps.check_epoch(8, 1)
    ps.start_verification(9, 0, 0, now_ms=0)
    ps.expire(now_ms=10_000, expiration_ms=5_000)
    assert ps.verification(9) is None


def test_a_v2_guard_outlives_the_previous_transactions_marker_at_its_epoch() -> None:
    """Transactions v2 (issue 34; Kafka's isV2NextTransactionStarted in UnifiedLog.updateProducers): EndTxn v5
    bumped the epoch and the client's next transaction reached the leader — its verification started — before
    the previous transaction's marker, written under the bumped epoch. The marker must close the old
    transaction and leave the new verification standing; any other marker still voids a guard."""
    ps = ProducerStateManager("t", 0)
    first = ps.start_verification(7, 0, 0, now_ms=1, supports_epoch_bump=True)
    ps.check(7, 0, 0, 0, transactional=True, verify=True, guard=first)
    ps.update(7, 0, 0, 0, 0, 0, 1, transactional=True)  # transaction 1 open at offset 0
    assert ps.verification(7) is None and ps.ongoing_transactions() == {7: 0}
    nxt = ps.start_verification(7, 1, 0, now_ms=2, supports_epoch_bump=True)  # transaction 2, epoch 1
    assert nxt is not None
    done = ps.apply_marker(7, 1, 0, offset=1, commit=True, timestamp=3)  # transaction 1's marker, epoch 1
    assert done is not None and (done.first_offset, done.last_offset, done.aborted) == (0, 1, False)
    assert ps.verification(7) is nxt and ps.ongoing_transactions() == {}
    assert ps.check(7, 1, 0, 0, transactional=True, verify=True, guard=nxt) is None
    ps.update(7, 1, 0, 0, 2, 2, 4, transactional=True)
    assert ps.verification(7) is None and ps.ongoing_transactions() == {7: 2}  # the batch opened transaction 2
    # A v2 guard whose epoch is not the marker's (a fence: the coordinator aborted under a later epoch) is void.
    ps.apply_marker(7, 2, 0, offset=3, commit=True, timestamp=5)
    stale = ps.start_verification(7, 2, 0, now_ms=6, supports_epoch_bump=True)
    ps.apply_marker(7, 3, 0, offset=4, commit=False, timestamp=7)
    with pytest.raises(InvalidProducerEpochError):  # its epoch is older now: fenced, checked before the guard
        ps.check(7, 2, 0, 0, transactional=True, verify=True, guard=stale)
    assert ps.verification(7) is None
    # A transactions v1 guard at the marker's epoch is void too (Kafka's ABA case: v1 does not bump).
    v1 = ps.start_verification(8, 0, 0, now_ms=8)
    ps.apply_marker(8, 0, 0, offset=5, commit=False, timestamp=9)
    with pytest.raises(InvalidTxnStateError):
        ps.check(8, 0, 0, 0, transactional=True, verify=True, guard=v1)


def test_a_duplicate_is_answered_before_the_verification_and_a_fenced_batch_before_both() -> None:
    """Kafka's order (UnifiedLog.analyzeAndValidateProducerState): a retry of an appended batch gets its
    offsets even after its transaction ended; an unverified batch is INVALID_TXN_STATE (abortable), not
    OUT_OF_ORDER_SEQUENCE_NUMBER (fatal to older clients) however its sequence looks."""
    ps = ProducerStateManager("t", 0)
    guard = ps.start_verification(5, 0, 0, now_ms=1)
    ps.check(5, 0, 0, 9, transactional=True, verify=True, guard=guard)
    ps.update(5, 0, 0, 9, 0, 9, 1, transactional=True)
    ps.apply_marker(5, 0, 0, offset=10, commit=False, timestamp=2)
    dup = ps.check(5, 0, 0, 9, transactional=True, verify=True, guard=None)
    assert dup is not None and (dup.first_offset, dup.last_offset) == (0, 9)
    with pytest.raises(InvalidTxnStateError):  # a late batch out of sequence, never verified
        ps.check(5, 0, 30, 39, transactional=True, verify=True, guard=None)
    with pytest.raises(OutOfOrderSequenceError):  # without verification the sequence decides
        ps.check(5, 0, 30, 39, transactional=True)


async def test_asks_for_one_coordinator_are_coalesced() -> None:
    sent: list[dict] = []
    release = asyncio.Event()

    class Remote(TxnVerifier):
        async def _request(self, node, batch):  # type: ignore[override]
            sent.append({tid: (a.producer_epoch, sorted(a.partitions), a.add) for tid, a in batch.items()})
            await release.wait()
            return {tid: {tp: ErrorCode.NONE if tp[1] == 0 else ErrorCode.TRANSACTION_ABORTABLE
                          for tp in a.partitions} for tid, a in batch.items()}

    v = Remote(None, broker_id=1, coordinator_of=lambda tid: 2)
    first = asyncio.ensure_future(v.verify("a", 5, 0, [("t", 9)]))
    await asyncio.sleep(0)  # in flight
    queued = [asyncio.ensure_future(v.verify("a", 5, 0, [("t", 0)])),
              asyncio.ensure_future(v.verify("a", 5, 0, [("t", 1)])),
              asyncio.ensure_future(v.verify("b", 6, 3, [("t", 0)]))]
    await asyncio.sleep(0)
    old = await v.verify("b", 6, 2, [("t", 0)])  # an older epoch than the queued one: fenced at once
    assert old == {("t", 0): ErrorCode.INVALID_PRODUCER_EPOCH}
    release.set()
    assert await first == {("t", 9): ErrorCode.TRANSACTION_ABORTABLE}
    a0, a1, b0 = await asyncio.gather(*queued)
    assert (a0, a1, b0) == ({("t", 0): 0}, {("t", 1): ErrorCode.TRANSACTION_ABORTABLE}, {("t", 0): 0})
    assert sent == [{"a": (0, [("t", 9)], False)}, {"a": (0, [("t", 0), ("t", 1)], False), "b": (3, [("t", 0)], False)}]
    await v.close()


def test_produce_errors_per_version() -> None:
    assert produce_error(ErrorCode.TRANSACTION_ABORTABLE, 10)[0] == ErrorCode.INVALID_TXN_STATE
    assert produce_error(ErrorCode.TRANSACTION_ABORTABLE, 11)[0] == ErrorCode.TRANSACTION_ABORTABLE
    assert produce_error(ErrorCode.PRODUCER_FENCED, 9)[0] == ErrorCode.INVALID_PRODUCER_EPOCH
    for retriable in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.NETWORK_EXCEPTION,
                      ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
        assert produce_error(retriable, 12)[0] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert produce_error(ErrorCode.CONCURRENT_TRANSACTIONS, 11)[0] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert produce_error(ErrorCode.CONCURRENT_TRANSACTIONS, 12)[0] == ErrorCode.CONCURRENT_TRANSACTIONS
    assert produce_error(ErrorCode.INVALID_PRODUCER_ID_MAPPING, 9)[0] == ErrorCode.INVALID_PRODUCER_ID_MAPPING


async def test_a_v2_produce_adds_its_partition_and_end_txn_v5_bumps_the_epoch(b: InProcessBroker) -> None:
    """Transactions v2 on the wire: ApiVersions finalizes transaction.version 2, Produce v12 has the leader
    add the partition (no AddPartitionsToTxn), TxnOffsetCommit v5 the offsets partition, EndTxn v5 answers
    the next epoch."""
    from kafka.protocol.metadata import ApiVersionsRequest
    from kafka.protocol.producer import EndTxnRequest, TxnOffsetCommitRequest

    versions = await b.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    assert [(f.name, f.min_version, f.max_version) for f in versions.supported_features] == [
        ("group.version", 0, 1), ("share.version", 0, 1), ("transaction.version", 0, 2)]
    assert [(f.name, f.max_version_level) for f in versions.finalized_features] == [
        ("group.version", 1), ("share.version", 1), ("transaction.version", 2)]
    assert versions.finalized_features_epoch == 1
    assert {k.api_key: k.max_version for k in versions.api_keys}[0] == 12  # Produce
    pid, epoch = await init(b)
    assert await code(b, produce(pid, epoch, 0), version=11) == ErrorCode.TRANSACTION_ABORTABLE  # v11: verify only
    assert await code(b, produce(pid, epoch, 0), version=12) == ErrorCode.NONE
    meta = b.parts.transactions.txns[TID]
    assert meta.partitions == {(TOPIC, 0)} and meta.tv2
    for _ in range(250):  # this broker coordinates group "g" once its offsets partition is loaded
        await b.call(FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]), 4)
        if b.parts.groups.check_group("g") == 0:
            break
        await asyncio.sleep(0.02)
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    # A partition the topic lacks is UNKNOWN_TOPIC_OR_PARTITION before the member is judged (Kafka's
    # handleTxnOffsetCommitRequest asks the metadata first); it was UNKNOWN_MEMBER_ID, the coordinator's answer.
    missing = await b.call(TxnOffsetCommitRequest(
        transactional_id=TID, group_id="g", producer_id=pid, producer_epoch=epoch, generation_id=3, member_id="ghost",
        group_instance_id=None, topics=[T(name=TOPIC, partitions=[T.TxnOffsetCommitRequestPartition(
            partition_index=99, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])]), 5)
    assert missing.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    committed = await b.call(TxnOffsetCommitRequest(
        transactional_id=TID, group_id="g", producer_id=pid, producer_epoch=epoch, generation_id=-1, member_id="",
        group_instance_id=None, topics=[T(name=TOPIC, partitions=[T.TxnOffsetCommitRequestPartition(
            partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])]), 5)
    assert committed.topics[0].partitions[0].error_code == 0
    assert len(meta.partitions) == 2  # the group's __consumer_offsets partition joined too
    ended = await b.call(EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=epoch, committed=True),
                         5)
    assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, pid, epoch + 1)
    # The markers cannot reach the partitions here (this broker authorizes only its admin), so the transaction
    # stays in PrepareCommit: any EndTxn of the producer id, an old epoch's too, is CONCURRENT_TRANSACTIONS
    # before its epoch is judged (Kafka's pending Complete state, KAFKA-18464); test_coordinator_v2 fences
    # the old epoch once the markers are written.
    stale = await b.call(EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=epoch - 1,
                                       committed=True), 5)
    assert stale.error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    assert b.parts.transactions.txns[TID].state.kafka_name == "PrepareCommit"


async def test_a_v2_produce_racing_the_previous_transactions_markers_is_appended(marking: InProcessBroker) -> None:
    """Issue 34 on the wire: EndTxn v5 commits (the markers, under the bumped epoch, are still to be written) and
    the client's next transaction sends its first Produce v12 at once. The leader starts its verification, the
    coordinator adds the partition once the previous transaction is complete — its marker landed on the
    partition meanwhile — and the batch is appended in the new transaction, not refused INVALID_TXN_STATE."""
    from kafka.protocol.producer import EndTxnRequest

    # The coordinator holds the add until the previous transaction is complete (not CONCURRENT_TRANSACTIONS after
    # its usual 100 ms): the marker then always lands while the verification is pending.
    b = marking
    b.parts.transactions.config.completion_wait_ms = 20_000
    part = b.parts.replicas.get_partition(TOPIC, 0)
    assert part is not None
    pid, epoch = await init(b)
    assert await code(b, produce(pid, epoch, 0), version=12) == ErrorCode.NONE
    meta = b.parts.transactions.txns[TID]
    for round_ in range(3):  # back to back, as a consume-transform-produce loop runs them
        ended = await b.call(EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=epoch,
                                           committed=True), 5)
        assert (ended.error_code, ended.producer_epoch) == (0, epoch + 1)
        epoch = ended.producer_epoch
        assert meta.state is TxnState.PREPARE_COMMIT, f"round {round_}: the markers were written already"
        end_before = log_end(b)
        assert await code(b, produce(pid, epoch, 0), version=12) == ErrorCode.NONE  # the next transaction
        # the previous transaction's marker, then this batch, which opened the new transaction
        assert log_end(b) == end_before + 2 and part.producers.ongoing_transactions() == {pid: end_before + 1}
        assert meta.state is TxnState.ONGOING and meta.producer_epoch == epoch
        assert await code(b, produce(pid, epoch, 1), version=12) == ErrorCode.NONE  # in it: nothing to verify
    assert log_end(b) == 1 + 3 * 3


async def test_txn_offset_commit_without_add_offsets_is_refused_and_writes_nothing(b: InProcessBroker) -> None:
    """TxnOffsetCommit v0-4 of a group whose offsets partition AddOffsetsToTxn never added: the coordinator
    does not confirm it (INVALID_TXN_STATE before v4, TRANSACTION_ABORTABLE from v4), no offset is pending."""
    from kafka.protocol.producer import TxnOffsetCommitRequest

    for _ in range(250):
        await b.call(FindCoordinatorRequest(key_type=0, coordinator_keys=["g2"]), 4)
        if b.parts.groups.check_group("g2") == 0:
            break
        await asyncio.sleep(0.02)
    pid, epoch = await init(b)
    await add(b, pid, epoch)  # a data partition only
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic

    def commit() -> TxnOffsetCommitRequest:
        return TxnOffsetCommitRequest(
            transactional_id=TID, group_id="g2", producer_id=pid, producer_epoch=epoch, generation_id=-1,
            member_id="", group_instance_id=None, topics=[T(name=TOPIC, partitions=[T.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])])

    for version, expected in ((3, ErrorCode.INVALID_TXN_STATE), (4, ErrorCode.TRANSACTION_ABORTABLE)):
        answer = await b.call(commit(), version)
        assert answer.topics[0].partitions[0].error_code == expected
    group = b.parts.groups.groups.get("g2")
    assert group is None or not group.pending_txn_offsets


async def test_a_leaders_request_answers_its_transactions_concurrently(b: InProcessBroker) -> None:
    """AddPartitionsToTxn v4 from a partition leader carries the asks of many transactional ids; one whose
    previous transaction is still completing waits for it (`completion_wait_ms`), and must not hold up the
    others: Kafka answers each transaction through its own callback."""
    coordinator = b.parts.transactions
    in_flight: list[str] = []
    both = asyncio.Event()

    async def add_partitions(tid, pid, epoch, partitions, *, tv2=False):  # type: ignore[no-untyped-def]
        in_flight.append(tid)
        if len(in_flight) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 10)  # sequential handling would wait here forever (bounded)
        return ErrorCode.NONE if tid == "x" else ErrorCode.CONCURRENT_TRANSACTIONS

    coordinator.add_partitions = add_partitions  # type: ignore[method-assign]
    T = AP.AddPartitionsToTxnTransaction
    request = AP(transactions=[
        T(transactional_id=tid, producer_id=1, producer_epoch=0, verify_only=False,
          topics=[T.AddPartitionsToTxnTopic(name=TOPIC, partitions=[0])]) for tid in ("x", "y")])
    answer = await b.call(request, 4)
    codes = {r.transactional_id: r.topic_results[0].results_by_partition[0].partition_error_code
             for r in answer.results_by_transaction}
    assert codes == {"x": ErrorCode.NONE, "y": ErrorCode.CONCURRENT_TRANSACTIONS} and in_flight == ["x", "y"]


async def test_group_version_is_finalized_even_with_transactions_v1(tmp_path: Path) -> None:
    """The consumer group protocol does not depend on the transaction version: with transaction.version 0,
    ApiVersions still finalizes group.version 1 and share.version 1 (and lists no transaction.version level 0,
    as Kafka)."""
    from kafka.protocol.metadata import ApiVersionsRequest

    async with InProcessBroker(tmp_path, **{"transaction.version": 0}) as broker:
        versions = await broker.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    assert [(f.name, f.max_version_level) for f in versions.finalized_features] == [
        ("group.version", 1), ("share.version", 1)]
    assert versions.finalized_features_epoch == 1
    assert {k.api_key for k in versions.api_keys} >= {68, 69}  # ConsumerGroupHeartbeat, ConsumerGroupDescribe
