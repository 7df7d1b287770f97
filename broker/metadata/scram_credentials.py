"""SCRAM credentials in the cluster metadata: their records checked and applied, and the image's table of them.

Why: SCRAM users must be the same on every broker and survive restarts, and a broker must never hold a
password: Kafka keeps `UserScramCredentialRecord`s (salt, StoredKey, ServerKey, iterations) in its metadata
log, written by the controller, and every broker authenticates against its image. Kelp does the same with
the `scram_credential` and `remove_scram_credential` records (`records`); this module is the one
place that turns a record into a `ScramCredential` and back, with the checks every apply makes (a record
that breaks one is `MetadataCorrupt`, never applied):

- the user name is not empty, the mechanism is SCRAM-SHA-256 or SCRAM-SHA-512;
- salt and keys are base64, the keys as long as the mechanism's hash, the iterations within Kafka's
  4096..16384;
- a removal names a credential the image holds (nothing is inferred from absence).

The image keeps `{(user, mechanism): ScramCredential}`; snapshots carry the records. Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Mapping

from kelp.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential, ScramError, ScramMechanism

from .records import (
    RemoveScramCredentialRecord,
    ScramCredentialRecord,
    scram_credential_record,
)

__all__ = ["ScramTable", "credential_from_record", "record_of", "apply_scram_record", "remove_scram_record",
           "scram_records", "InvalidScramRecord"]

ScramTable = Mapping[tuple[str, str], ScramCredential]
"""(user, mechanism name) -> its credential."""


class InvalidScramRecord(ValueError):
    """A SCRAM record that breaks a rule above; the message names the user and mechanism, never a key."""


def _b64(value: object, what: str, where: str) -> bytes:
    if not isinstance(value, str):
        raise InvalidScramRecord(f"{where}: {what} must be base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidScramRecord(f"{where}: {what} is not valid base64") from None


def credential_from_record(rec: ScramCredentialRecord) -> tuple[str, ScramCredential]:
    """(user, credential) of a record, checked (InvalidScramRecord)."""
    user, mechanism_name, iterations = rec["user"], rec["mechanism"], rec["iterations"]
    where = f"SCRAM credential of user {user!r} ({mechanism_name})"
    if not isinstance(user, str) or not user:
        raise InvalidScramRecord("SCRAM credential record without a user name")
    try:
        mechanism = ScramMechanism.from_name(str(mechanism_name))
    except ScramError:
        raise InvalidScramRecord(f"{where}: unknown mechanism") from None
    if isinstance(iterations, bool) or not isinstance(iterations, int) \
            or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise InvalidScramRecord(f"{where}: iterations {iterations!r} outside {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    size = hashlib.new(mechanism.hash_name).digest_size
    salt = _b64(rec["salt"], "the salt", where)
    stored, server = _b64(rec["stored_key"], "the stored key", where), _b64(rec["server_key"], "the server key", where)
    if not salt or len(stored) != size or len(server) != size:
        raise InvalidScramRecord(f"{where}: an empty salt, or keys that are not {size} bytes")
    return user, ScramCredential(mechanism, salt, stored, server, iterations)


def record_of(user: str, credential: ScramCredential) -> ScramCredentialRecord:
    fields = credential.to_record()
    return scram_credential_record(user, credential.mechanism.mechanism_name, salt=str(fields["salt"]),
                                   stored_key=str(fields["stored_key"]), server_key=str(fields["server_key"]),
                                   iterations=credential.iterations)


def apply_scram_record(table: dict[tuple[str, str], ScramCredential], rec: ScramCredentialRecord) -> None:
    user, credential = credential_from_record(rec)
    table[(user, credential.mechanism.mechanism_name)] = credential


def remove_scram_record(table: dict[tuple[str, str], ScramCredential], rec: RemoveScramCredentialRecord) -> None:
    key = (str(rec["user"]), str(rec["mechanism"]))
    if key not in table:
        raise InvalidScramRecord(f"remove_scram_credential of user {key[0]!r} ({key[1]}), which has no such "
                                 "credential")
    del table[key]


def scram_records(table: ScramTable) -> list[ScramCredentialRecord]:
    """The table as records, in (user, mechanism) order (snapshots)."""
    return [record_of(user, table[(user, mechanism)]) for user, mechanism in sorted(table)]


def table_from(records: Iterable[ScramCredentialRecord]) -> dict[tuple[str, str], ScramCredential]:
    table: dict[tuple[str, str], ScramCredential] = {}
    for rec in records:
        apply_scram_record(table, rec)
    return table
