"""The controller's client-quota operation: AlterClientQuotas' entries decided and recorded in one metadata entry.

Why: a quota is enforced by every broker, so the change is the controller's to decide and the metadata log's to
carry (`client_quota` records, one per key, as Kafka's ClientQuotaControlManager writes them). The rules are
`metadata.client_quotas`'; an entry that breaks one is answered INVALID_REQUEST and changes nothing, the others are
applied together. Composed by `core.Controller`, which gives it the shared state (`state`) and the one fenced write
path (`writer`).
"""

from __future__ import annotations

import logging
from typing import TypedDict

from kelp.errors import ErrorCode, InvalidRequestError

from ...metadata.client_quotas import InvalidQuota, checked_value, client_quota_record, entity_of
from ...metadata.records import ClientQuotaRecord, MetadataRecord
from .state import ControllerState
from .writer import MetadataWriter

__all__ = ["QuotaAdmin", "QuotaAnswer"]

log = logging.getLogger("kelp.broker.controller")


class QuotaAnswer(TypedDict):
    """alter_client_quotas: one result per entry, in order."""

    results: list[tuple[int, str | None]]
    metadata_offset: int


class QuotaAdmin:
    """Setting and removing client quotas (Kafka's ClientQuotaControlManager)."""

    def __init__(self, state: ControllerState, writer: MetadataWriter) -> None:
        self.state = state
        self.writer = writer

    async def alter_client_quotas(self, *, entries: list[object], validate_only: bool = False) -> QuotaAnswer:
        """Entries are `{"entity": [{"entity_type", "entity_name"}], "ops": [{"key", "value", "remove"}]}`; an
        entry with an error changes nothing, the others' changes are one metadata entry."""
        async with self.state.lock:
            self.writer.check_fresh()
            results: list[tuple[int, str | None]] = []
            records: list[ClientQuotaRecord] = []
            if not isinstance(entries, list):
                raise InvalidRequestError("alter_client_quotas: entries must be a list")
            for entry in entries:
                try:
                    if not isinstance(entry, dict) or not isinstance(entry.get("ops"), list):
                        raise InvalidQuota("an entry needs an entity and a list of ops")
                    entity = entity_of(entry.get("entity"))
                    mine: dict[str, float | None] = {}
                    for op in entry["ops"]:
                        key = op.get("key") if isinstance(op, dict) else None
                        if not isinstance(op, dict) or key in mine:
                            raise InvalidQuota(f"Duplicate quota key {str(key)[:64]} (or a malformed op)")
                        if op.get("remove"):
                            checked_value(entity, key, 0)
                            mine[str(key)] = None
                        else:
                            mine[str(key)] = checked_value(entity, key, op.get("value"))
                except InvalidQuota as exc:
                    results.append((ErrorCode.INVALID_REQUEST, str(exc)))
                    continue
                results.append((ErrorCode.NONE, None))
                current = self.state.image.client_quotas.get(entity, {})
                records += [client_quota_record(entity, k, v) for k, v in mine.items()
                            if (v is None and k in current) or (v is not None and current.get(k) != v)]
            if records and not validate_only:
                written: list[MetadataRecord] = [*records]
                await self.writer.append(written)
                for rec in records:
                    log.info("client quota %s of %s: %s", rec["key"], rec["entity"],
                             "removed" if rec["value"] is None else rec["value"])
            return {"results": results, "metadata_offset": self.state.image.offset}
