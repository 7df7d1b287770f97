"""Kafka's ACL model: resources, patterns, operations, bindings, filters and what CreateAcls refuses.

Why: `kafka-acls`, `super.users`, `allow.everyone.if.no.acl.found` and every ACL a Kafka user has written
must mean on Kelp what they mean on Kafka. Everything here is taken from Kafka's sources:

- the enums and their wire codes: ResourceType, PatternType, AclOperation, AclPermissionType
  (org.apache.kafka.common.resource / .acl), with SecurityUtils' names (`Topic`, `TOPIC`, `DescribeConfigs`);
- `ResourcePattern`, `AccessControlEntry`, `AclBinding` and their filters with Kafka's `matches`: a filter
  with pattern type MATCH matches the literal name, the literal wildcard `*` and every PREFIXED pattern the
  name starts with; ANY matches any pattern type; a None name, principal or host matches all
  (ResourcePatternFilter, AccessControlEntryFilter);
- `validate_acl_binding`: what CreateAcls refuses, with Kafka's InvalidRequestException messages (the
  broker's AclApis: a CLUSTER ACL must name `kafka-cluster`, no empty name; the controller's
  AclControlManager.validateNewAcl: no UNKNOWN/ANY resource type, only LITERAL and PREFIXED, no
  UNKNOWN/ANY operation, only ALLOW and DENY) plus a principal `Type:name` (Kafka would store one without
  a colon and fail every later authorization on it). A PREFIXED `*` is valid in Kafka (it matches names
  starting with `*`), so it is here too; `validate_acl_filter` refuses UNKNOWN elements as DeleteAcls does.

The decisions themselves are `authorizer.Authorizer`'s. This module must never do I/O or decide anything
Kafka would decide differently; the connection layer passes the client's address as `java_host_address`
renders it (Kafka compares Java's form).
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self

from kelp.errors import ErrorCode, KelpError

from .principal import KafkaPrincipal

__all__ = [
    "ANY_FILTER",
    "CLUSTER_NAME",
    "IMPLIES_DESCRIBE",
    "IMPLIES_DESCRIBE_CONFIGS",
    "WILDCARD_HOST",
    "WILDCARD_PRINCIPAL",
    "WILDCARD_RESOURCE",
    "AccessControlEntry",
    "AccessControlEntryFilter",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "InvalidAclError",
    "PatternType",
    "ResourcePattern",
    "ResourcePatternFilter",
    "ResourceType",
    "authorization_error",
    "java_host_address",
    "parse_super_users",
    "supported_operations",
    "validate_acl_binding",
    "validate_acl_filter",
]

WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"
"""The one name a CLUSTER resource has (org.apache.kafka.common.resource.Resource.CLUSTER_NAME)."""


class InvalidAclError(KelpError):
    """An ACL binding or filter Kafka refuses (InvalidRequestException in CreateAcls/DeleteAcls)."""

    code = ErrorCode.INVALID_REQUEST
    http_status = 400


def _pascal(name: str) -> str:
    """SecurityUtils.toPascalCase: TRANSACTIONAL_ID -> TransactionalId."""
    return "".join(part.capitalize() for part in name.split("_"))


class _KafkaEnum(enum.IntEnum):
    """An enum whose value is Kafka's int8 code; `from_code` and `from_name` give UNKNOWN for what they do
    not know, as Kafka's fromCode and SecurityUtils do."""

    @classmethod
    def from_code(cls, code: int) -> Self:
        try:
            return cls(code)
        except ValueError:
            return cls(0)

    @classmethod
    def from_name(cls, name: str) -> Self:
        """SecurityUtils' lookup (`TransactionalId`, `TRANSACTIONALID`) and the enum's own name in any case
        (Kafka's fromString: `transactional_id`)."""
        upper = name.upper()
        for member in cls:
            if name == _pascal(member.name) or upper in (member.name, _pascal(member.name).upper()):
                return member
        return cls(0)

    @property
    def kafka_name(self) -> str:
        """Kafka's display name (`Topic`, `DescribeConfigs`, `Allow`)."""
        return _pascal(self.name)


class ResourceType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @property
    def is_specific(self) -> bool:
        return self not in (PatternType.UNKNOWN, PatternType.ANY, PatternType.MATCH)


