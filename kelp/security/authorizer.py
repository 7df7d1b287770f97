"""An authorizer with Kafka StandardAuthorizer's decisions over the ACL model (`acl`), indexed and cached.

Why: every request a broker serves asks it, so it must decide exactly as Kafka does and cost almost
nothing. `Authorizer.authorize` is StandardAuthorizerData.authorize and findResult: a super user
(`super.users`, `User:a;User:b`, compared as Kafka's `principal.toString()`) is allowed everything; else
the ACLs on the resource (its literal name, the literal `*`, every PREFIXED pattern the name starts with)
whose principal is the client's or `User:*` and whose host is the client's address or `*`: any DENY wins,
else any ALLOW allows; ALL matches every operation; an ALLOW of READ, WRITE, DELETE or ALTER also allows
DESCRIBE, an ALLOW of ALTER_CONFIGS also allows DESCRIBE_CONFIGS, and DENY implies nothing; with no ACL at
all on the resource (for anyone) the answer is `allow.everyone.if.no.acl.found` (default false), but when
the resource has ACLs and none matches, the answer is DENY. `authorize_by_resource_type` is Kafka's
Authorizer.authorizeByResourceType (may the principal do `op` on at least one resource of the type:
InitProducerId's IDEMPOTENT_WRITE fallback, transactions).

Speed: ACLs are indexed by (resource type, literal name), which holds the literal `*` too, and PREFIXED
ones by (resource type, prefix) with the set of prefix lengths in use, so a decision reads a handful of
lists and never scans every ACL. Decisions are cached per (principal, host, operation, resource type,
name); any ACL change bumps `generation` and empties the cache, so no decision outlives the ACLs it read.

Its configured name is `kelp.broker.security.authorizer.Authorizer` (`authorizer.class.name`). This module
must never do I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from .acl import (
    ANY_FILTER,
    IMPLIES_DESCRIBE,
    IMPLIES_DESCRIBE_CONFIGS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourceType,
    parse_super_users,
    validate_acl_binding,
    validate_acl_filter,
)
from .principal import KafkaPrincipal

__all__ = ["Authorizer"]


@dataclass(frozen=True)
class _Acl:
    binding: AclBinding
    principal: str
    host: str
    operation: AclOperation
    allow: bool


def _result(acl: _Acl, operation: AclOperation, principal: str, host: str) -> bool | None:
    """StandardAuthorizerData.findResult: True (ALLOW), False (DENY) or None (the ACL does not apply)."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD_HOST and acl.host != host:
        return None
    if acl.operation is not AclOperation.ALL:
        if acl.allow:
            if operation is AclOperation.DESCRIBE:
                if acl.operation not in IMPLIES_DESCRIBE:
                    return None
            elif operation is AclOperation.DESCRIBE_CONFIGS:
                if acl.operation not in IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif operation is not acl.operation:
                return None
        elif operation is not acl.operation:
            return None
    return acl.allow


