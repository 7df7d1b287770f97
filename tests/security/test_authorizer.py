"""Authorizer decisions as Kafka's StandardAuthorizer takes them, the index and cache, CreateAcls/DeleteAcls.

The first tests port StandardAuthorizerTest (metadata/src/test/java/org/apache/kafka/metadata/authorizer/
StandardAuthorizerTest.java) case for case, naming each; then matrices of the rules in
StandardAuthorizerData.findResult (deny beats allow, implications only for ALLOW, prefix vs literal vs
wildcard, hosts, super users, the no-ACL default), Authorizer.authorizeByResourceType, and the cache.
"""

from __future__ import annotations

import time

import pytest

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
)
from kelp.security.authorizer import Authorizer
from kelp.security.principal import KafkaPrincipal

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
Op = AclOperation
LOCALHOST = "127.0.0.1"


def acl(resource_type: ResourceType, name: str, pattern: PatternType, principal: str, host: str, op: AclOperation,
        permission: AclPermissionType) -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, pattern),
                      AccessControlEntry(principal, host, op, permission))


def authorizer(*bindings: AclBinding, super_users: tuple[str, ...] = ("User:superman",),
               allow_everyone: bool = False) -> Authorizer:
    result = Authorizer(super_users=super_users, allow_everyone_if_no_acl_found=allow_everyone)
    for binding in bindings:
        result.add_acl(binding)
    return result


def user(name: str) -> KafkaPrincipal:
    return KafkaPrincipal.user(name)


def decide(auth: Authorizer, who: str, actions: list[tuple[AclOperation, ResourceType, str]],
           host: str = LOCALHOST) -> list[bool]:
    return [auth.authorize(user(who), host, op, rt, name) for op, rt, name in actions]


def foo_acl(op: AclOperation, permission: AclPermissionType) -> AclBinding:  # newFooAcl
    return acl(TOPIC, "foo_", PREFIXED, "User:bob", "*", op, permission)


def bar_acl(op: AclOperation, permission: AclPermissionType) -> AclBinding:  # newBarAcl
    return acl(GROUP, "bar", LITERAL, "User:*", "*", op, permission)


# --- StandardAuthorizerTest -------------------------------------------------------------------------------

def test_allow_everyone_if_no_acl_found_enabled() -> None:
    auth = authorizer(acl(TOPIC, "topic1", LITERAL, "User:Alice", "*", Op.READ, ALLOW),
                      super_users=("User:alice", "User:chris"), allow_everyone=True)
    assert decide(auth, "Bob", [(Op.READ, TOPIC, "topic1"), (Op.READ, TOPIC, "topic2")]) == [False, True]


def test_allow_everyone_if_no_acl_found_disabled() -> None:
    auth = authorizer(acl(TOPIC, "topic1", LITERAL, "User:Alice", "*", Op.READ, ALLOW),
                      super_users=("User:alice", "User:chris"))
    assert decide(auth, "Bob", [(Op.READ, TOPIC, "topic1"), (Op.READ, TOPIC, "topic2")]) == [False, False]


def test_configure() -> None:  # testConfigure / testGetDefaultResult
    auth = Authorizer.from_config({"super.users": "User:alice;User:chris", "allow.everyone.if.no.acl.found": "true"})
    assert auth.super_users == {"User:alice", "User:chris"}
    assert auth.authorize(user("x"), LOCALHOST, Op.READ, TOPIC, "t")
    assert not Authorizer.from_config({}).authorize(user("x"), LOCALHOST, Op.READ, TOPIC, "t")
    assert not Authorizer.from_config({"allow.everyone.if.no.acl.found": "yes"}).authorize(
        user("x"), LOCALHOST, Op.READ, TOPIC, "t")  # Boolean.parseBoolean: only "true"


