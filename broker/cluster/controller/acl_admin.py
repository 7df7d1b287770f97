"""ACLs decided by the controller: CreateAcls and DeleteAcls as metadata-log records.

Why: ACLs are cluster metadata (KRaft's AccessControlEntryRecord and RemoveAccessControlEntryRecord):
one writer orders every change, every broker replays them into its image and its authorizer, and a
snapshot carries them, so a change is seen by every broker, survives a controller failover and a
restart, and is never applied twice. This follows Kafka's AclControlManager: a new ACL is checked
(`validate_acl_binding`: Kafka's broker and controller checks), one already stored is a success
without a record, each gets a fresh id; a delete filter with UNKNOWN parts is refused
(`validate_acl_filter`), every filter is matched against the ACLs as they were before the request
and each matching ACL is removed once (a binding two filters match is reported by both).

Composed by `core.Controller`, which gives it the shared state (`state`) and the one fenced write path (`writer`).
The arguments arrive as JSON (the operation also runs over `/cluster/v1/controller/<op>`): bindings and filters in
`security.acl_json`'s shape. Every change is one metadata-log entry; nothing here does I/O itself.
"""

from __future__ import annotations

import logging
import uuid

from kelp.errors import ErrorCode, InvalidRequestError, KelpError
from kelp.security.acl import AclBinding, InvalidAclError, validate_acl_binding, validate_acl_filter
from kelp.security.acl_json import binding_from_json, binding_to_json, filter_from_json

from ...loop_budget import LoopBudget
from ...metadata.controller_answers import AclError, CreateAclsAnswer, DeleteAclsAnswer, DeleteAclsResult
from ...metadata.records import MetadataRecord, acl_record, remove_acl_record
from .state import ControllerState
from .writer import MetadataWriter

__all__ = ["AclAdmin", "MAX_ACLS_PER_OPERATION"]

log = logging.getLogger("kelp.broker.controller")

MAX_ACLS_PER_OPERATION = 10_000  # Kafka's MAX_RECORDS_PER_USER_OP


def _error(exc: KelpError) -> AclError:
    return {"error_code": int(exc.code), "message": str(exc)}


class AclAdmin:
    """CreateAcls and DeleteAcls, on the controller."""

    def __init__(self, state: ControllerState, writer: MetadataWriter) -> None:
        self.state = state
        self.writer = writer

    async def create_acls(self, *, acls: list[object]) -> CreateAclsAnswer:
        if not isinstance(acls, list):
            raise InvalidRequestError("create_acls: 'acls' must be a list of ACL bindings")
        if len(acls) > MAX_ACLS_PER_OPERATION:
            raise InvalidRequestError(f"Cannot create more than {MAX_ACLS_PER_OPERATION} ACLs in one request "
                                      f"({len(acls)} given); split it")
        async with self.state.lock:
            self.writer.check_fresh()
            existing = set(self.state.image.acls.values())
            results: list[AclError | None] = []
            created: list[tuple[str, AclBinding]] = []
            for doc in acls:
                try:
                    binding = binding_from_json(doc)
                    validate_acl_binding(binding)
                except InvalidAclError as exc:
                    results.append(_error(exc))
                    continue
                if binding not in existing:  # one copy of each binding, as Kafka keeps
                    existing.add(binding)
                    created.append((self._new_acl_id(), binding))
                results.append(None)
            records: list[MetadataRecord] = [acl_record(i, binding_to_json(b)) for i, b in created]
            await self.writer.append(records)
            for acl_id, binding in created:
                log.info("ACL %s created: %s", acl_id, binding)
            return {"results": results, "metadata_offset": self.state.image.offset}

    def _new_acl_id(self) -> str:
        while True:
            acl_id = uuid.uuid4().hex
            if acl_id not in self.state.image.acls:
                return acl_id

    async def delete_acls(self, *, filters: list[object]) -> DeleteAclsAnswer:
        if not isinstance(filters, list):
            raise InvalidRequestError("delete_acls: 'filters' must be a list of ACL filters")
        async with self.state.lock:
            self.writer.check_fresh()
            results: list[DeleteAclsResult] = []
            doomed: dict[str, AclBinding] = {}
            budget = LoopBudget()  # each filter is matched against every ACL: a thousand of each is 0.5 s
            for doc in filters:
                await budget.tick()
                try:
                    acl_filter = filter_from_json(doc)
                    validate_acl_filter(acl_filter)
                except InvalidAclError as exc:
                    results.append({"error": _error(exc), "deleted": []})
                    continue
                matched = {i: b for i, b in self.state.image.acls.items() if acl_filter.matches(b)}
                doomed.update(matched)
                results.append({"error": None, "deleted": [binding_to_json(b) for b in matched.values()]})
            if len(doomed) > MAX_ACLS_PER_OPERATION:
                message = f"Cannot remove more than {MAX_ACLS_PER_OPERATION} acls in a single delete operation."
                return {"results": [{"error": {"error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR), "message": message},
                                     "deleted": []} for _ in filters], "metadata_offset": self.state.image.offset}
            await self.writer.append([remove_acl_record(i) for i in doomed])
            for acl_id, binding in doomed.items():
                log.info("ACL %s deleted: %s", acl_id, binding)
            return {"results": results, "metadata_offset": self.state.image.offset}
