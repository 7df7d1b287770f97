"""Kafka's ACL model: enum codes and names, bindings, filters and what CreateAcls/DeleteAcls refuse.

Codes are Kafka's (org.apache.kafka.common.resource.ResourceType, PatternType, acl.AclOperation,
AclPermissionType); filter matching is Kafka's ResourcePatternFilterTest case for case; validation follows
AclApis.handleCreateAcls and AclControlManager.validateNewAcl/validateFilter with their messages.
"""

from __future__ import annotations

import pytest

from kelp.errors import ErrorCode
from kelp.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    authorization_error,
    java_host_address,
    parse_super_users,
    supported_operations,
    validate_acl_binding,
    validate_acl_filter,
)

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED, MATCH, ANY = PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH, PatternType.ANY
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP


def test_wire_codes_are_kafkas() -> None:
    assert {t.name: int(t) for t in ResourceType} == {
        "UNKNOWN": 0, "ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5, "DELEGATION_TOKEN": 6,
        "USER": 7}
    assert {t.name: int(t) for t in PatternType} == {"UNKNOWN": 0, "ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
    assert {t.name: int(t) for t in AclOperation} == {
        "UNKNOWN": 0, "ANY": 1, "ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7, "DESCRIBE": 8,
        "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12, "CREATE_TOKENS": 13,
        "DESCRIBE_TOKENS": 14}
    assert {t.name: int(t) for t in AclPermissionType} == {"UNKNOWN": 0, "ANY": 1, "DENY": 2, "ALLOW": 3}


def test_unknown_codes_and_names_are_unknown() -> None:  # fromCode / SecurityUtils give UNKNOWN
    assert ResourceType.from_code(99) is ResourceType.UNKNOWN
    assert AclOperation.from_code(2) is AclOperation.ALL
    assert AclOperation.from_name("DescribeConfigs") is AclOperation.DESCRIBE_CONFIGS
    assert AclOperation.from_name("DESCRIBECONFIGS") is AclOperation.DESCRIBE_CONFIGS
    assert ResourceType.from_name("transactional_id") is ResourceType.TRANSACTIONAL_ID
    assert ResourceType.from_name("TransactionalId") is ResourceType.TRANSACTIONAL_ID
    assert AclPermissionType.from_name("nope") is AclPermissionType.UNKNOWN
    assert ResourceType.TRANSACTIONAL_ID.kafka_name == "TransactionalId" and ALLOW.kafka_name == "Allow"
    assert PatternType.LITERAL.is_specific and not PatternType.MATCH.is_specific


# ResourcePatternFilterTest: (filter type, filter name, filter pattern type, pattern, expected)
FILTER_CASES = [
    ("shouldNotMatchIfDifferentResourceType", (TOPIC, "Name", LITERAL), (GROUP, "Name", LITERAL), False),
    ("shouldNotMatchIfDifferentName", (TOPIC, "Different", PREFIXED), (TOPIC, "Name", PREFIXED), False),
    ("shouldNotMatchIfDifferentNameCase", (TOPIC, "NAME", LITERAL), (TOPIC, "Name", LITERAL), False),
    ("shouldNotMatchIfDifferentPatternType", (TOPIC, "Name", LITERAL), (TOPIC, "Name", PREFIXED), False),
    ("shouldMatchWhereResourceTypeIsAny", (ResourceType.ANY, "Name", PREFIXED), (TOPIC, "Name", PREFIXED), True),
    ("shouldMatchWhereResourceNameIsAny", (TOPIC, None, PREFIXED), (TOPIC, "Name", PREFIXED), True),
    ("shouldMatchWherePatternTypeIsAny", (TOPIC, None, ANY), (TOPIC, "Name", PREFIXED), True),
    ("shouldMatchWherePatternTypeIsMatch", (TOPIC, None, MATCH), (TOPIC, "Name", PREFIXED), True),
    ("shouldMatchLiteralIfExactMatch", (TOPIC, "Name", LITERAL), (TOPIC, "Name", LITERAL), True),
    ("shouldMatchLiteralIfNameMatchesAndFilterIsOnPatternTypeAny", (TOPIC, "Name", ANY), (TOPIC, "Name", LITERAL),
     True),
    ("shouldMatchLiteralIfNameMatchesAndFilterIsOnPatternTypeMatch", (TOPIC, "Name", MATCH), (TOPIC, "Name", LITERAL),
     True),
    ("shouldNotMatchLiteralIfNamePrefixed", (TOPIC, "Name-something", MATCH), (TOPIC, "Name", LITERAL), False),
    ("shouldMatchLiteralWildcardIfExactMatch", (TOPIC, "*", LITERAL), (TOPIC, "*", LITERAL), True),
    ("shouldNotMatchLiteralWildcardAgainstOtherName", (TOPIC, "Name", LITERAL), (TOPIC, "*", LITERAL), False),
    ("shouldNotMatchLiteralWildcardTheWayAround", (TOPIC, "*", LITERAL), (TOPIC, "Name", LITERAL), False),
    ("shouldNotMatchLiteralWildcardIfFilterHasPatternTypeOfAny", (TOPIC, "Name", ANY), (TOPIC, "*", LITERAL), False),
    ("shouldMatchLiteralWildcardIfFilterHasPatternTypeOfMatch", (TOPIC, "Name", MATCH), (TOPIC, "*", LITERAL), True),
    ("shouldMatchPrefixedIfExactMatch", (TOPIC, "Name", PREFIXED), (TOPIC, "Name", PREFIXED), True),
    ("shouldNotMatchIfBothPrefixedAndFilterIsPrefixOfResource", (TOPIC, "Name", PREFIXED),
     (TOPIC, "Name-something", PREFIXED), False),
    ("shouldNotMatchIfBothPrefixedAndResourceIsPrefixOfFilter", (TOPIC, "Name-something", PREFIXED),
     (TOPIC, "Name", PREFIXED), False),
    ("shouldNotMatchPrefixedIfNamePrefixedAnyFilterTypeIsAny", (TOPIC, "Name-something", ANY),
     (TOPIC, "Name", PREFIXED), False),
    ("shouldMatchPrefixedIfNamePrefixedAnyFilterTypeIsMatch", (TOPIC, "Name-something", MATCH),
     (TOPIC, "Name", PREFIXED), True),
]


@pytest.mark.parametrize(("case", "filter_args", "pattern_args", "expected"), FILTER_CASES,
                         ids=[c[0] for c in FILTER_CASES])
def test_resource_pattern_filter(case: str, filter_args: tuple, pattern_args: tuple, expected: bool) -> None:
    assert ResourcePatternFilter(*filter_args).matches(ResourcePattern(*pattern_args)) is expected


def test_unknown_filters() -> None:  # shouldBeUnknownIfResourceTypeUnknown / ...PatternTypeUnknown
    assert ResourcePatternFilter(ResourceType.UNKNOWN, None, LITERAL).is_unknown
    assert ResourcePatternFilter(GROUP, None, PatternType.UNKNOWN).is_unknown


def _binding(name: str = "foo", pattern_type: PatternType = LITERAL, resource_type: ResourceType = TOPIC,
             principal: str = "User:alice", host: str = "*", operation: AclOperation = AclOperation.READ,
             permission: AclPermissionType = ALLOW) -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, pattern_type),
                      AccessControlEntry(principal, host, operation, permission))


