"""CreateAcls, DescribeAcls, DeleteAcls over the Kafka protocol, as kafka-acls sends them: Kafka's
permissions (ALTER/DESCRIBE on the cluster), validation and error codes, and the change visible at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.protocol.admin import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest

from kelp.errors import ErrorCode
from kelp.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from kelp.security.principal import KafkaPrincipal
from tests.authorization.harness import ADMIN, InProcessBroker

ALICE = KafkaPrincipal.user("alice")
C = CreateAclsRequest.AclCreation
F = DeleteAclsRequest.DeleteAclsFilter
ANY = 1


def creation(name: str = "orders", *, rtype: int = ResourceType.TOPIC, pattern: int = PatternType.LITERAL,
             principal: str = "User:alice", host: str = "*", op: int = AclOperation.READ,
             permission: int = AclPermissionType.ALLOW) -> C:
    return C(resource_type=rtype, resource_name=name, resource_pattern_type=pattern, principal=principal, host=host,
             operation=op, permission_type=permission)


def describe_all(**kw: object) -> DescribeAclsRequest:
    fields: dict[str, object] = dict(resource_type_filter=ANY, resource_name_filter=None, pattern_type_filter=ANY,
                                     principal_filter=None, host_filter=None, operation=ANY, permission_type=ANY)
    fields.update(kw)
    return DescribeAclsRequest(**fields)


def delete_filter(**kw: object) -> F:
    fields: dict[str, object] = dict(resource_type_filter=ANY, resource_name_filter=None, pattern_type_filter=ANY,
                                     principal_filter=None, host_filter=None, operation=ANY, permission_type=ANY)
    fields.update(kw)
    return F(**fields)


@pytest.fixture
async def broker(tmp_path: Path):
    async with InProcessBroker(tmp_path) as b:
        yield b


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_create_describe_delete_round_trip(broker: InProcessBroker, version: int) -> None:
    created = await broker.call(CreateAclsRequest(creations=[
        creation(), creation("pay-", pattern=PatternType.PREFIXED, op=AclOperation.WRITE),
        creation("kafka-cluster", rtype=ResourceType.CLUSTER, op=AclOperation.DESCRIBE, principal="User:bob")]),
        version)
    assert [r.error_code for r in created.results] == [0, 0, 0]
    described = await broker.call(describe_all(), version)
    assert described.error_code == 0
    seen = {(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.operation)
            for r in described.resources for a in r.acls}
    assert seen == {(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", AclOperation.READ),
                    (ResourceType.TOPIC, "pay-", PatternType.PREFIXED, "User:alice", AclOperation.WRITE),
                    (ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:bob", AclOperation.DESCRIBE)}
    # MATCH: every ACL that applies to a literal name (kafka-acls --list --topic pay-1 --resource-pattern-type match)
    matched = await broker.call(describe_all(resource_type_filter=ResourceType.TOPIC, resource_name_filter="pay-1",
                                             pattern_type_filter=PatternType.MATCH), version)
    assert [(r.resource_name, r.pattern_type) for r in matched.resources] == [("pay-", PatternType.PREFIXED)]
    deleted = await broker.call(DeleteAclsRequest(filters=[delete_filter(principal_filter="User:alice")]), version)
    result = deleted.filter_results[0]
    assert result.error_code == 0
    assert sorted(m.resource_name for m in result.matching_acls) == ["orders", "pay-"]
    after = await broker.call(describe_all(), version)
    assert [r.resource_name for r in after.resources] == ["kafka-cluster"]


async def test_acls_take_effect_on_the_next_decision(broker: InProcessBroker) -> None:
    acls = broker.parts.acls
    assert not acls.authorize(ALICE, "10.1.2.3", AclOperation.READ, ResourceType.TOPIC, "orders")
    await broker.call(CreateAclsRequest(creations=[creation()]), 3)
    assert acls.authorize(ALICE, "10.1.2.3", AclOperation.READ, ResourceType.TOPIC, "orders")
    await broker.call(DeleteAclsRequest(filters=[delete_filter(resource_name_filter="orders")]), 3)
    assert not acls.authorize(ALICE, "10.1.2.3", AclOperation.READ, ResourceType.TOPIC, "orders")


async def test_creating_acls_is_refused_per_binding_with_kafkas_messages(broker: InProcessBroker) -> None:
    answer = await broker.call(CreateAclsRequest(creations=[
        creation("other", rtype=ResourceType.CLUSTER, op=AclOperation.ALTER),
        creation(""),
        creation(principal="alice"),
        creation("fine"),
    ]), 3)
    assert [(r.error_code, r.error_message) for r in answer.results] == [
        (ErrorCode.INVALID_REQUEST, "The only valid name for the CLUSTER resource is kafka-cluster"),
        (ErrorCode.INVALID_REQUEST, "Invalid empty resource name"),
        (ErrorCode.INVALID_REQUEST, "Could not parse principal from `alice` (no colon is present separating the "
                                    "principal type from the principal name)"),
        (ErrorCode.NONE, None)]
    unknown = await broker.call(CreateAclsRequest(creations=[creation(op=AclOperation.UNKNOWN), creation("x")]), 3)
    assert [r.error_code for r in unknown.results] == [ErrorCode.INVALID_REQUEST] * 2


async def test_a_delete_filter_with_unknown_parts_is_refused_alone(broker: InProcessBroker) -> None:
    await broker.call(CreateAclsRequest(creations=[creation()]), 3)
    answer = await broker.call(DeleteAclsRequest(filters=[delete_filter(resource_type_filter=0),
                                                          delete_filter(resource_name_filter="orders")]), 3)
    bad, good = answer.filter_results
    assert (bad.error_code, bad.error_message) == (ErrorCode.INVALID_REQUEST, "Unknown patternFilter.")
    assert [m.resource_name for m in good.matching_acls] == ["orders"]


async def test_acl_apis_need_describe_and_alter_on_the_cluster(broker: InProcessBroker) -> None:
    created = await broker.call(CreateAclsRequest(creations=[creation(), creation("x")]), 3, principal=ALICE)
    assert [r.error_code for r in created.results] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 2
    described = await broker.call(describe_all(), 3, principal=ALICE)
    assert described.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and described.resources == []
    deleted = await broker.call(DeleteAclsRequest(filters=[delete_filter()]), 3, principal=ALICE)
    assert [r.error_code for r in deleted.filter_results] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    # DESCRIBE on the cluster lists them; it does not let alice change them
    await broker.call(CreateAclsRequest(creations=[creation("kafka-cluster", rtype=ResourceType.CLUSTER,
                                                            op=AclOperation.DESCRIBE)]), 3, principal=ADMIN)
    assert (await broker.call(describe_all(), 3, principal=ALICE)).error_code == 0
    again = await broker.call(CreateAclsRequest(creations=[creation()]), 3, principal=ALICE)
    assert again.results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    # ALTER on the cluster (which implies DESCRIBE) lets her
    await broker.call(CreateAclsRequest(creations=[creation("kafka-cluster", rtype=ResourceType.CLUSTER,
                                                            op=AclOperation.ALTER)]), 3, principal=ADMIN)
    assert (await broker.call(CreateAclsRequest(creations=[creation()]), 3, principal=ALICE)).results[0].error_code == 0


async def test_without_an_authorizer_the_acl_apis_say_security_is_disabled(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path, **{"authorizer.class.name": ""}) as broker:
        created = await broker.call(CreateAclsRequest(creations=[creation()]), 3)
        assert created.results[0].error_code == ErrorCode.SECURITY_DISABLED
        described = await broker.call(describe_all(), 3)
        assert described.error_code == ErrorCode.SECURITY_DISABLED
        deleted = await broker.call(DeleteAclsRequest(filters=[delete_filter()]), 3)
        assert deleted.filter_results[0].error_code == ErrorCode.SECURITY_DISABLED