def test_find_result_implication() -> None:
    def one(binding: AclBinding, op: AclOperation) -> bool:
        return authorizer(binding).authorize(user("bob"), LOCALHOST, op, TOPIC, "foo_bar")

    for op in (Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):  # these imply DESCRIBE
        assert one(foo_acl(op, ALLOW), Op.DESCRIBE)
    assert not one(foo_acl(Op.CREATE, ALLOW), Op.DESCRIBE)  # CREATE does not
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):  # DENY ACLs don't do "implication"
        auth = authorizer(foo_acl(op, DENY), foo_acl(Op.DESCRIBE, ALLOW))
        assert auth.authorize(user("bob"), LOCALHOST, Op.DESCRIBE, TOPIC, "foo_bar")
    assert not one(foo_acl(Op.DESCRIBE, DENY), Op.DESCRIBE)  # exact match
    for op in (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS):  # these imply DESCRIBE_CONFIGS
        assert one(foo_acl(op, ALLOW), Op.DESCRIBE_CONFIGS)
    auth = authorizer(foo_acl(Op.ALTER_CONFIGS, DENY), foo_acl(Op.DESCRIBE_CONFIGS, ALLOW))
    assert auth.authorize(user("bob"), LOCALHOST, Op.DESCRIBE_CONFIGS, TOPIC, "foo_bar")
    assert not one(foo_acl(Op.ALTER_CONFIGS, DENY), Op.ALTER_CONFIGS)


def test_find_result_principal_matching() -> None:
    assert authorizer(foo_acl(Op.READ, ALLOW)).authorize(user("bob"), LOCALHOST, Op.READ, TOPIC, "foo_bar")
    assert not authorizer(foo_acl(Op.READ, ALLOW)).authorize(user("alice"), LOCALHOST, Op.READ, TOPIC, "foo_bar")
    auth = authorizer(bar_acl(Op.READ, DENY), bar_acl(Op.READ, ALLOW))  # the wildcard principal matches anyone
    assert not auth.authorize(user("alice"), LOCALHOST, Op.READ, GROUP, "bar")


def test_list_acls() -> None:
    foo = [foo_acl(Op.READ, ALLOW), foo_acl(Op.WRITE, ALLOW)]
    bar = [bar_acl(Op.DESCRIBE_CONFIGS, DENY), bar_acl(Op.ALTER_CONFIGS, DENY)]
    auth = authorizer(*foo, *bar)
    assert auth.acls() == [*foo, *bar]
    auth.remove_acl(foo[1])
    assert auth.acls() == [foo[0], *bar]
    topics = AclBindingFilter(ResourcePatternFilter(TOPIC, None, PatternType.ANY),
                              AccessControlEntryFilter(None, None, Op.ANY, AclPermissionType.ANY))
    assert auth.acls(topics) == [foo[0]]


def test_simple_authorizations() -> None:
    auth = authorizer(foo_acl(Op.READ, ALLOW), foo_acl(Op.WRITE, ALLOW), bar_acl(Op.DESCRIBE_CONFIGS, ALLOW),
                      bar_acl(Op.ALTER_CONFIGS, ALLOW))
    assert decide(auth, "bob", [(Op.READ, TOPIC, "foo_")]) == [True]
    assert decide(auth, "fred", [(Op.ALTER_CONFIGS, GROUP, "bar")]) == [True]


def test_deny_precedence_with_operation_all() -> None:
    auth = authorizer(acl(TOPIC, "foo", LITERAL, "User:alice", "*", Op.ALL, DENY),
                      acl(TOPIC, "foo", PREFIXED, "User:alice", "*", Op.READ, ALLOW),
                      acl(TOPIC, "foo", LITERAL, "User:*", "*", Op.ALL, DENY),
                      acl(TOPIC, "foo", PREFIXED, "User:*", "*", Op.DESCRIBE, ALLOW))
    assert decide(auth, "alice", [(Op.WRITE, TOPIC, "foo"), (Op.READ, TOPIC, "foo"), (Op.DESCRIBE, TOPIC, "foo"),
                                  (Op.READ, TOPIC, "foobar")]) == [False, False, False, True]
    assert decide(auth, "bob", [(Op.DESCRIBE, TOPIC, "foo"), (Op.READ, TOPIC, "foo"), (Op.WRITE, TOPIC, "foo"),
                                (Op.DESCRIBE, TOPIC, "foobaz"), (Op.READ, TOPIC, "foobaz")]) == [
        False, False, False, True, False]