def test_entry_filter_matches_exact_fields() -> None:
    entry = _binding().entry
    assert AccessControlEntryFilter(None, None, AclOperation.ANY, AclPermissionType.ANY).matches(entry)
    assert AccessControlEntryFilter("User:alice", "*", AclOperation.READ, ALLOW).matches(entry)
    assert not AccessControlEntryFilter("User:*", None, AclOperation.ANY, AclPermissionType.ANY).matches(entry)
    assert not AccessControlEntryFilter(None, "10.0.0.1", AclOperation.ANY, AclPermissionType.ANY).matches(entry)
    assert not AccessControlEntryFilter(None, None, AclOperation.ALL, AclPermissionType.ANY).matches(entry)


def test_binding_filters_and_indefinite_fields() -> None:
    binding = _binding()
    assert binding.to_filter().matches(binding) and binding.to_filter().matches_at_most_one()
    any_name = AclBindingFilter(ResourcePatternFilter(TOPIC, None, LITERAL), binding.entry.to_filter())
    assert any_name.find_indefinite_field() == "Resource name is NULL."
    assert str(binding) == ("(pattern=ResourcePattern(resourceType=TOPIC, name=foo, patternType=LITERAL), "
                            "entry=(principal=User:alice, host=*, operation=READ, permissionType=ALLOW))")
    assert AclBinding.from_record(binding.to_record()) == binding


