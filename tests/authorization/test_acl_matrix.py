"""The ACL matrix: for every Kafka API the broker serves, a principal without the ACL Kafka requires gets
Kafka's error and learns nothing it may not describe (an existing topic it may not describe answers exactly
as a missing one); a principal holding exactly that ACL succeeds.

The matrix is split by API family: the data APIs in `test_acl_matrix_data.py`, the group APIs in
`test_acl_matrix_groups.py`, the administration APIs in `test_acl_matrix_admin.py`; the rules that cut across
them (super users, DENY and hosts, decisions following ACL changes) are here. `test_every_served_api_is_in_the_matrix`
keeps it complete: an API added to the registry without a row here fails it. Principals and requests: `matrix.py`.
"""

from __future__ import annotations

from kafka.protocol.admin import (
    DescribeLogDirsRequest,
)

from kelp.broker.kafka.handlers import all_handlers
from kelp.security.principal import KafkaPrincipal
from tests.authorization.harness import InProcessBroker
from tests.authorization.matrix import BOB, SECRET, TOPIC_DENIED, acl, grant, produce

# API key -> the test that covers it: test_<name> in one of the test_acl_matrix_*.py files, or the file named
COVERED = {
    0: "produce", 1: "fetch", 2: "list_offsets", 3: "metadata", 8: "offset_commit", 9: "offset_fetch",
    10: "find_coordinator", 11: "membership", 12: "membership", 13: "membership", 14: "membership",
    15: "describe_groups", 16: "list_groups", 18: "api_versions", 19: "create_topics", 20: "delete_topics",
    21: "delete_records", 22: "init_producer_id", 23: "offset_for_leader_epoch", 29: "test_acl_apis.py",
    30: "test_acl_apis.py", 31: "test_acl_apis.py", 32: "describe_configs", 33: "alter_configs",
    35: "describe_log_dirs", 37: "create_partitions", 42: "delete_groups", 43: "cluster_admin",
    44: "alter_configs", 45: "cluster_admin", 46: "cluster_admin", 47: "offset_delete",
    48: "scram_users", 50: "scram_users", 51: "scram_users", 27: "write_txn_markers",
    24: "test_acl_transactions.py", 25: "test_acl_transactions.py", 26: "test_acl_transactions.py",
    28: "test_acl_transactions.py", 65: "test_acl_transactions.py", 66: "test_acl_transactions.py",
    61: "test_acl_txn_tools.py", 49: "test_client_quotas.py", 68: "consumer_group", 69: "consumer_group",
    76: "share_group", 77: "share_group", 78: "share_group", 79: "share_group", 90: "share_group", 91: "share_group",
    92: "share_group",
    60: "tests/broker/test_describe_apis.py", 75: "tests/broker/test_describe_apis.py",
    # SaslHandshake, SaslAuthenticate: how a connection authenticates, before any principal exists; no ACL
    17: "-", 36: "-",
}


def test_every_served_api_is_in_the_matrix() -> None:
    assert {s.api_key for s in all_handlers()} == set(COVERED)


async def test_a_super_user_needs_no_acl(b: InProcessBroker) -> None:
    admin = KafkaPrincipal.user("admin")
    assert (await b.call(produce(SECRET), 9, principal=admin)).responses[0].partition_responses[0].error_code == 0
    assert (await b.call(DescribeLogDirsRequest(topics=None), 4, principal=admin)).error_code == 0


async def test_a_deny_beats_an_allow_and_a_host_acl_applies_only_from_that_host(b: InProcessBroker) -> None:
    await grant(b, acl("TOPIC", SECRET, "WRITE"), acl("TOPIC", "sec", "WRITE", pattern="PREFIXED"))
    deny = {**acl("TOPIC", SECRET, "WRITE"), "permission": "DENY", "host": "10.9.9.9"}
    await grant(b, deny)
    ok = await b.call(produce(SECRET), 9, principal=BOB, peer="10.1.1.1:5000")
    assert ok.responses[0].partition_responses[0].error_code == 0
    denied = await b.call(produce(SECRET), 9, principal=BOB, peer="10.9.9.9:5000")
    assert denied.responses[0].partition_responses[0].error_code == TOPIC_DENIED


async def test_produce_decisions_follow_acl_changes_at_once(b: InProcessBroker) -> None:
    """The produce path's decision cache never outlives the ACLs it read."""
    def code(answer: object) -> int:
        return answer.responses[0].partition_responses[0].error_code  # type: ignore[attr-defined]

    assert code(await b.call(produce(SECRET), 9, principal=BOB)) == TOPIC_DENIED
    await grant(b, acl("TOPIC", SECRET, "WRITE"))
    assert code(await b.call(produce(SECRET), 9, principal=BOB)) == 0
    await b.parts.acls.delete([{"principal": "User:bob"}])
    assert code(await b.call(produce(SECRET), 9, principal=BOB)) == TOPIC_DENIED