def test_topic_acl_with_operation_all() -> None:
    auth = authorizer(acl(TOPIC, "foo", LITERAL, "User:*", "*", Op.ALL, ALLOW),
                      acl(TOPIC, "bar", PREFIXED, "User:alice", "*", Op.ALL, ALLOW),
                      acl(TOPIC, "baz", LITERAL, "User:bob", "*", Op.ALL, ALLOW))
    assert decide(auth, "alice", [(Op.WRITE, TOPIC, "foo"), (Op.DESCRIBE_CONFIGS, TOPIC, "bar"),
                                  (Op.DESCRIBE, TOPIC, "baz")]) == [True, True, False]
    assert decide(auth, "bob", [(Op.WRITE, TOPIC, "foo"), (Op.READ, TOPIC, "bar"),
                                (Op.DESCRIBE, TOPIC, "baz")]) == [True, False, True]
    assert decide(auth, "malory", [(Op.DESCRIBE, TOPIC, "foo"), (Op.WRITE, TOPIC, "bar"),
                                   (Op.READ, TOPIC, "baz")]) == [True, False, False]


def test_host_address_acl_validation() -> None:
    host1, host2, local = "192.168.1.1", "192.168.1.2", LOCALHOST
    auth = authorizer(acl(TOPIC, "foo", LITERAL, "User:alice", host1, Op.READ, DENY),
                      acl(TOPIC, "foo", LITERAL, "User:alice", "*", Op.READ, ALLOW),
                      acl(TOPIC, "bar", LITERAL, "User:bob", host2, Op.READ, ALLOW),
                      acl(TOPIC, "bar", LITERAL, "User:*", local, Op.DESCRIBE, ALLOW))
    actions = [(Op.READ, TOPIC, "foo"), (Op.READ, TOPIC, "bar"), (Op.DESCRIBE, TOPIC, "bar")]
    assert decide(auth, "alice", actions, local) == [True, False, True]
    assert decide(auth, "alice", actions, host1) == [False, False, False]
    assert decide(auth, "alice", actions, host2) == [True, False, False]
    assert decide(auth, "bob", actions, local) == [False, False, True]
    assert decide(auth, "bob", actions, host1) == [False, False, False]
    assert decide(auth, "bob", actions, host2) == [False, True, True]


def _many_acls() -> Authorizer:  # addManyAcls
    return authorizer(acl(TOPIC, "green2", LITERAL, "User:*", "*", Op.READ, ALLOW),
                      acl(TOPIC, "green", PREFIXED, "User:bob", "*", Op.READ, ALLOW),
                      acl(TOPIC, "betamax4", LITERAL, "User:bob", "*", Op.READ, ALLOW),
                      acl(TOPIC, "betamax", LITERAL, "User:bob", "*", Op.READ, ALLOW),
                      acl(TOPIC, "beta", PREFIXED, "User:*", "*", Op.READ, ALLOW),
                      acl(TOPIC, "alpha", PREFIXED, "User:*", "*", Op.READ, ALLOW),
                      acl(TOPIC, "alp", PREFIXED, "User:bob", "*", Op.READ, DENY),
                      acl(GROUP, "*", LITERAL, "User:bob", "*", Op.WRITE, ALLOW),
                      acl(GROUP, "wheel", LITERAL, "User:*", "*", Op.WRITE, DENY))


def test_authorization_with_many_acls() -> None:
    auth = _many_acls()
    assert decide(auth, "bob", [(Op.READ, TOPIC, "green1"), (Op.WRITE, GROUP, "wheel")]) == [True, False]
    assert decide(auth, "bob", [(Op.READ, TOPIC, "alpha"), (Op.WRITE, GROUP, "arbitrary"),
                                (Op.READ, TOPIC, "ala")]) == [False, True, False]