@pytest.mark.parametrize("make", [
    lambda: ResourcePattern(ResourceType.ANY, "x", LITERAL),
    lambda: ResourcePattern(TOPIC, "x", MATCH),
    lambda: ResourcePattern(TOPIC, "x", ANY),
    lambda: AccessControlEntry("User:a", "*", AclOperation.ANY, ALLOW),
    lambda: AccessControlEntry("User:a", "*", AclOperation.READ, AclPermissionType.ANY),
])
def test_a_binding_never_holds_filter_values(make: object) -> None:  # ResourcePattern/AccessControlEntry constructors
    with pytest.raises(InvalidAclError, match="must not be"):
        make()  # type: ignore[operator]


@pytest.mark.parametrize(("binding", "message"), [
    (_binding(resource_type=ResourceType.CLUSTER, name="my-cluster"),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (_binding(name=""), "Invalid empty resource name"),
    (_binding(resource_type=ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
    (_binding(pattern_type=PatternType.UNKNOWN), "Invalid patternType UNKNOWN"),
    (_binding(operation=AclOperation.UNKNOWN), "Invalid operation UNKNOWN"),
    (_binding(permission=AclPermissionType.UNKNOWN), "Invalid permissionType UNKNOWN"),
    (_binding(principal="alice"), "Could not parse principal from `alice`"),
])
def test_create_acls_refusals(binding: AclBinding, message: str) -> None:
    with pytest.raises(InvalidAclError, match=message) as raised:
        validate_acl_binding(binding)
    assert raised.value.code == ErrorCode.INVALID_REQUEST


def test_create_acls_accepts_what_kafka_accepts() -> None:
    validate_acl_binding(_binding(resource_type=ResourceType.CLUSTER, name="kafka-cluster",
                                  operation=AclOperation.IDEMPOTENT_WRITE))
    validate_acl_binding(_binding(name="*", pattern_type=PREFIXED))  # Kafka accepts it: names starting with "*"
    validate_acl_binding(_binding(principal="Group:ops"))             # any principal type


def test_delete_filters_with_unknown_elements_are_refused() -> None:  # AclControlManager.validateFilter
    entry_any = AccessControlEntryFilter(None, None, AclOperation.ANY, AclPermissionType.ANY)
    with pytest.raises(InvalidAclError, match="Unknown patternFilter."):
        validate_acl_filter(AclBindingFilter(ResourcePatternFilter(ResourceType.UNKNOWN, None, ANY), entry_any))
    with pytest.raises(InvalidAclError, match="Unknown entryFilter."):
        validate_acl_filter(AclBindingFilter(ResourcePatternFilter(TOPIC, None, ANY), AccessControlEntryFilter(
            None, None, AclOperation.UNKNOWN, AclPermissionType.ANY)))


def test_supported_operations_and_errors_per_type() -> None:  # AclEntry.supportedOperations / authorizationError
    assert supported_operations(ResourceType.TRANSACTIONAL_ID) == {AclOperation.DESCRIBE, AclOperation.WRITE}
    assert AclOperation.IDEMPOTENT_WRITE in supported_operations(ResourceType.CLUSTER)
    assert authorization_error(TOPIC) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert authorization_error(GROUP) == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert authorization_error(ResourceType.CLUSTER) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert authorization_error(ResourceType.TRANSACTIONAL_ID) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    with pytest.raises(InvalidAclError):
        supported_operations(ResourceType.ANY)


def test_super_users_config() -> None:  # StandardAuthorizerTest.testGetConfiguredSuperUsers
    assert parse_super_users(None) == set() and parse_super_users(" ") == set()
    assert parse_super_users("User:bob;User:alice ") == {"User:bob", "User:alice"}
    assert parse_super_users(";  User:bob  ;  User:alice ") == {"User:bob", "User:alice"}
    with pytest.raises(Exception, match="expected a string in format principalType:principalName but got bob"):
        parse_super_users("bob;:alice")


@pytest.mark.parametrize(("address", "java"), [
    ("127.0.0.1", "127.0.0.1"),
    ("::1", "0:0:0:0:0:0:0:1"),
    ("2001:db8::ff00:42:8329", "2001:db8:0:0:0:ff00:42:8329"),
    ("::ffff:10.1.2.3", "10.1.2.3"),
    ("fe80::1%eth0", "fe80:0:0:0:0:0:0:1%eth0"),
])
def test_host_addresses_as_java_renders_them(address: str, java: str) -> None:
    assert java_host_address(address) == java
