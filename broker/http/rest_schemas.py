"""REST produce in a registered schema's format (AVRO, JSONSCHEMA, PROTOBUF): the HTTP side, for v2 and v3.

Why: both REST proxies name a record's schema the same few ways (an id, a subject and version, the latest
under the topic's subject, or a schema inline to register) and both must refuse the same things the same
way; the encoding itself is the registry's (`schema_registry.embedded`). This module finds the writer for
a request (`SchemaWriters.get`, remembered for the request, so a thousand records cost one lookup) and
says why when it cannot: the registry switched off on this broker (`http.schema.registry.enable`), a
schema or subject not found, an invalid or incompatible inline schema — each a `RegistryError` with
Confluent's code, which v2 answers as the request's error and v3 as the record's report. A schema given
inline is registered only for a principal that may register one directly (ALTER on the cluster, 403
otherwise); finding a registered one needs nothing beyond the produce route's WRITE on the topic, as
Confluent's proxy reads the registry with its own identity.

This module must never encode a value itself.
"""

from __future__ import annotations

from aiohttp import web

from kelp.json_types import JsonValue
from kelp.security.acl import AclOperation

from ..schema_registry.embedded import REST_TYPES, NotEncodable, SchemaWriter, find_writer
from ..schema_registry.errors import Code, RegistryError
from .access.route_access import CLUSTER, require
from .schema_registry_routes import register_schema, registry_of

__all__ = ["SchemaWriters", "SchemaWriter", "REST_TYPES", "NotEncodable", "RegistryError"]


class SchemaWriters:
    """The schema writers of one produce request, by what the request names."""

    def __init__(self, request: web.Request, topic: str) -> None:
        self.request = request
        self.topic = topic
        self._found: dict[tuple[object, ...], SchemaWriter] = {}

    def subject_of(self, is_key: bool, subject: str | None) -> str:
        """The subject a record's key or value names, else Confluent's TopicNameStrategy's (`<topic>-key|value`)."""
        return subject or f"{self.topic}-{'key' if is_key else 'value'}"

    async def version_of(self, subject: str, schema_id: int) -> int | None:
        """The newest live version of `subject` holding schema `schema_id` (what Confluent's produce report names
        as `schema_version`), None when the subject does not hold it."""
        registry = registry_of(self.request)
        if registry is None:
            return None
        held = [sv.version for sv in (await registry.state()).versions(subject) if sv.schema_id == schema_id]
        return max(held) if held else None

    async def get(self, *, is_key: bool, rest_type: str | None, schema_id: int | None = None,
                  version: int | None = None, subject: str | None = None, schema: str | None = None,
                  references: list[JsonValue] | None = None) -> SchemaWriter:
        """The writer; RegistryError (Confluent's status and code) naming why there is none."""
        schema_type = None
        if rest_type is not None:
            schema_type = REST_TYPES.get(rest_type)
            if schema_type is None:
                raise RegistryError(422, Code.INVALID_SCHEMA,
                                    f"unknown schema type {rest_type!r}: use AVRO, JSONSCHEMA or "
                                    "PROTOBUF")
        subject = self.subject_of(is_key, subject)
        key = (schema_type, schema_id, version, subject, schema, repr(references))
        found = self._found.get(key)
        if found is not None:
            return found
        registry = registry_of(self.request)
        if registry is None:
            raise RegistryError(404, 404, "the Schema Registry is disabled on this broker "
                                          "(http.schema.registry.enable=false): a record in a schema's format "
                                          "needs it; produce BINARY/JSON data or enable it")

        async def register(subject: str, body: dict[str, JsonValue]) -> dict[str, JsonValue]:
            # Registering changes the registry: what `POST /subjects/{s}/versions` needs, ALTER on the cluster.
            require(self.request, AclOperation.ALTER, CLUSTER, "kafka-cluster")
            return await register_schema(self.request, subject, body)

        found = await find_writer(registry, register, subject=subject, schema_type=schema_type, schema_id=schema_id,
                                  version=version, schema=schema, references=references)
        self._found[key] = found
        return found