def test_prefix_acls() -> None:
    auth = authorizer(acl(TOPIC, "fooa", PREFIXED, "User:alice", "*", Op.ALL, ALLOW),
                      acl(TOPIC, "foobar", LITERAL, "User:bob", "*", Op.ALL, ALLOW),
                      acl(TOPIC, "f", PREFIXED, "User:bob", "*", Op.ALL, ALLOW))
    assert decide(auth, "bob", [(Op.WRITE, TOPIC, "foobarr"), (Op.READ, TOPIC, "goobar"),
                                (Op.READ, TOPIC, "fooa")]) == [True, False, True]
    assert decide(auth, "alice", [(Op.DESCRIBE, TOPIC, "fooa"), (Op.WRITE, TOPIC, "bar"),
                                  (Op.READ, TOPIC, "baz")]) == [True, False, False]


# --- matrices ---------------------------------------------------------------------------------------------

def test_super_users_beat_deny_acls() -> None:
    auth = authorizer(acl(TOPIC, "*", LITERAL, "User:*", "*", Op.ALL, DENY))
    assert auth.authorize(user("superman"), LOCALHOST, Op.DELETE, TOPIC, "t")
    assert not auth.authorize(user("clark"), LOCALHOST, Op.DESCRIBE, TOPIC, "t")
    assert not auth.authorize(KafkaPrincipal("Group", "superman"), LOCALHOST, Op.READ, TOPIC, "t")  # type and name


@pytest.mark.parametrize(("acl_op", "action", "allowed"), [
    (Op.READ, Op.READ, True), (Op.READ, Op.WRITE, False), (Op.READ, Op.DESCRIBE, True),
    (Op.WRITE, Op.DESCRIBE, True), (Op.DELETE, Op.DESCRIBE, True), (Op.ALTER, Op.DESCRIBE, True),
    (Op.CREATE, Op.DESCRIBE, False), (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, True),
    (Op.ALTER_CONFIGS, Op.DESCRIBE, False), (Op.DESCRIBE, Op.READ, False),
    (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, False),
    (Op.ALL, Op.READ, True), (Op.ALL, Op.CLUSTER_ACTION, True), (Op.ALL, Op.IDEMPOTENT_WRITE, True),
    (Op.IDEMPOTENT_WRITE, Op.WRITE, False),
])
def test_operation_matrix_for_allow(acl_op: AclOperation, action: AclOperation, allowed: bool) -> None:
    auth = authorizer(acl(TOPIC, "t", LITERAL, "User:alice", "*", acl_op, ALLOW))
    assert auth.authorize(user("alice"), LOCALHOST, action, TOPIC, "t") is allowed


@pytest.mark.parametrize(("deny_op", "action", "denied"), [
    (Op.READ, Op.READ, True), (Op.READ, Op.DESCRIBE, False), (Op.ALL, Op.DESCRIBE, True),
    (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, False), (Op.WRITE, Op.READ, False),
])
def test_deny_beats_allow_and_implies_nothing(deny_op: AclOperation, action: AclOperation, denied: bool) -> None:
    auth = authorizer(acl(TOPIC, "t", LITERAL, "User:alice", "*", Op.ALL, ALLOW),
                      acl(TOPIC, "t", LITERAL, "User:alice", "*", deny_op, DENY))
    assert auth.authorize(user("alice"), LOCALHOST, action, TOPIC, "t") is not denied


@pytest.mark.parametrize(("pattern", "pattern_type", "resource", "matches"), [
    ("orders", LITERAL, "orders", True), ("orders", LITERAL, "orders-eu", False), ("orders", LITERAL, "order", False),
    ("orders", PREFIXED, "orders", True), ("orders", PREFIXED, "orders-eu", True), ("orders", PREFIXED, "order", False),
    ("*", LITERAL, "anything", True), ("*", LITERAL, "*", True), ("*", PREFIXED, "anything", False),
    ("*", PREFIXED, "*stars", True), ("o", PREFIXED, "orders", True), ("Orders", LITERAL, "orders", False),
])
def test_pattern_matrix(pattern: str, pattern_type: PatternType, resource: str, matches: bool) -> None:
    auth = authorizer(acl(TOPIC, pattern, pattern_type, "User:alice", "*", Op.READ, ALLOW))
    assert auth.authorize(user("alice"), LOCALHOST, Op.READ, TOPIC, resource) is matches


