"""Kafka's own kafka-acls (org.apache.kafka.tools.AclCommand 4.3.1) adds, lists and removes ACLs on Kelp over
CreateAcls/DescribeAcls/DeleteAcls, and is refused as Kafka refuses it without ALTER on the cluster.

The tools connect over PLAINTEXT, so they are User:ANONYMOUS: the broker names that principal in super.users
(as a Kafka cluster without authentication must for its own admin tools).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator

import pytest

from kelp import kafka_tools
from kelp.config.keys import KAFKA_STANDARD_AUTHORIZER
from tests.support.broker_process import BrokerProcess
from tests.tools.conftest import SETTINGS, Tools

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

ACLS = "org.apache.kafka.tools.AclCommand"


def listed(run_stdout: str) -> set[tuple[str, str, str, str, str, str]]:
    """(resource type, name, pattern type, principal, operation, permission) of kafka-acls --list's answer."""
    out = set()
    resource = None
    for line in run_stdout.splitlines():
        found = re.search(r"ResourcePattern\(resourceType=(\w+), name=(.*), patternType=(\w+)\)", line)
        if found:
            resource = found.groups()
            continue
        entry = re.search(r"\(principal=(.*), host=(.*), operation=(\w+), permissionType=(\w+)\)", line)
        if entry and resource is not None:
            out.add((*resource, entry.group(1), entry.group(3), entry.group(4)))
    return out


def _broker(tmp_path_factory: pytest.TempPathFactory, super_users: str) -> BrokerProcess:
    if shutil.which("java") is None:
        pytest.skip("java is not installed: Kafka's Java tools cannot run")
    kafka_tools.fetch()
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-acls-broker"), settings={
        **SETTINGS, "authorizer.class.name": KAFKA_STANDARD_AUTHORIZER, "super.users": super_users})
    bp.start()
    kafka_tools.ensure_archive(bp.bootstrap)
    return bp


@pytest.fixture(scope="module")
def acl_tools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tools]:
    bp = _broker(tmp_path_factory, "User:ANONYMOUS")
    yield Tools(bp.bootstrap)
    bp.kill()


def test_kafka_acls_add_list_remove(acl_tools: Tools) -> None:
    added = acl_tools.run_parallel(
        (ACLS, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe",
         "--topic", "orders"),
        (ACLS, "--add", "--deny-principal", "User:mallory", "--operation", "All", "--group", "app-",
         "--resource-pattern-type", "prefixed"),
        (ACLS, "--add", "--allow-principal", "User:bob", "--producer", "--topic", "orders", "--idempotent"))
    for run in added:
        run.ok()
    everything = listed(acl_tools.run(ACLS, "--list").ok().stdout)
    assert {("TOPIC", "orders", "LITERAL", "User:alice", "READ", "ALLOW"),
            ("TOPIC", "orders", "LITERAL", "User:alice", "DESCRIBE", "ALLOW"),
            ("GROUP", "app-", "PREFIXED", "User:mallory", "ALL", "DENY"),
            ("TOPIC", "orders", "LITERAL", "User:bob", "WRITE", "ALLOW"),
            ("CLUSTER", "kafka-cluster", "LITERAL", "User:bob", "IDEMPOTENT_WRITE", "ALLOW")} <= everything
    by_topic, by_principal = acl_tools.run_parallel((ACLS, "--list", "--topic", "orders"),
                                                    (ACLS, "--list", "--principal", "User:mallory"))
    assert {a[3] for a in listed(by_topic.ok().stdout)} == {"User:alice", "User:bob"}
    assert {(a[1], a[4]) for a in listed(by_principal.ok().stdout)} == {("app-", "ALL")}
    acl_tools.run(ACLS, "--remove", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders",
                  "--force").ok()
    after = listed(acl_tools.run(ACLS, "--list", "--topic", "orders").ok().stdout)
    assert ("TOPIC", "orders", "LITERAL", "User:alice", "READ", "ALLOW") not in after
    assert ("TOPIC", "orders", "LITERAL", "User:alice", "DESCRIBE", "ALLOW") in after


def test_kafka_acls_is_refused_without_alter_on_the_cluster(tmp_path_factory: pytest.TempPathFactory) -> None:
    bp = _broker(tmp_path_factory, "User:admin")  # the tool's User:ANONYMOUS holds nothing
    try:
        tools = Tools(bp.bootstrap)
        add, ls = tools.run_parallel(
            (ACLS, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders"),
            (ACLS, "--list"))
        assert add.returncode != 0 or "ClusterAuthorization" in add.stdout + add.stderr
        assert "ClusterAuthorizationException" in add.stdout + add.stderr
        assert "ClusterAuthorizationException" in ls.stdout + ls.stderr
    finally:
        bp.kill()
