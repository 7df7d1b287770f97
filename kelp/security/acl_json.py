"""ACL bindings and filters as JSON: the one shape the HTTP API, the `kelp acls` CLI and the metadata log share.

Why: the admin API (`/admin/v1/acls`), the operator built against it and the cluster metadata log all carry
ACLs; one codec keeps them the same. A binding is

    {"resourceType": "TOPIC", "resourceName": "orders", "patternType": "LITERAL",
     "principal": "User:alice", "host": "*", "operation": "READ", "permission": "ALLOW"}

with Kafka's enum names (ResourceType, PatternType, AclOperation, AclPermissionType; `Topic`,
`DescribeConfigs` and any case are read too, as Kafka's fromString does). Reading a binding, `patternType`
defaults to LITERAL and `host` to `*` (kafka-acls' defaults); reading a filter, an omitted field matches
anything (resource type and pattern type ANY, name, principal and host null, operation and permission ANY),
and MATCH is a pattern type a filter may use. A name Kafka does not know is refused, never taken as UNKNOWN.

This module must never do I/O; it only converts (`acl.validate_acl_binding` decides what may be stored).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict, TypeVar

from .acl import (
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
    _KafkaEnum,
)

__all__ = ["AclBindingJson", "AclFilterJson", "binding_to_json", "binding_from_json", "filter_to_json",
           "filter_from_json", "FIELDS"]

FIELDS = ("resourceType", "resourceName", "patternType", "principal", "host", "operation", "permission")


class AclBindingJson(TypedDict):
    resourceType: str
    resourceName: str
    patternType: str
    principal: str
    host: str
    operation: str
    permission: str


class AclFilterJson(TypedDict, total=False):
    resourceType: str
    resourceName: str | None
    patternType: str
    principal: str | None
    host: str | None
    operation: str
    permission: str


_E = TypeVar("_E", bound=_KafkaEnum)


def _enum(kind: type[_E], doc: Mapping[str, object], field: str, default: _E | None, *, allowed: tuple[_E, ...]
          ) -> _E:
    value = doc.get(field)
    if value is None:
        if default is None:
            raise InvalidAclError(f"ACL field '{field}' is required (one of {', '.join(m.name for m in allowed)})")
        return default
    member = kind.from_name(value) if isinstance(value, str) else kind(0)
    if member not in allowed:
        raise InvalidAclError(f"ACL field '{field}': {value!r} is not one of {', '.join(m.name for m in allowed)}")
    return member


def _text(doc: Mapping[str, object], field: str, default: str | None, *, nullable: bool = False) -> str | None:
    if field not in doc or (doc[field] is None and not nullable):
        if default is None and not nullable:
            raise InvalidAclError(f"ACL field '{field}' is required (a string)")
        return default
    value = doc[field]
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidAclError(f"ACL field '{field}' must be a string, got {value!r}")
    return value


def _only_known(doc: object) -> Mapping[str, object]:
    if not isinstance(doc, Mapping):
        raise InvalidAclError(f"an ACL must be a JSON object with {', '.join(FIELDS)}, got {doc!r}")
    unknown = sorted(str(k) for k in doc if k not in FIELDS)
    if unknown:
        raise InvalidAclError(f"unknown ACL field(s) {', '.join(unknown)}; known: {', '.join(FIELDS)}")
    return doc


_CONCRETE_TYPES = tuple(t for t in ResourceType if t not in (ResourceType.UNKNOWN, ResourceType.ANY))
_CONCRETE_OPS = tuple(o for o in AclOperation if o not in (AclOperation.UNKNOWN, AclOperation.ANY))


def binding_from_json(doc: object) -> AclBinding:
    """A binding from its JSON; InvalidAclError names the field that is missing or wrong. Not validated
    against Kafka's rules for a new ACL (`acl.validate_acl_binding` does that)."""
    d = _only_known(doc)
    pattern = ResourcePattern(
        _enum(ResourceType, d, "resourceType", None, allowed=_CONCRETE_TYPES),
        _text(d, "resourceName", None) or "",
        _enum(PatternType, d, "patternType", PatternType.LITERAL, allowed=(PatternType.LITERAL, PatternType.PREFIXED)))
    entry = AccessControlEntry(
        _text(d, "principal", None) or "",
        _text(d, "host", "*") or "",
        _enum(AclOperation, d, "operation", None, allowed=_CONCRETE_OPS),
        _enum(AclPermissionType, d, "permission", None, allowed=(AclPermissionType.ALLOW, AclPermissionType.DENY)))
    return AclBinding(pattern, entry)


def binding_to_json(binding: AclBinding) -> AclBindingJson:
    p, e = binding.pattern, binding.entry
    return {"resourceType": p.resource_type.name, "resourceName": p.name, "patternType": p.pattern_type.name,
            "principal": e.principal, "host": e.host, "operation": e.operation.name,
            "permission": e.permission_type.name}


def filter_from_json(doc: object) -> AclBindingFilter:
    """A filter from its JSON; an omitted field matches anything."""
    d = _only_known(doc)
    return AclBindingFilter(
        ResourcePatternFilter(
            _enum(ResourceType, d, "resourceType", ResourceType.ANY, allowed=tuple(ResourceType)[1:]),
            _text(d, "resourceName", None, nullable=True),
            _enum(PatternType, d, "patternType", PatternType.ANY, allowed=tuple(PatternType)[1:])),
        AccessControlEntryFilter(
            _text(d, "principal", None, nullable=True),
            _text(d, "host", None, nullable=True),
            _enum(AclOperation, d, "operation", AclOperation.ANY, allowed=tuple(AclOperation)[1:]),
            _enum(AclPermissionType, d, "permission", AclPermissionType.ANY, allowed=tuple(AclPermissionType)[1:])))


def filter_to_json(acl_filter: AclBindingFilter) -> AclFilterJson:
    p, e = acl_filter.pattern_filter, acl_filter.entry_filter
    return {"resourceType": p.resource_type.name, "resourceName": p.name, "patternType": p.pattern_type.name,
            "principal": e.principal, "host": e.host, "operation": e.operation.name,
            "permission": e.permission_type.name}