def test_resource_types_do_not_mix() -> None:
    auth = authorizer(acl(GROUP, "*", LITERAL, "User:alice", "*", Op.READ, ALLOW))
    assert auth.authorize(user("alice"), LOCALHOST, Op.READ, GROUP, "g")
    assert not auth.authorize(user("alice"), LOCALHOST, Op.READ, TOPIC, "g")


def test_acls_for_others_still_close_the_resource() -> None:
    # hasResourceAcls: once a resource has an ACL for anyone, the no-ACL default no longer applies to it.
    auth = authorizer(acl(TOPIC, "t", LITERAL, "User:alice", "*", Op.READ, ALLOW), allow_everyone=True)
    assert not auth.authorize(user("bob"), LOCALHOST, Op.READ, TOPIC, "t")
    assert auth.authorize(user("bob"), LOCALHOST, Op.READ, TOPIC, "other")
    prefixed = authorizer(acl(TOPIC, "t", PREFIXED, "User:alice", "10.0.0.1", Op.READ, ALLOW), allow_everyone=True)
    assert not prefixed.authorize(user("alice"), LOCALHOST, Op.READ, TOPIC, "tx")  # wrong host: still closed


def test_wildcard_principal_matches_every_principal() -> None:
    # matchingPrincipals is {the principal, User:*} whatever the principal's type; Group:* is no wildcard.
    auth = authorizer(acl(TOPIC, "t", LITERAL, "User:*", "*", Op.READ, ALLOW))
    assert auth.authorize(user("anyone"), LOCALHOST, Op.READ, TOPIC, "t")
    assert auth.authorize(KafkaPrincipal("Group", "x"), LOCALHOST, Op.READ, TOPIC, "t")
    assert not authorizer(acl(TOPIC, "t", LITERAL, "Group:*", "*", Op.READ, ALLOW)).authorize(
        KafkaPrincipal("Group", "x"), LOCALHOST, Op.READ, TOPIC, "t")


# --- authorizeByResourceType ------------------------------------------------------------------------------

def test_authorize_by_resource_type() -> None:
    def by_type(auth: Authorizer, who: str = "alice") -> bool:
        return auth.authorize_by_resource_type(user(who), LOCALHOST, Op.WRITE, TOPIC)

    assert not by_type(authorizer())
    assert by_type(authorizer(allow_everyone=True))  # the hard-coded name has no ACL
    assert by_type(authorizer(acl(TOPIC, "t", LITERAL, "User:alice", "*", Op.WRITE, ALLOW)))
    assert not by_type(authorizer(acl(TOPIC, "t", LITERAL, "User:alice", "*", Op.WRITE, ALLOW)), "bob")
    assert by_type(authorizer(), "superman")
    denied_prefix = authorizer(acl(TOPIC, "team-a", LITERAL, "User:alice", "*", Op.WRITE, ALLOW),
                               acl(TOPIC, "team", PREFIXED, "User:alice", "*", Op.WRITE, DENY))
    assert not by_type(denied_prefix)  # the allowed name is dominated by a denied prefix
    denied_literal = authorizer(acl(TOPIC, "t", LITERAL, "User:alice", "*", Op.ALL, ALLOW),
                                acl(TOPIC, "t", LITERAL, "User:*", "*", Op.WRITE, DENY))
    assert not by_type(denied_literal)
    assert not by_type(authorizer(acl(TOPIC, "*", LITERAL, "User:alice", "*", Op.WRITE, ALLOW),
                                  acl(TOPIC, "*", LITERAL, "User:alice", "*", Op.WRITE, DENY)))
    assert by_type(authorizer(acl(TOPIC, "*", LITERAL, "User:*", "*", Op.ALL, ALLOW)))
    with pytest.raises(InvalidAclError):
        authorizer().authorize_by_resource_type(user("a"), LOCALHOST, Op.ANY, TOPIC)


