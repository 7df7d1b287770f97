"""The ACL matrix's shared parts: its principals, the ACL it grants, and the requests several families send.

Why a module of its own: the matrix is split by API family (`test_acl_matrix_data.py`, `_groups.py`, `_admin.py`,
and the rules that cut across them in `test_acl_matrix.py`), and other tests drive the same requests
(`test_acl_versions.py`, `test_acl_transactions.py`, tests/broker, tests/security). The broker they all run
against is the `b` fixture of this folder's `conftest.py`. Principals: `alice` holds no ACL; `bob` is granted, per
test, the one Kafka names; `broker` is the inter-broker principal with CLUSTER_ACTION; `admin` is a super user.
"""

from __future__ import annotations

import asyncio

from kafka.protocol.consumer import (
    FetchRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import ProduceRequest

from kelp.errors import ErrorCode
from kelp.records.build import build_batch
from kelp.security.principal import KafkaPrincipal
from tests.authorization.harness import InProcessBroker

ALICE = KafkaPrincipal.user("alice")
BOB = KafkaPrincipal.user("bob")
BROKER = KafkaPrincipal.user("broker")
SECRET, GHOST, GROUP = "secret", "ghost", "g1"
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
UNKNOWN_TOPIC_ID = ErrorCode.UNKNOWN_TOPIC_ID
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def acl(rtype: str, name: str, op: str, principal: KafkaPrincipal = BOB, pattern: str = "LITERAL") -> dict:
    return {"resourceType": rtype, "resourceName": name, "patternType": pattern, "principal": str(principal),
            "host": "*", "operation": op, "permission": "ALLOW"}


async def coordinating(b: InProcessBroker) -> None:
    """Until this broker coordinates GROUP: its offsets topic is created on first FindCoordinator, then loaded."""
    for _ in range(200):
        found = await b.call(FindCoordinatorRequest(key_type=0, coordinator_keys=[GROUP]), 4)
        if found.coordinators[0].error_code == 0 and b.parts.groups.check_group(GROUP) == 0:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"broker never became the coordinator of {GROUP}")


async def grant(b: InProcessBroker, *acls: dict) -> None:
    answer = await b.parts.acls.create(list(acls))
    assert answer["results"] == [None] * len(acls)


def without_name(obj: object) -> str:
    """A response part as text, its topic name blanked: what a principal learns besides the name it asked."""
    return repr(obj).replace(f"'{SECRET}'", "'?'").replace(f"'{GHOST}'", "'?'")


def produce(*topics: str, transactional: bool = False) -> ProduceRequest:
    T = ProduceRequest.TopicProduceData
    batch = build_batch([(b"k", b"v")], is_transactional=transactional, producer_id=1 if transactional else -1,
                        producer_epoch=0 if transactional else -1, base_sequence=0 if transactional else -1)
    return ProduceRequest(transactional_id="tx" if transactional else None, acks=1, timeout_ms=5000, topic_data=[
        T(name=t, partition_data=[T.PartitionProduceData(index=0, records=batch)]) for t in topics])


def fetch(*topics: str, replica_id: int = -1) -> FetchRequest:
    T = FetchRequest.FetchTopic
    return FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[
                            T(topic=t, partitions=[T.FetchPartition(partition=0, current_leader_epoch=-1,
                                                                    fetch_offset=0, last_fetched_epoch=-1,
                                                                    log_start_offset=-1, partition_max_bytes=1 << 20)])
                            for t in topics])


def join(member_id: str = "") -> JoinGroupRequest:
    P = JoinGroupRequest.JoinGroupRequestProtocol
    return JoinGroupRequest(group_id=GROUP, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id=member_id,
                            group_instance_id=None, protocol_type="consumer", protocols=[P(name="range", metadata=b"")])


def commit(*topics: str) -> OffsetCommitRequest:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", topics=[
        T(name=t, partitions=[T.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                              committed_leader_epoch=-1, committed_metadata="")])
        for t in topics])
