"""Client quotas in the cluster metadata (KIP-546): what they are, how an entry changes them, how a filter finds them.

Why: `kafka-configs --entity-type users|clients|ips --alter --add-config producer_byte_rate=...` sends
AlterClientQuotas; the quota is the controller's to record (one `client_quota` record per key, as Kafka's
ClientQuotaRecord) and every broker's to enforce, so it lives in the metadata image (`MetadataImage.client_quotas`)
beside SCRAM credentials and ACLs. This module holds Kafka's rules (ClientQuotaControlManager, ClientQuotasImage):

- an entity is a set of (type, name) with each type once: `user`, `client-id`, both, or `ip` alone; a name of None
  is that type's default (`--entity-default`). Anything else is INVALID_REQUEST.
- the keys of a user / client-id entity are `producer_byte_rate`, `consumer_byte_rate` (whole numbers),
  `request_percentage` and `controller_mutation_rate`; of an ip entity `connection_creation_rate` (a whole
  number). A value is finite and not negative. An unknown key, or a bad value, is INVALID_REQUEST.
- DescribeClientQuotas filters by components (type, EXACT name / DEFAULT / any SPECIFIED name); `strict` answers
  only entities of exactly those types. A type named twice, or ip with user or client-id, is INVALID_REQUEST.

This module does no I/O and holds no state; the controller's operation is `cluster.controller.quota_admin.QuotaAdmin`'s.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Mapping, Sequence

from .records import ClientQuotaRecord, EntityJson

__all__ = [
    "Entity", "InvalidQuota", "QuotaTable", "USER", "CLIENT_ID", "IP", "apply_quota_record", "checked_entity",
    "checked_value", "client_quota_record", "describe_quotas", "entity_json", "entity_of", "ip_connection_rate",
    "quota_records", "table_from_records",
]

USER, CLIENT_ID, IP = "user", "client-id", "ip"
_WHOLE, _DOUBLE = "whole", "double"
CLIENT_KEYS = {"producer_byte_rate": _WHOLE, "consumer_byte_rate": _WHOLE, "request_percentage": _DOUBLE,
               "controller_mutation_rate": _DOUBLE}
IP_KEYS = {"connection_creation_rate": _WHOLE}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

# An entity: its (type, name) pairs sorted by type; a name of None is the type's default.
Entity = tuple[tuple[str, str | None], ...]
QuotaTable = Mapping[Entity, Mapping[str, float]]


class InvalidQuota(ValueError):
    """A quota entity, key, value or filter Kafka refuses (INVALID_REQUEST)."""


def checked_entity(parts: Iterable[tuple[object, object]]) -> Entity:
    """An entity from (type, name) pairs, or InvalidQuota saying what Kafka says of it."""
    seen: dict[str, str | None] = {}
    for kind, name in parts:
        if kind not in (USER, CLIENT_ID, IP):
            raise InvalidQuota(f"Unhandled client quota entity type: {str(kind)[:64]}")
        if name is not None and not isinstance(name, str):
            raise InvalidQuota(f"The {kind} entity's name must be a string or null")
        if kind in seen:
            raise InvalidQuota(f"Duplicate {kind} entity in the client quota entity")
        seen[kind] = name
    if not seen:
        raise InvalidQuota("Invalid empty client quota entity")
    if IP in seen:
        if len(seen) > 1:
            raise InvalidQuota("Invalid quota entity combination, IP tuple must not include a user or a client ID")
        name = seen[IP]
        if name is not None:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                raise InvalidQuota(f"{name[:64]} is not a valid IP or resolvable host.") from None
    return tuple(sorted(seen.items()))


def checked_value(entity: Entity, key: object, value: object) -> float:
    kinds = IP_KEYS if entity[0][0] == IP else CLIENT_KEYS
    if not isinstance(key, str) or key not in kinds:
        raise InvalidQuota(f"Invalid configuration key {str(key)[:64]}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidQuota(f"Invalid value for configuration key {key}: a finite number is required")
    if value < 0:
        raise InvalidQuota(f"Invalid value {value} for configuration key {key}: it must not be negative")
    if kinds[key] == _WHOLE and value != int(value):
        raise InvalidQuota(f"Configuration {key} must be a Long value")
    return float(value)


def entity_json(entity: Entity) -> list[EntityJson]:
    return [{"entity_type": kind, "entity_name": name} for kind, name in entity]


def client_quota_record(entity: Entity, key: str, value: float | None) -> ClientQuotaRecord:
    return {"type": "client_quota", "entity": entity_json(entity), "key": key, "value": value}


def entity_of(doc: object) -> Entity:
    if not isinstance(doc, list):
        raise InvalidQuota("a client quota entity must be a list")
    return checked_entity((item.get("entity_type"), item.get("entity_name")) if isinstance(item, dict) else (None, None)
                          for item in doc)


def apply_quota_record(table: dict[Entity, dict[str, float]], rec: Mapping[str, object]) -> None:
    """One `client_quota` record applied to `table` (InvalidQuota when it breaks a rule above)."""
    entity = entity_of(rec["entity"])
    value = rec["value"]
    key = rec["key"]
    values = dict(table.get(entity, {}))
    if value is None:
        checked_value(entity, key, 0)
        values.pop(str(key), None)
    else:
        values[str(key)] = checked_value(entity, key, value)
    if values:
        table[entity] = values
    else:
        table.pop(entity, None)


def quota_records(table: QuotaTable) -> list[ClientQuotaRecord]:
    """The table as records, for a snapshot."""
    return [client_quota_record(entity, key, value) for entity, values in sorted(table.items(), key=_order)
            for key, value in sorted(values.items())]


def table_from_records(records: Iterable[Mapping[str, object]]) -> dict[Entity, dict[str, float]]:
    table: dict[Entity, dict[str, float]] = {}
    for rec in records:
        apply_quota_record(table, rec)
    return table


def _order(item: tuple[Entity, object]) -> tuple[tuple[str, bool, str], ...]:
    return tuple((kind, name is not None, name or "") for kind, name in item[0])


def describe_quotas(table: QuotaTable, components: Sequence[tuple[str, int, str | None]],
                    strict: bool) -> list[tuple[Entity, Mapping[str, float]]]:
    """The entities matching a DescribeClientQuotas filter, with their quotas (InvalidQuota for a bad filter)."""
    wanted: dict[str, tuple[int, str | None]] = {}
    for kind, match_type, match in components:
        if kind in wanted:
            raise InvalidQuota(f"Entity type {str(kind)[:64]} cannot appear more than once in the filter.")
        if kind not in (USER, CLIENT_ID, IP):
            raise InvalidQuota(f"Unknown entity type {str(kind)[:64]}")
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise InvalidQuota(f"Unknown match type {match_type}")
        if match_type == MATCH_EXACT and match is None:
            raise InvalidQuota(f"The {kind} filter component of match type EXACT needs a name")
        wanted[kind] = (match_type, match)
    if IP in wanted and len(wanted) > 1:
        raise InvalidQuota("Invalid entity filter component combination, IP filter component should not be used "
                           "with user or clientId filter component.")
    found = []
    for entity, values in sorted(table.items(), key=_order):
        names = dict(entity)
        if strict and set(names) != set(wanted):
            continue
        if all(kind in names and _matches(names[kind], *rule) for kind, rule in wanted.items()):
            found.append((entity, values))
    return found


def _matches(name: str | None, match_type: int, match: str | None) -> bool:
    if match_type == MATCH_EXACT:
        return name == match
    if match_type == MATCH_DEFAULT:
        return name is None
    return name is not None


def ip_connection_rate(table: QuotaTable, ip: str) -> float | None:
    """The `connection_creation_rate` quota of an address: its own, else the default address's (Kafka's order)."""
    for entity in (((IP, ip),), ((IP, None),)):
        value = table.get(entity, {}).get("connection_creation_rate")
        if value is not None:
            return value
    return None
