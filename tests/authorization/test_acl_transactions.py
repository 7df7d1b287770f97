"""The transaction APIs under an authorizer, with Kafka's errors (KafkaApis' transaction handlers).

AddPartitionsToTxn, AddOffsetsToTxn and EndTxn need WRITE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); AddPartitionsToTxn also WRITE on each topic (the refused ones
TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED), and its broker form (v4+) CLUSTER_ACTION;
AddOffsetsToTxn and TxnOffsetCommit READ on the group; TxnOffsetCommit READ on each topic;
DescribeTransactions DESCRIBE on each id; ListTransactions lists only the ids the principal may DESCRIBE.
A principal holding exactly those ACLs gets through to the coordinator.
"""

from __future__ import annotations

import asyncio

from kafka.protocol.admin import DescribeTransactionsRequest, ListTransactionsRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    TxnOffsetCommitRequest,
)

from kelp.errors import ErrorCode
from tests.authorization.harness import InProcessBroker
from tests.authorization.matrix import ALICE, BOB, BROKER, GROUP, SECRET, acl, grant

TID = "tx"
DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
AP = AddPartitionsToTxnRequest


async def coordinating_txn(b: InProcessBroker) -> tuple[int, int]:
    """This broker coordinates TID (its __transaction_state created and loaded); the id initialised."""
    return await b.init_transactional_id(TID)


def add_partitions(pid: int, epoch: int, topic: str = SECRET) -> AddPartitionsToTxnRequest:
    return AP(v3_and_below_transactional_id=TID, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
              v3_and_below_topics=[AP.AddPartitionsToTxnTopic(name=topic, partitions=[0])])


def codes(answer) -> dict:
    return {(t.name, p.partition_index): p.partition_error_code for t in answer.results_by_topic_v3_and_below
            for p in t.results_by_partition}


async def test_add_partitions_end_txn(b: InProcessBroker) -> None:
    pid, epoch = await coordinating_txn(b)
    assert codes(await b.call(add_partitions(pid, epoch), 3, principal=ALICE)) == {(SECRET, 0): DENIED}
    await grant(b, acl("TRANSACTIONAL_ID", TID, "WRITE"))
    refused = codes(await b.call(add_partitions(pid, epoch), 3, principal=BOB))
    assert refused == {(SECRET, 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    both = add_partitions(pid, epoch)
    both.v3_and_below_topics.append(AP.AddPartitionsToTxnTopic(name="__consumer_offsets", partitions=[0]))
    assert set(codes(await b.call(both, 3, principal=BOB)).values()) == {ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    await grant(b, acl("TOPIC", SECRET, "WRITE"))
    assert codes(await b.call(add_partitions(pid, epoch), 3, principal=BOB)) == {(SECRET, 0): 0}
    end = EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=epoch, committed=False)
    assert (await b.call(end, 3, principal=ALICE)).error_code == DENIED
    assert (await b.call(end, 3, principal=BOB)).error_code == 0


async def test_add_partitions_broker_form_needs_cluster_action(b: InProcessBroker) -> None:
    pid, epoch = await coordinating_txn(b)
    T = AP.AddPartitionsToTxnTransaction
    verify = AP(transactions=[T(transactional_id=TID, producer_id=pid, producer_epoch=epoch, verify_only=True,
                                topics=[T.AddPartitionsToTxnTopic(name=SECRET, partitions=[0])])])
    assert (await b.call(verify, 4, principal=ALICE)).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    answer = await b.call(verify, 4, principal=BROKER)
    (result,) = answer.results_by_transaction
    assert answer.error_code == 0
    assert result.topic_results[0].results_by_partition[0].partition_error_code == ErrorCode.TRANSACTION_ABORTABLE


async def test_add_offsets_and_txn_offset_commit(b: InProcessBroker) -> None:
    pid, epoch = await coordinating_txn(b)
    add = AddOffsetsToTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=epoch, group_id=GROUP)
    assert (await b.call(add, 3, principal=ALICE)).error_code == DENIED
    await grant(b, acl("TRANSACTIONAL_ID", TID, "WRITE"))
    assert (await b.call(add, 3, principal=BOB)).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    await grant(b, acl("GROUP", GROUP, "READ"))
    assert (await b.call(add, 3, principal=BOB)).error_code == 0
    C = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    commit = TxnOffsetCommitRequest(transactional_id=TID, group_id=GROUP, producer_id=pid, producer_epoch=epoch,
                                    generation_id=-1, member_id="", group_instance_id=None, topics=[C(
                                        name=SECRET, partitions=[C.TxnOffsetCommitRequestPartition(
                                            partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                                            committed_metadata="")])])
    answer = await b.call(commit, 3, principal=ALICE)
    assert answer.topics[0].partitions[0].error_code == DENIED
    answer = await b.call(commit, 3, principal=BOB)
    assert answer.topics[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    await grant(b, acl("TOPIC", SECRET, "READ"))
    for _ in range(200):  # the group's __consumer_offsets partition is created and loaded on first use
        answer = await b.call(commit, 3, principal=BOB)
        if answer.topics[0].partitions[0].error_code not in (ErrorCode.NOT_COORDINATOR,
                                                             ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            break
        await asyncio.sleep(0.02)
    assert answer.topics[0].partitions[0].error_code == 0


async def test_describe_and_list_transactions(b: InProcessBroker) -> None:
    await coordinating_txn(b)
    described = await b.call(DescribeTransactionsRequest(transactional_ids=[TID]), 0, principal=ALICE)
    assert described.transaction_states[0].error_code == DENIED
    listed = await b.call(ListTransactionsRequest(state_filters=[], producer_id_filters=[]), 0, principal=ALICE)
    assert listed.error_code == 0 and listed.transaction_states == []
    await grant(b, acl("TRANSACTIONAL_ID", TID, "DESCRIBE"))
    described = await b.call(DescribeTransactionsRequest(transactional_ids=[TID]), 0, principal=BOB)
    state = described.transaction_states[0]
    assert (state.error_code, state.transaction_state) == (0, "Empty")
    listed = await b.call(ListTransactionsRequest(state_filters=[], producer_id_filters=[]), 0, principal=BOB)
    assert [t.transactional_id for t in listed.transaction_states] == [TID]
    # v2 (KIP-1152): the transactional-id pattern, matched against the whole id.
    kw = dict(state_filters=[], producer_id_filters=[], duration_filter=-1)
    listed = await b.call(ListTransactionsRequest(**kw, transactional_id_pattern="t."), 2, principal=BOB)
    assert [t.transactional_id for t in listed.transaction_states] == [TID]
    listed = await b.call(ListTransactionsRequest(**kw, transactional_id_pattern="t"), 2, principal=BOB)
    assert listed.transaction_states == []
    listed = await b.call(ListTransactionsRequest(**kw, transactional_id_pattern="(t"), 2, principal=BOB)
    assert listed.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