# --- create, delete, cache --------------------------------------------------------------------------------

def test_create_and_delete_acls() -> None:
    auth = authorizer()
    good = acl(TOPIC, "t", LITERAL, "User:alice", "*", Op.READ, ALLOW)
    bad = acl(CLUSTER, "c", LITERAL, "User:alice", "*", Op.ALTER, ALLOW)
    results = auth.create_acls([good, bad, good])
    assert results[0] is None and results[2] is None  # a duplicate is a success, stored once
    assert isinstance(results[1], InvalidAclError)
    assert auth.acls() == [good]
    by_name = AclBindingFilter(ResourcePatternFilter(TOPIC, "t", PatternType.MATCH),
                               AccessControlEntryFilter(None, None, Op.ANY, AclPermissionType.ANY))
    unknown = AclBindingFilter(ResourcePatternFilter(ResourceType.UNKNOWN, None, PatternType.ANY),
                               by_name.entry_filter)
    deleted = auth.delete_acls([by_name, unknown, by_name])
    assert deleted[0] == [good] and deleted[2] == [good]  # every filter sees the ACLs as they were
    assert isinstance(deleted[1], InvalidAclError) and auth.acls() == []


def test_decisions_are_cached_until_any_acl_changes() -> None:
    auth = authorizer()
    generation = auth.generation
    assert not auth.authorize(user("alice"), LOCALHOST, Op.READ, TOPIC, "t")
    binding = acl(TOPIC, "t", PREFIXED, "User:alice", "*", Op.READ, ALLOW)
    auth.add_acl(binding)
    assert auth.generation > generation
    assert auth.authorize(user("alice"), LOCALHOST, Op.READ, TOPIC, "t")  # not the cached DENY
    auth.add_acl(acl(GROUP, "g", LITERAL, "User:bob", "*", Op.READ, ALLOW))  # any change empties the cache
    assert auth.authorize(user("alice"), LOCALHOST, Op.READ, TOPIC, "t")
    auth.remove_acl(binding)
    assert not auth.authorize(user("alice"), LOCALHOST, Op.READ, TOPIC, "t")
    assert not auth.add_acl(acl(GROUP, "g", LITERAL, "User:bob", "*", Op.READ, ALLOW))  # already there
    auth.load([binding])
    assert auth.acls() == [binding] and auth.authorize(user("alice"), LOCALHOST, Op.READ, TOPIC, "tt")


def test_a_decision_reads_a_few_lists_not_every_acl() -> None:
    auth = authorizer()
    for i in range(20_000):
        auth.add_acl(acl(TOPIC, f"topic-{i}", LITERAL, f"User:u{i}", "*", Op.WRITE, ALLOW))
        if i % 10 == 0:
            auth.add_acl(acl(TOPIC, f"team-{i}-", PREFIXED, f"User:u{i}", "*", Op.READ, ALLOW))
    assert len(auth) == 22_000
    assert auth._sorted_lengths[TOPIC] == tuple(sorted({len(f"team-{i}-") for i in range(0, 20_000, 10)}))
    start = time.perf_counter()
    for i in range(2_000):
        assert auth._decide(f"User:u{i}", LOCALHOST, Op.WRITE, TOPIC, f"topic-{i}")
    elapsed = time.perf_counter() - start
    assert elapsed < 0.5, f"2000 uncached decisions over 22000 ACLs took {elapsed:.3f}s"
    assert auth.authorize(user("u10"), LOCALHOST, Op.READ, TOPIC, "team-10-x")
    assert not auth.authorize(user("u11"), LOCALHOST, Op.READ, TOPIC, "team-10-x")
