"""The errors the Schema Registry answers, with Confluent's HTTP statuses, error codes and messages.

Why: Confluent's clients (confluent-kafka's `SchemaRegistryClient`, the Java serializers) read
`error_code` to tell "subject not found" (40401) from "version not found" (40402) or an incompatible
schema (409); the codes and the wording of the messages follow Confluent's
`io.confluent.kafka.schemaregistry.rest.exceptions.Errors`, with the detail of what was wrong added where
Confluent's message names nothing.

This module must never decide anything: it only names failures.
"""

from __future__ import annotations

__all__ = ["RegistryError", "subject_not_found", "version_not_found", "schema_not_found", "invalid_schema",
           "invalid_version", "invalid_subject", "incompatible", "not_permitted", "store_error",
           "NotEncodable", "NotDecodable",
           "SUBJECT_NOT_FOUND", "VERSION_NOT_FOUND", "SCHEMA_NOT_FOUND", "SUBJECT_SOFT_DELETED",
           "SUBJECT_NOT_SOFT_DELETED", "VERSION_SOFT_DELETED", "VERSION_NOT_SOFT_DELETED",
           "SUBJECT_COMPATIBILITY_NOT_CONFIGURED", "SUBJECT_MODE_NOT_CONFIGURED", "INVALID_SCHEMA",
           "INVALID_VERSION", "INVALID_COMPATIBILITY_LEVEL", "INVALID_MODE", "OPERATION_NOT_PERMITTED",
           "REFERENCE_EXISTS", "ID_DOES_NOT_MATCH", "INVALID_SUBJECT", "STORE_ERROR", "OPERATION_TIMEOUT",
           "REQUEST_FORWARDING_FAILED", "UNKNOWN_LEADER"]

SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
VERSION_SOFT_DELETED = 40406
VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_MODE_NOT_CONFIGURED = 40409
INCOMPATIBLE_SCHEMA = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
REFERENCE_EXISTS = 42206
ID_DOES_NOT_MATCH = 42207
INVALID_SUBJECT = 42208
STORE_ERROR = 50001
OPERATION_TIMEOUT = 50002
REQUEST_FORWARDING_FAILED = 50003
UNKNOWN_LEADER = 50004


class RegistryError(Exception):
    """A refused registry request: the HTTP `status`, Confluent's `error_code` and a message naming the cause."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message



class NotEncodable(Exception):
    """JSON data that does not match its schema (REST produce); the message names the field and why."""


class NotDecodable(Exception):
    """Stored bytes that are not a value in Confluent's wire format, or not in the schema they name."""


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version: int | str) -> RegistryError:
    return RegistryError(404, VERSION_NOT_FOUND, f"Version {version} not found (subject '{subject}').")


def schema_not_found(schema_id: int | None = None, detail: str = "") -> RegistryError:
    base = "Schema not found" if schema_id is None else f"Schema {schema_id} not found"
    return RegistryError(404, SCHEMA_NOT_FOUND, f"{base}{detail}")


def invalid_schema(schema_type: str, detail: str) -> RegistryError:
    return RegistryError(422, INVALID_SCHEMA, f"Invalid schema of type {schema_type}, details: {detail}")


def invalid_version(version: str) -> RegistryError:
    return RegistryError(422, INVALID_VERSION, f"The specified version '{version}' is not a valid version id. "
                                               "Allowed values are between [1, 2^31-1] and the string \"latest\"")


def invalid_subject(subject: str, why: str) -> RegistryError:
    return RegistryError(422, INVALID_SUBJECT, f"The specified subject '{subject}' is not a valid: {why}.")


def incompatible(subject: str, details: list[str]) -> RegistryError:
    return RegistryError(409, INCOMPATIBLE_SCHEMA, "Schema being registered is incompatible with an earlier "
                                                   f"schema for subject \"{subject}\", details: [{', '.join(details)}]")


def not_permitted(message: str) -> RegistryError:
    return RegistryError(422, OPERATION_NOT_PERMITTED, message)


def store_error(message: str) -> RegistryError:
    return RegistryError(500, STORE_ERROR, message)
