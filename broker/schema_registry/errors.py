"""The errors the Schema Registry answers, with Confluent's HTTP statuses, error codes and messages.

Why: Confluent's clients (confluent-kafka's `SchemaRegistryClient`, the Java serializers) read
`error_code` to tell "subject not found" (40401) from "version not found" (40402) or an incompatible
schema (409); the codes and the wording of the messages follow Confluent's
`io.confluent.kafka.schemaregistry.rest.exceptions.Errors`, with the detail of what was wrong added where
Confluent's message names nothing. The codes themselves are `kelp.rest_errors.RegistryErrorCode` (here `Code`),
in the one table of Confluent's codes beside Kafka's.

This module must never decide anything: it only names failures.
"""

from __future__ import annotations

from kelp.rest_errors import RegistryErrorCode as Code

__all__ = ["RegistryError", "Code", "subject_not_found", "version_not_found", "schema_not_found", "invalid_schema",
           "invalid_version", "invalid_subject", "incompatible", "not_permitted", "store_error", "NotEncodable",
           "NotDecodable"]


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
    return RegistryError(404, Code.SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version: int | str) -> RegistryError:
    return RegistryError(404, Code.VERSION_NOT_FOUND, f"Version {version} not found (subject '{subject}').")


def schema_not_found(schema_id: int | None = None, detail: str = "") -> RegistryError:
    base = "Schema not found" if schema_id is None else f"Schema {schema_id} not found"
    return RegistryError(404, Code.SCHEMA_NOT_FOUND, f"{base}{detail}")


def invalid_schema(schema_type: str, detail: str) -> RegistryError:
    return RegistryError(422, Code.INVALID_SCHEMA, f"Invalid schema of type {schema_type}, details: {detail}")


def invalid_version(version: str) -> RegistryError:
    return RegistryError(422, Code.INVALID_VERSION, f"The specified version '{version}' is not a valid version id. "
                                               "Allowed values are between [1, 2^31-1] and the string \"latest\"")


def invalid_subject(subject: str, why: str) -> RegistryError:
    return RegistryError(422, Code.INVALID_SUBJECT, f"The specified subject '{subject}' is not a valid: {why}.")


def incompatible(subject: str, details: list[str]) -> RegistryError:
    return RegistryError(409, Code.INCOMPATIBLE_SCHEMA, "Schema being registered is incompatible with an earlier "
                                                   f"schema for subject \"{subject}\", details: [{', '.join(details)}]")


def not_permitted(message: str) -> RegistryError:
    return RegistryError(422, Code.OPERATION_NOT_PERMITTED, message)


def store_error(message: str) -> RegistryError:
    return RegistryError(500, Code.STORE_ERROR, message)
