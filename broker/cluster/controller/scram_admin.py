"""The controller's SCRAM user operation: credentials set and deleted in one metadata-log entry.

Why: AlterUserScramCredentials (`kafka-configs --entity-type users --alter --add-config 'SCRAM-SHA-512=[...]'`)
and the admin API's `/admin/v1/users` routes change credentials every broker authenticates against, so the
change is the controller's to decide and the metadata log's to carry (`scram_credential` and
`remove_scram_credential` records), as Kafka's ScramControlManager does. The broker that received the
request has already turned a salted password into the credential (salt, StoredKey, ServerKey, iterations):
neither a password nor a salted password ever reaches the controller or the log.

Kafka's rules, per user: a (user, mechanism) named twice in one request is DUPLICATE_RESOURCE ("A user
credential cannot be altered twice in the same request"); an unknown mechanism UNSUPPORTED_SASL_MECHANISM;
an empty user name, or iterations outside 4096..16384, UNACCEPTABLE_CREDENTIAL; deleting a credential that
does not exist RESOURCE_NOT_FOUND. A user with any error changes nothing; the others' changes are one entry.
Composed by `core.Controller`, which gives it the shared state (`state`) and the one fenced write path (`writer`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypedDict

from kelp.errors import ErrorCode, InvalidRequestError
from kelp.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramError, ScramMechanism

from ...metadata.records import (
    MetadataRecord,
    RemoveScramCredentialRecord,
    ScramCredentialRecord,
    remove_scram_credential_record,
    scram_credential_record,
)
from ...metadata.scram_credentials import InvalidScramRecord, credential_from_record
from .state import ControllerState
from .writer import MetadataWriter

__all__ = ["ScramAdmin", "ScramAnswer", "ScramUserResult"]

log = logging.getLogger("kelp.broker.controller")


class ScramUserResult(TypedDict):
    user: str
    error_code: int
    error_message: str | None


class ScramAnswer(TypedDict):
    """alter_scram_credentials: one result per user named, in the order first named."""

    results: list[ScramUserResult]
    metadata_offset: int


def _text(item: object, key: str) -> str:
    value = item.get(key) if isinstance(item, dict) else None
    if not isinstance(value, str):
        raise InvalidRequestError(f"alter_scram_credentials: every item needs '{key}' as a string")
    return value


class ScramAdmin:
    """Setting and deleting users' SCRAM credentials."""

    def __init__(self, state: ControllerState, writer: MetadataWriter) -> None:
        self.state = state
        self.writer = writer

    async def alter_scram_credentials(self, *, upsertions: list[object] | None = None,
                                      deletions: list[object] | None = None) -> ScramAnswer:
        """Upsertions are `{"name", "mechanism", "salt", "stored_key", "server_key", "iterations"}` (base64
        salt and keys), deletions `{"name", "mechanism"}`."""
        async with self.state.lock:
            self.writer.check_fresh()
            order: list[str] = []
            errors: dict[str, tuple[int, str]] = {}
            changes: dict[str, list[ScramCredentialRecord | RemoveScramCredentialRecord]] = {}
            seen: set[tuple[str, str]] = set()

            def fail(user: str, code: int, message: str) -> None:
                errors.setdefault(user, (code, message))

            for kind, items in (("delete", deletions or []), ("upsert", upsertions or [])):
                for item in items:
                    user, mechanism = _text(item, "name"), _text(item, "mechanism")
                    if user not in order:
                        order.append(user)
                    if (user, mechanism) in seen:
                        fail(user, ErrorCode.DUPLICATE_RESOURCE,
                             "A user credential cannot be altered twice in the same request")
                        continue
                    seen.add((user, mechanism))
                    try:
                        ScramMechanism.from_name(mechanism)
                    except ScramError:
                        fail(user, ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {mechanism[:64]}")
                        continue
                    if kind == "delete":
                        if (user, mechanism) not in self.state.image.scram_credentials:
                            fail(user, ErrorCode.RESOURCE_NOT_FOUND,
                                 "Attempt to delete a user credential that does not exist")
                            continue
                        changes.setdefault(user, []).append(remove_scram_credential_record(user, mechanism))
                        continue
                    record = self._upsertion(user, mechanism, item, fail)
                    if record is not None:
                        changes.setdefault(user, []).append(record)
            records: list[MetadataRecord] = [r for user in order if user not in errors for r in changes.get(user, [])]
            await self.writer.append(records)
            for user in order:
                if user not in errors and user in changes:
                    log.info("SCRAM credentials of user %r: %s", user, ", ".join(
                        f"{'set' if r['type'] == 'scram_credential' else 'deleted'} {r['mechanism']}"
                        for r in changes[user]))
            results: list[ScramUserResult] = [
                {"user": user, "error_code": errors[user][0] if user in errors else ErrorCode.NONE,
                 "error_message": errors[user][1] if user in errors else None} for user in order]
            return {"results": results, "metadata_offset": self.state.image.offset}

    @staticmethod
    def _upsertion(user: str, mechanism: str, item: object,
                   fail: Callable[[str, int, str], None]) -> ScramCredentialRecord | None:
        if not user:
            fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            return None
        iterations = item.get("iterations") if isinstance(item, dict) else None
        if isinstance(iterations, bool) or not isinstance(iterations, int):
            raise InvalidRequestError("alter_scram_credentials: every upsertion needs 'iterations' as an integer")
        if iterations < MIN_ITERATIONS:
            fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
            return None
        if iterations > MAX_ITERATIONS:
            fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
            return None
        record = scram_credential_record(user, mechanism, salt=_text(item, "salt"),
                                         stored_key=_text(item, "stored_key"), server_key=_text(item, "server_key"),
                                         iterations=iterations)
        try:
            credential_from_record(record)
        except InvalidScramRecord as exc:
            fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc))
            return None
        return record