class Authorizer:
    """ACLs in memory, indexed, with Kafka StandardAuthorizer's decisions and a decision cache.

    The ACLs are the broker's image of the replicated ones: `add_acl`/`remove_acl` replay changes, `load`
    replaces all; `create_acls`/`delete_acls` are CreateAcls/DeleteAcls applied here. Not thread-safe; one
    event loop owns it.
    """

    def __init__(self, *, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False,
                 cache_size: int = 65536) -> None:
        self._super_users = frozenset(super_users)
        self._default_allow = allow_everyone_if_no_acl_found
        self._cache_size = cache_size
        self._bindings: dict[AclBinding, _Acl] = {}
        self._literal: dict[tuple[ResourceType, str], list[_Acl]] = {}
        self._prefixed: dict[ResourceType, dict[str, list[_Acl]]] = {}
        self._prefix_lengths: dict[ResourceType, dict[int, int]] = {}
        self._sorted_lengths: dict[ResourceType, tuple[int, ...]] = {}
        self._cache: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}
        self.generation = 0

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> Authorizer:
        """`super.users` and `allow.everyone.if.no.acl.found` (Java's Boolean.parseBoolean: only `true`, any
        case, is true)."""
        allow = config.get("allow.everyone.if.no.acl.found", "false").strip().lower() == "true"
        return cls(super_users=parse_super_users(config.get("super.users")), allow_everyone_if_no_acl_found=allow)

    @property
    def super_users(self) -> frozenset[str]:
        return self._super_users

    def __len__(self) -> int:
        return len(self._bindings)

    # -- changes --

    def _changed(self) -> None:
        self.generation += 1
        self._cache.clear()

    def add_acl(self, binding: AclBinding) -> bool:
        """Add one ACL (validated); False when it is already there (Kafka keeps one copy)."""
        validate_acl_binding(binding)
        if binding in self._bindings:
            return False
        entry = binding.entry
        acl = _Acl(binding, entry.principal, entry.host, entry.operation,
                   entry.permission_type is AclPermissionType.ALLOW)
        self._bindings[binding] = acl
        pattern = binding.pattern
        if pattern.pattern_type is PatternType.LITERAL:
            self._literal.setdefault((pattern.resource_type, pattern.name), []).append(acl)
        else:
            self._prefixed.setdefault(pattern.resource_type, {}).setdefault(pattern.name, []).append(acl)
            lengths = self._prefix_lengths.setdefault(pattern.resource_type, {})
            lengths[len(pattern.name)] = lengths.get(len(pattern.name), 0) + 1
            self._sorted_lengths[pattern.resource_type] = tuple(sorted(lengths))
        self._changed()
        return True

    def remove_acl(self, binding: AclBinding) -> bool:
        """Remove one ACL; False when it was not there."""
        acl = self._bindings.pop(binding, None)
        if acl is None:
            return False
        pattern = binding.pattern
        if pattern.pattern_type is PatternType.LITERAL:
            key = (pattern.resource_type, pattern.name)
            self._literal[key].remove(acl)
            if not self._literal[key]:
                del self._literal[key]
        else:
            by_prefix = self._prefixed[pattern.resource_type]
            by_prefix[pattern.name].remove(acl)
            if not by_prefix[pattern.name]:
                del by_prefix[pattern.name]
            lengths = self._prefix_lengths[pattern.resource_type]
            lengths[len(pattern.name)] -= 1
            if not lengths[len(pattern.name)]:
                del lengths[len(pattern.name)]
            self._sorted_lengths[pattern.resource_type] = tuple(sorted(lengths))
        self._changed()
        return True

    def load(self, bindings: Iterable[AclBinding]) -> None:
        """Replace every ACL (a snapshot of the metadata)."""
        for binding in list(self._bindings):
            self.remove_acl(binding)
        for binding in bindings:
            self.add_acl(binding)
        self._changed()

    def create_acls(self, bindings: Iterable[AclBinding]) -> list[InvalidAclError | None]:
        """CreateAcls: per binding None (created, or already there) or the error Kafka answers."""
        results: list[InvalidAclError | None] = []
        for binding in bindings:
            try:
                self.add_acl(binding)
                results.append(None)
            except InvalidAclError as exc:
                results.append(exc)
        return results

    def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding] | InvalidAclError]:
        """DeleteAcls: per filter the bindings it removed, or the error Kafka answers. Every filter is matched
        against the ACLs as they were before the request (AclControlManager.deleteAcls), so a binding two
        filters match is reported by both."""
        results: list[list[AclBinding] | InvalidAclError] = []
        for acl_filter in filters:
            try:
                validate_acl_filter(acl_filter)
            except InvalidAclError as exc:
                results.append(exc)
                continue
            results.append(self.acls(acl_filter))
        for result in results:
            if isinstance(result, list):
                for binding in result:
                    self.remove_acl(binding)
        return results

    def acls(self, acl_filter: AclBindingFilter = ANY_FILTER) -> list[AclBinding]:
        """DescribeAcls: every binding the filter matches, in insertion order."""
        return [b for b in self._bindings if acl_filter.matches(b)]

    # -- decisions --

    def is_super_user(self, principal: KafkaPrincipal) -> bool:
        return str(principal) in self._super_users

    def _matching(self, resource_type: ResourceType, name: str) -> Iterator[_Acl]:
        """Every ACL whose pattern covers the resource: literal name, literal `*`, and each PREFIXED prefix."""
        yield from self._literal.get((resource_type, name), ())
        if name != WILDCARD_RESOURCE:
            yield from self._literal.get((resource_type, WILDCARD_RESOURCE), ())
        lengths = self._sorted_lengths.get(resource_type)
        if lengths:
            by_prefix = self._prefixed[resource_type]
            for length in lengths:
                if length > len(name):
                    break
                yield from by_prefix.get(name[:length], ())

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """May `principal`, connected from `host` (java_host_address form), do `operation` on the resource
        (a literal name)? StandardAuthorizerData.authorize."""
        principal_text = str(principal)
        if principal_text in self._super_users:
            return True
        key = (principal_text, host, operation, resource_type, name)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        decision = self._decide(principal_text, host, operation, resource_type, name)
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        self._cache[key] = decision
        return decision

    def _decide(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                name: str) -> bool:
        any_acl = False
        allowed = False
        for acl in self._matching(resource_type, name):
            any_acl = True
            result = _result(acl, operation, principal, host)
            if result is False:
                return False  # DENY beats ALLOW
            if result:
                allowed = True
        if allowed:
            return True
        return self._default_allow if not any_acl else False

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """May `principal` do `operation` on at least one resource of the type? Kafka's
        Authorizer.authorizeByResourceType, step for step."""
        if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise InvalidAclError(f"Must specify a concrete resource type for authorizeByResourceType, "
                                  f"not {resource_type.name}")
        if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise InvalidAclError(f"Must specify a concrete operation for authorizeByResourceType, not "
                                  f"{operation.name}")
        # Kafka checks a hard-coded name first, so super users (and the no-ACL default) are allowed.
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        principal_text = str(principal)
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow_literal: set[str] = set()
        allow_prefixed: set[str] = set()
        wildcard_allow = False
        for binding, acl in self._bindings.items():
            if binding.pattern.resource_type is not resource_type:
                continue
            if acl.host != host and acl.host != WILDCARD_HOST:
                continue
            if acl.principal != principal_text and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.operation is not operation and acl.operation is not AclOperation.ALL:
                continue
            literal = binding.pattern.pattern_type is PatternType.LITERAL
            if not acl.allow:
                if literal and binding.pattern.name == WILDCARD_RESOURCE:
                    return False
                (deny_literal if literal else deny_prefixed).add(binding.pattern.name)
                continue
            if literal and binding.pattern.name == WILDCARD_RESOURCE:
                wildcard_allow = True
                continue
            (allow_literal if literal else allow_prefixed).add(binding.pattern.name)
        if wildcard_allow:
            return True
        for literal, names in ((True, allow_literal), (False, allow_prefixed)):
            for name in names:
                if literal and name in deny_literal:
                    continue
                if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                    return True
        return False
