"""`RegistryState`: the registry as the records of `_schemas` build it, and the questions routes ask of it.

Why: every broker serves reads from memory, built by applying `_schemas` record by record in offset order
(`store.SchemaLog` feeds it); the leader decides writes against the same state. Keeping it pure — bytes in,
answers out — lets it be tested without a broker and makes replaying the log the only way state changes.

Ids: a schema (type, canonical text, references) has one id wherever it is registered (Confluent's rule);
ids only grow (`max_id` never goes down, even when the last version holding an id is deleted for good).

This module must never do I/O or decide a write: the registry does.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace

from .model import DEFAULT_LEVEL, DEFAULT_MODE, LEVELS, MODES, Reference, SchemaVersion, decode_key, decode_version

__all__ = ["RegistryState", "Identity"]

log = logging.getLogger("kelp.broker.schema_registry")

# (schema type, canonical schema, references, metadata, ruleSet): what one schema id names; a data contract
# (metadata, ruleSet, as canonical JSON text or None) is part of it, as Confluent's ids are
Identity = tuple[str, str, tuple[Reference, ...], str | None, str | None]


class RegistryState:
    """Subjects with their versions, ids, levels and modes (see the module docstring)."""

    def __init__(self) -> None:
        self.subjects: dict[str, dict[int, SchemaVersion]] = {}
        self.ids: dict[int, Identity] = {}
        self.id_of: dict[Identity, int] = {}
        self.configs: dict[str | None, str] = {}
        self.modes: dict[str | None, str] = {}
        self.max_id = 0
        self.next_offset = 0  # the offset of the next `_schemas` record to apply

    # -- applying records ------------------------------------------------------------------------------
    def apply(self, offset: int, key: bytes | None, value: bytes | None, decoded: SchemaVersion | None = None
              ) -> None:
        """Apply the record at `offset`; one this registry cannot read is logged and skipped (never fatal:
        every broker must go on serving what it can read). `decoded`: the value of a SCHEMA record, decoded
        already (`store` decodes a large one on the CPU pool)."""
        self.next_offset = offset + 1
        if key is None:
            return
        try:
            k = decode_key(key)
            if k.keytype == "SCHEMA":
                assert k.subject is not None and k.version is not None  # decode_key checks both
                if value is None:
                    self._remove(k.subject, k.version)
                else:
                    self._put(decoded if decoded is not None else decode_version(value))
            elif k.keytype in ("CONFIG", "MODE"):
                self._setting(k.keytype, k.subject, value)
            elif k.keytype in ("DELETE_SUBJECT", "CLEAR_SUBJECT") and k.subject is not None:
                self._subject_marker(k.keytype, k.subject, value)
            elif k.keytype != "NOOP":
                log.warning("_schemas offset %d: key type %r is not one this registry reads; skipped",
                            offset, k.keytype)
        except (ValueError, AssertionError) as exc:
            log.warning("_schemas offset %d: unreadable record skipped: %s", offset, exc)

    def _put(self, sv: SchemaVersion) -> None:
        identity: Identity = (sv.schema_type, sv.schema, sv.references, sv.metadata, sv.rule_set)
        self.subjects.setdefault(sv.subject, {})[sv.version] = sv
        self.ids[sv.schema_id] = identity
        self.id_of.setdefault(identity, sv.schema_id)
        self.max_id = max(self.max_id, sv.schema_id)

    def _remove(self, subject: str, version: int) -> None:
        versions = self.subjects.get(subject, {})
        sv = versions.pop(version, None)
        if not versions:
            self.subjects.pop(subject, None)
        if sv is not None and not self.users_of(sv.schema_id):
            identity = self.ids.pop(sv.schema_id, None)
            if identity is not None and self.id_of.get(identity) == sv.schema_id:
                del self.id_of[identity]

    def _setting(self, keytype: str, subject: str | None, value: bytes | None) -> None:
        table, field, allowed = (self.configs, "compatibilityLevel", LEVELS) if keytype == "CONFIG" \
            else (self.modes, "mode", MODES)
        if value is None:
            table.pop(subject, None)
            return
        data = json.loads(value)
        setting = data.get(field) if isinstance(data, dict) else None
        if setting not in allowed:
            raise ValueError(f"a {keytype} value needs '{field}' among {allowed}, got {value[:200]!r}")
        table[subject] = str(setting)

    def _subject_marker(self, keytype: str, subject: str, value: bytes | None) -> None:
        data = json.loads(value) if value is not None else {}
        upto = data.get("version") if isinstance(data, dict) else None
        for version in sorted(self.subjects.get(subject, {})):
            if isinstance(upto, int) and version > upto:
                continue
            if keytype == "CLEAR_SUBJECT":
                self._remove(subject, version)
            else:
                self._put(replace(self.subjects[subject][version], deleted=True))

    # -- reading ---------------------------------------------------------------------------------------
    def versions(self, subject: str, *, deleted: bool = False) -> list[SchemaVersion]:
        """The subject's versions in order; soft-deleted ones only with `deleted`."""
        found = self.subjects.get(subject, {})
        return [found[v] for v in sorted(found) if deleted or not found[v].deleted]

    def subject_names(self, *, deleted: bool = False) -> list[str]:
        return sorted(s for s in self.subjects if self.versions(s, deleted=deleted))

    def users_of(self, schema_id: int, *, deleted: bool = True) -> list[SchemaVersion]:
        """The subject versions registered with `schema_id`."""
        return [sv for subject in sorted(self.subjects) for sv in self.versions(subject, deleted=deleted)
                if sv.schema_id == schema_id]

    def referenced_by(self, subject: str, version: int) -> list[SchemaVersion]:
        """Live versions whose references name `subject` `version`."""
        return [sv for name in sorted(self.subjects) for sv in self.versions(name)
                if any(r.subject == subject and r.version == version for r in sv.references)]

    def level(self, subject: str | None) -> str:
        """The compatibility level in force for `subject` (its own, else the global one, else BACKWARD)."""
        if subject is not None and subject in self.configs:
            return self.configs[subject]
        return self.configs.get(None, DEFAULT_LEVEL)

    def mode(self, subject: str | None) -> str:
        """The mode in force for `subject`: a global READONLY_OVERRIDE, else its own, else the global one."""
        if self.modes.get(None) == "READONLY_OVERRIDE":
            return "READONLY_OVERRIDE"
        return self.own_mode(subject)

    def own_mode(self, subject: str | None) -> str:
        """The mode set for `subject`, else the global one (what `GET /mode/{subject}` shows)."""
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        return self.modes.get(None, DEFAULT_MODE)