class AclOperation(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# StandardAuthorizerData.IMPLIES_DESCRIBE and IMPLIES_DESCRIBE_CONFIGS (for ALLOW ACLs only).
IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                               AclOperation.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

_SUPPORTED: Mapping[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                                   AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                                   AclOperation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                                   AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                                     AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                                     AclOperation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}


def supported_operations(resource_type: ResourceType) -> frozenset[AclOperation]:
    """AclEntry.supportedOperations: the operations that mean something on a resource type (kafka-acls refuses
    others; ALL is always accepted besides these)."""
    try:
        return _SUPPORTED[resource_type]
    except KeyError:
        raise InvalidAclError(f"Not a concrete resource type: {resource_type.name}") from None


def authorization_error(resource_type: ResourceType) -> ErrorCode:
    """AclEntry.authorizationError: the error code a request refused on a resource of this type gets."""
    errors = {
        ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ResourceType.DELEGATION_TOKEN: ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
    }
    try:
        return errors[resource_type]
    except KeyError:
        raise InvalidAclError(f"Authorization error type not known for {resource_type.name}") from None


# --- bindings and filters ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ResourcePattern:
    """A resource pattern an ACL binds to: never ANY resource type, never a MATCH or ANY pattern type."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __post_init__(self) -> None:
        if self.resource_type is ResourceType.ANY:
            raise InvalidAclError("resourceType must not be ANY")
        if self.pattern_type in (PatternType.MATCH, PatternType.ANY):
            raise InvalidAclError(f"patternType must not be {self.pattern_type.name}")

    @property
    def is_unknown(self) -> bool:
        return self.resource_type is ResourceType.UNKNOWN or self.pattern_type is PatternType.UNKNOWN

    def to_filter(self) -> ResourcePatternFilter:
        return ResourcePatternFilter(self.resource_type, self.name, self.pattern_type)

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")


@dataclass(frozen=True)
class ResourcePatternFilter:
    """A filter over resource patterns (DescribeAcls, DeleteAcls); `name=None` matches any name."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    @property
    def is_unknown(self) -> bool:
        return self.resource_type is ResourceType.UNKNOWN or self.pattern_type is PatternType.UNKNOWN

    def matches(self, pattern: ResourcePattern) -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        if self.resource_type is not ResourceType.ANY and self.resource_type is not pattern.resource_type:
            return False
        if (self.pattern_type not in (PatternType.ANY, PatternType.MATCH)
                and self.pattern_type is not pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type is PatternType.ANY or self.pattern_type is pattern.pattern_type:
            return self.name == pattern.name
        if pattern.pattern_type is PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type is PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        raise InvalidAclError(f"Unsupported PatternType: {pattern.pattern_type.name}")

    def find_indefinite_field(self) -> str | None:
        if self.resource_type is ResourceType.ANY:
            return "Resource type is ANY."
        if self.resource_type is ResourceType.UNKNOWN:
            return "Resource type is UNKNOWN."
        if self.name is None:
            return "Resource name is NULL."
        if self.pattern_type is PatternType.MATCH:
            return "Resource pattern type is MATCH."
        if self.pattern_type is PatternType.UNKNOWN:
            return "Resource pattern type is UNKNOWN."
        return None


@dataclass(frozen=True)
class AccessControlEntry:
    """Who (`User:alice`, `User:*`), from where (an address or `*`), what, ALLOW or DENY. Never ANY."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __post_init__(self) -> None:
        if self.operation is AclOperation.ANY:
            raise InvalidAclError("operation must not be ANY")
        if self.permission_type is AclPermissionType.ANY:
            raise InvalidAclError("permissionType must not be ANY")

    @property
    def is_unknown(self) -> bool:
        return self.operation is AclOperation.UNKNOWN or self.permission_type is AclPermissionType.UNKNOWN

    def to_filter(self) -> AccessControlEntryFilter:
        return AccessControlEntryFilter(self.principal, self.host, self.operation, self.permission_type)

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission_type.name})")


@dataclass(frozen=True)
class AccessControlEntryFilter:
    """A filter over entries; None principal or host matches any, ANY operation or permission matches any."""

    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    @property
    def is_unknown(self) -> bool:
        return self.operation is AclOperation.UNKNOWN or self.permission_type is AclPermissionType.UNKNOWN

    def matches(self, entry: AccessControlEntry) -> bool:
        """Kafka's AccessControlEntryFilter.matches: exact fields, no wildcard expansion."""
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation is not entry.operation:
            return False
        return self.permission_type is AclPermissionType.ANY or self.permission_type is entry.permission_type

    def find_indefinite_field(self) -> str | None:
        if self.principal is None:
            return "Principal is NULL"
        if self.host is None:
            return "Host is NULL"
        if self.operation is AclOperation.ANY:
            return "Operation is ANY"
        if self.operation is AclOperation.UNKNOWN:
            return "Operation is UNKNOWN"
        if self.permission_type is AclPermissionType.ANY:
            return "Permission type is ANY"
        if self.permission_type is AclPermissionType.UNKNOWN:
            return "Permission type is UNKNOWN"
        return None


@dataclass(frozen=True)
class AclBinding:
    """One ACL: a resource pattern and an entry."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    @property
    def is_unknown(self) -> bool:
        return self.pattern.is_unknown or self.entry.is_unknown

    def to_filter(self) -> AclBindingFilter:
        return AclBindingFilter(self.pattern.to_filter(), self.entry.to_filter())

    def __str__(self) -> str:
        return f"(pattern={self.pattern}, entry={self.entry})"

    def to_record(self) -> dict[str, str]:
        """A JSON-able form for the metadata store, with Kafka's names."""
        return {
            "resource_type": self.pattern.resource_type.name, "resource_name": self.pattern.name,
            "pattern_type": self.pattern.pattern_type.name, "principal": self.entry.principal,
            "host": self.entry.host, "operation": self.entry.operation.name,
            "permission_type": self.entry.permission_type.name,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> AclBinding:
        try:
            return cls(
                ResourcePattern(ResourceType[str(record["resource_type"])], str(record["resource_name"]),
                                PatternType[str(record["pattern_type"])]),
                AccessControlEntry(str(record["principal"]), str(record["host"]),
                                   AclOperation[str(record["operation"])],
                                   AclPermissionType[str(record["permission_type"])]))
        except KeyError as missing:
            raise InvalidAclError(f"ACL record: unknown or missing {missing}") from None


@dataclass(frozen=True)
class AclBindingFilter:
    pattern_filter: ResourcePatternFilter
    entry_filter: AccessControlEntryFilter

    @property
    def is_unknown(self) -> bool:
        return self.pattern_filter.is_unknown or self.entry_filter.is_unknown

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern_filter.matches(binding.pattern) and self.entry_filter.matches(binding.entry)

    def matches_at_most_one(self) -> bool:
        return self.find_indefinite_field() is None

    def find_indefinite_field(self) -> str | None:
        return self.pattern_filter.find_indefinite_field() or self.entry_filter.find_indefinite_field()


ANY_FILTER = AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY),
                              AccessControlEntryFilter(None, None, AclOperation.ANY, AclPermissionType.ANY))
"""Kafka's AclBindingFilter.ANY."""


def validate_acl_binding(binding: AclBinding) -> None:
    """What CreateAcls refuses, in Kafka's order and words (AclApis.handleCreateAcls, then
    AclControlManager.validateNewAcl), and a principal without `Type:`."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        raise InvalidAclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not pattern.name:
        raise InvalidAclError("Invalid empty resource name")
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAclError(f"Invalid resourceType {pattern.resource_type.name}")
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAclError(f"Invalid patternType {pattern.pattern_type.name}")
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidAclError(f"Invalid operation {entry.operation.name}")
    if entry.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidAclError(f"Invalid permissionType {entry.permission_type.name}")
    if ":" not in entry.principal:
        raise InvalidAclError(f"Could not parse principal from `{entry.principal}` (no colon is present separating "
                              "the principal type from the principal name)")


def validate_acl_filter(acl_filter: AclBindingFilter) -> None:
    """AclControlManager.validateFilter: DeleteAcls refuses a filter with UNKNOWN elements."""
    if acl_filter.pattern_filter.is_unknown:
        raise InvalidAclError("Unknown patternFilter.")
    if acl_filter.entry_filter.is_unknown:
        raise InvalidAclError("Unknown entryFilter.")


def parse_super_users(value: str | None) -> frozenset[str]:
    """StandardAuthorizer.getConfiguredSuperUsers: `super.users`, principals separated by `;`, trimmed."""
    users: set[str] = set()
    for item in (value or "").split(";"):
        principal = item.strip()
        if principal:
            KafkaPrincipal.parse(principal)  # refuses `bob` as Kafka does
            users.add(principal)
    return frozenset(users)


def java_host_address(address: str) -> str:
    """A peer address as Java's InetAddress.getHostAddress() renders it, the form Kafka's ACL hosts compare
    with: IPv4 dotted; IPv6 as eight groups of hex without leading zeros and without `::` (`0:0:0:0:0:0:0:1`);
    an IPv4-mapped IPv6 address as its IPv4 address; a scope kept as `%scope`."""
    scope = ""
    if "%" in address:
        address, scope = address.split("%", 1)
        scope = "%" + scope
    parsed = ipaddress.ip_address(address)
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        words = parsed.packed
        return ":".join(f"{int.from_bytes(words[i:i + 2], 'big'):x}" for i in range(0, 16, 2)) + scope
    return str(parsed)
