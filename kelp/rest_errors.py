"""Confluent's error codes — the REST Proxy's (v2 and v3) and the Schema Registry's — in one table.

Why: clients written against Confluent (confluent-kafka's `SchemaRegistryClient`, the Java serializers,
scripts reading a REST Proxy's answers) tell failures apart by `error_code`, a number of Confluent's own:
the HTTP status times 100 plus a number (40401 a topic or a subject not found, 42201 an invalid schema), or
the HTTP status itself where Confluent answers it as such (409 an incompatible schema, 422 a constraint
violation). Kafka's own codes are `kelp.errors.ErrorCode`; Kelp's own HTTP APIs (/admin/v1, /cluster/v1)
answer those. This module holds Confluent's two namespaces:

- `RestErrorCode`: io.confluent.kafkarest.Errors and rest-utils' KafkaExceptionMapper (which maps a Kafka
  exception to 400/40002, 401/40101, 403/40301, 404/40403, 500/50002, 500/50003, 503/50302). One number
  may carry two names where Confluent gives it two meanings (40403, 42901): the later name is an alias.
- `RegistryErrorCode`: io.confluent.kafka.schemaregistry.rest.exceptions.Errors.

`CONFLUENT_ERRORS` lists every documented code with the API answering it, its meaning, and — for a code
Kelp never answers, or answers only when the cluster fails — why no request triggers it;
`tests/http/test_confluent_error_table.py` sends the trigger of every other one to a broker and checks
status and code. `http_status(code)` is the status a code is answered with.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

__all__ = ["RestErrorCode", "RegistryErrorCode", "ConfluentError", "CONFLUENT_ERRORS", "http_status"]


class RestErrorCode(IntEnum):
    """Confluent REST Proxy `error_code`s, with Confluent's names (without their _ERROR_CODE suffix)."""

    INVALID_CONSUMER_CONFIG_CONSTRAINT = 40001
    KAFKA_BAD_REQUEST = 40002  # a Kafka error that is the request's fault (TopicExists, InvalidPartitions, ...)
    KAFKA_AUTHENTICATION = 40101
    KAFKA_AUTHORIZATION = 40301
    TOPIC_NOT_FOUND = 40401
    PARTITION_NOT_FOUND = 40402
    CONSUMER_INSTANCE_NOT_FOUND = 40403
    KAFKA_UNKNOWN_TOPIC_PARTITION = 40403  # v3's name of 40403 (KafkaExceptionMapper): an alias
    LEADER_NOT_AVAILABLE = 40404
    CONSUMER_FORMAT_MISMATCH = 40601  # a read asked another embedded format than the instance's
    SERIALIZATION = 40801  # KafkaRestExceptionMapper: a SerializationException (v3 produce in a schema's format)
    CONSUMER_ALREADY_SUBSCRIBED = 40901
    CONSUMER_ALREADY_EXISTS = 40902
    ILLEGAL_STATE = 40903
    CONSTRAINT_VIOLATION = 422  # rest-utils' RestConstraintViolationException: the status is the code
    KEY_SCHEMA_MISSING = 42201  # keys but no key schema; Kelp answers it for a malformed partitions/offsets list too
    VALUE_SCHEMA_MISSING = 42202
    JSON_CONVERSION = 42203  # a record's JSON does not match its schema (Avro, JSON Schema, Protobuf)
    INVALID_CONSUMER_CONFIG = 42204
    INVALID_SCHEMA = 42205
    TOO_MANY_REQUESTS = 42901  # a throttled request (ThrottlingQuotaExceeded, v3's rate limits)
    TOO_MANY_CONSUMER_INSTANCES = 42901  # Kelp's name: a broker already serves http.consumer.max.instances
    ZOOKEEPER_ERROR = 50001
    KAFKA_ERROR = 50002  # any other Kafka exception
    KAFKA_RETRIABLE = 50003  # a retriable Kafka exception: the cluster did not answer in time
    NO_SSL_SUPPORT = 50101
    NO_SIMPLE_CONSUMER_AVAILABLE = 50301
    BROKER_NOT_AVAILABLE = 50302


class RegistryErrorCode(IntEnum):
    """Confluent Schema Registry `error_code`s, with Confluent's names (without their _ERROR_CODE suffix)."""

    SUBJECT_NOT_FOUND = 40401
    VERSION_NOT_FOUND = 40402
    SCHEMA_NOT_FOUND = 40403
    SUBJECT_SOFT_DELETED = 40404
    SUBJECT_NOT_SOFT_DELETED = 40405
    SCHEMAVERSION_SOFT_DELETED = 40406
    SCHEMAVERSION_NOT_SOFT_DELETED = 40407
    SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED = 40408
    SUBJECT_LEVEL_MODE_NOT_CONFIGURED = 40409
    ASSOCIATION_NOT_FOUND = 40410
    # Confluent 7.x answers the HTTP status as the code (RestIncompatibleSchemaException.DEFAULT_ERROR_CODE);
    # 8.x's Errors names 40901. Kelp answers 409, which every Confluent client reads as the same conflict.
    INCOMPATIBLE_SCHEMA = 409
    TOO_MANY_ASSOCIATIONS = 40902
    ASSOCIATION_FOR_RESOURCE_EXISTS = 40903
    ASSOCIATION_FOR_SUBJECT_EXISTS = 40904
    STRONG_ASSOCIATION_FOR_SUBJECT_EXISTS = 40905
    NO_ACTIVE_SUBJECT_VERSION_EXISTS = 40907
    ASSOCIATION_FROZEN = 40908
    INVALID_SCHEMA = 42201
    INVALID_VERSION = 42202
    INVALID_COMPATIBILITY_LEVEL = 42203
    INVALID_MODE = 42204
    OPERATION_NOT_PERMITTED = 42205
    REFERENCE_EXISTS = 42206
    ID_DOES_NOT_MATCH = 42207
    INVALID_SUBJECT = 42208
    SCHEMA_TOO_LARGE = 42209
    INVALID_RULESET = 42210
    CONTEXT_NOT_EMPTY = 42211
    INVALID_ASSOCIATION = 42212
    ASSOCIATION_BATCH_LIMIT_EXCEEDED = 42213
    STORE_ERROR = 50001
    OPERATION_TIMEOUT = 50002
    REQUEST_FORWARDING_FAILED = 50003  # the leader of the registry did not answer a forwarded write
    UNKNOWN_LEADER = 50004  # no leader of the registry is known to forward a write to
    JSON_PARSE_ERROR = 50005  # Confluent's RestService (the client) reports an answer it could not parse


def http_status(code: int) -> int:
    """The HTTP status Confluent answers `code` with: its first three digits, or the code itself (409, 422)."""
    return code // 100 if code >= 10000 else code


class ConfluentError(NamedTuple):
    """One documented code: `api` answering it (v2, v3, registry), what it means, and `untriggered`: why the
    table's test sends no trigger for it — Kelp never answers it, or only when the cluster fails (empty: the
    test sends its trigger to a broker and checks status and code)."""

    code: RestErrorCode | RegistryErrorCode
    api: str
    meaning: str
    untriggered: str = ""

    @property
    def status(self) -> int:
        return http_status(self.code)


_R, _S = RestErrorCode, RegistryErrorCode
_ASSOCIATIONS = "Kelp has no associations API (Confluent Cloud's subject-to-resource links)"

CONFLUENT_ERRORS: tuple[ConfluentError, ...] = (
    ConfluentError(_R.INVALID_CONSUMER_CONFIG_CONSTRAINT, "v2", "a consumer setting breaks a constraint",
                   "Kelp refuses every consumer setting it cannot take with 42204; 40001 comes from the "
                   "validators of Confluent's own config library"),
    ConfluentError(_R.KAFKA_BAD_REQUEST, "v2 v3", "a Kafka error that is the request's fault (topic exists, "
                   "invalid partitions or replication factor, invalid config, policy violation)"),
    ConfluentError(_R.KAFKA_AUTHENTICATION, "v2 v3", "the cluster refused the proxy's Kafka authentication",
                   "the HTTP listener authenticates the caller itself and answers 401/401 as rest-utils' "
                   "authenticator does; no Kafka authentication failure reaches a REST route"),
    ConfluentError(_R.KAFKA_AUTHORIZATION, "v2 v3", "the caller may not do the operation on the resource"),
    ConfluentError(_R.TOPIC_NOT_FOUND, "v2", "the topic does not exist"),
    ConfluentError(_R.PARTITION_NOT_FOUND, "v2", "the topic exists, the partition does not"),
    ConfluentError(_R.CONSUMER_INSTANCE_NOT_FOUND, "v2", "no such consumer instance"),
    ConfluentError(_R.KAFKA_UNKNOWN_TOPIC_PARTITION, "v3", "the topic or partition does not exist"),
    ConfluentError(_R.LEADER_NOT_AVAILABLE, "v2", "the partition has no leader",
                   "kafka-rest defines it and raises it nowhere since v1's simple consumer went"),
    ConfluentError(_R.CONSUMER_FORMAT_MISMATCH, "v2", "a read asked another embedded format than the instance's"),
    ConfluentError(_R.SERIALIZATION, "v3", "the serializer failed (its schema registry unreachable)",
                   "Kelp's REST produce encodes with the broker's own registry: a registry failure answers the "
                   "registry's code"),
    ConfluentError(_R.CONSUMER_ALREADY_SUBSCRIBED, "v2", "the instance is subscribed to other topics",
                   "a second subscribe replaces the subscription, as Kafka's consumer.subscribe does"),
    ConfluentError(_R.CONSUMER_ALREADY_EXISTS, "v2", "an instance of that name exists in the group"),
    ConfluentError(_R.ILLEGAL_STATE, "v2", "the instance cannot do it now (assign after subscribe, ...)"),
    ConfluentError(_R.CONSTRAINT_VIOLATION, "v2 v3", "the request body is missing or of the wrong shape"),
    ConfluentError(_R.KEY_SCHEMA_MISSING, "v2", "records with keys, no key schema"),
    ConfluentError(_R.VALUE_SCHEMA_MISSING, "v2", "records with values, no value schema"),
    ConfluentError(_R.JSON_CONVERSION, "v2", "a record's JSON does not match its schema"),
    ConfluentError(_R.INVALID_CONSUMER_CONFIG, "v2", "a consumer setting the instance cannot take"),
    ConfluentError(_R.INVALID_SCHEMA, "v2", "the request's schema does not parse",
                   "Kelp registers a produce request's schema in its registry, which answers 42201 (the "
                   "registry's INVALID_SCHEMA), as Confluent's proxy relays its registry's refusal"),
    ConfluentError(_R.TOO_MANY_REQUESTS, "v2 v3", "throttled, or the broker serves http.consumer.max.instances"),
    ConfluentError(_R.ZOOKEEPER_ERROR, "v2", "ZooKeeper failed", "Kelp has no ZooKeeper"),
    ConfluentError(_R.KAFKA_ERROR, "v2 v3", "any other Kafka error",
                   "Kelp answers such an error with Kafka's own code and an HTTP status of its kind"),
    ConfluentError(_R.KAFKA_RETRIABLE, "v2 v3", "the cluster did not answer in time; retry",
                   "answered by a consumer instance whose cluster calls timed out (consumer_instance.py, 503): "
                   "no request of a single healthy broker triggers it"),
    ConfluentError(_R.NO_SSL_SUPPORT, "v2", "only SSL endpoints", "v1's simple consumer's; Kelp speaks TLS"),
    ConfluentError(_R.NO_SIMPLE_CONSUMER_AVAILABLE, "v2", "the simple consumer pool is empty",
                   "v1's simple consumer pool; Kelp has none"),
    ConfluentError(_R.BROKER_NOT_AVAILABLE, "v2 v3", "a broker the request needs is down",
                   "Kelp answers a partition without a reachable leader 503 with Kafka's code"),
    ConfluentError(_S.SUBJECT_NOT_FOUND, "registry", "no such subject"),
    ConfluentError(_S.VERSION_NOT_FOUND, "registry", "no such version of the subject"),
    ConfluentError(_S.SCHEMA_NOT_FOUND, "registry", "no schema of that id"),
    ConfluentError(_S.SUBJECT_SOFT_DELETED, "registry", "the subject was soft-deleted already"),
    ConfluentError(_S.SUBJECT_NOT_SOFT_DELETED, "registry", "a permanent delete of a subject not soft-deleted"),
    ConfluentError(_S.SCHEMAVERSION_SOFT_DELETED, "registry", "the version was soft-deleted already"),
    ConfluentError(_S.SCHEMAVERSION_NOT_SOFT_DELETED, "registry", "a permanent delete of a live version"),
    ConfluentError(_S.SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED, "registry", "no subject-level compatibility"),
    ConfluentError(_S.SUBJECT_LEVEL_MODE_NOT_CONFIGURED, "registry", "no subject-level mode"),
    ConfluentError(_S.ASSOCIATION_NOT_FOUND, "registry", "no such association", _ASSOCIATIONS),
    ConfluentError(_S.INCOMPATIBLE_SCHEMA, "registry", "the schema is incompatible with the subject's"),
    ConfluentError(_S.TOO_MANY_ASSOCIATIONS, "registry", "too many associations", _ASSOCIATIONS),
    ConfluentError(_S.ASSOCIATION_FOR_RESOURCE_EXISTS, "registry", "an association exists", _ASSOCIATIONS),
    ConfluentError(_S.ASSOCIATION_FOR_SUBJECT_EXISTS, "registry", "an association exists", _ASSOCIATIONS),
    ConfluentError(_S.STRONG_ASSOCIATION_FOR_SUBJECT_EXISTS, "registry", "an association exists", _ASSOCIATIONS),
    ConfluentError(_S.NO_ACTIVE_SUBJECT_VERSION_EXISTS, "registry", "no live version to associate",
                   _ASSOCIATIONS),
    ConfluentError(_S.ASSOCIATION_FROZEN, "registry", "the association is frozen", _ASSOCIATIONS),
    ConfluentError(_S.INVALID_SCHEMA, "registry", "the schema does not parse, or breaks its format's rules"),
    ConfluentError(_S.INVALID_VERSION, "registry", "a version that is neither 1..2^31-1 nor latest"),
    ConfluentError(_S.INVALID_COMPATIBILITY_LEVEL, "registry", "no such compatibility level"),
    ConfluentError(_S.INVALID_MODE, "registry", "no such mode"),
    ConfluentError(_S.OPERATION_NOT_PERMITTED, "registry", "the subject's mode forbids the write"),
    ConfluentError(_S.REFERENCE_EXISTS, "registry", "a schema still references the version deleted"),
    ConfluentError(_S.ID_DOES_NOT_MATCH, "registry", "an IMPORT's id is taken by another schema"),
    ConfluentError(_S.INVALID_SUBJECT, "registry", "the subject name is not valid"),
    ConfluentError(_S.SCHEMA_TOO_LARGE, "registry", "the schema is larger than the registry takes",
                   "Kelp caps a request's body (http.request.max.bytes, 413) instead; issue 37 item 5 "
                   "brings Confluent's cap"),
    ConfluentError(_S.INVALID_RULESET, "registry", "a data contract's ruleSet is not valid",
                   "Kelp does not interpret data contracts' rules yet"),
    ConfluentError(_S.CONTEXT_NOT_EMPTY, "registry", "a deleted context still holds subjects",
                   "Kelp has no schema contexts to delete"),
    ConfluentError(_S.INVALID_ASSOCIATION, "registry", "an association is not valid", _ASSOCIATIONS),
    ConfluentError(_S.ASSOCIATION_BATCH_LIMIT_EXCEEDED, "registry", "too large a batch", _ASSOCIATIONS),
    ConfluentError(_S.STORE_ERROR, "registry", "writing or reading the registry's topic failed",
                   "answered when `_schemas` cannot be written or read (its replicas gone): no request of a "
                   "healthy broker triggers it"),
    ConfluentError(_S.OPERATION_TIMEOUT, "registry", "reading the registry's topic to its end timed out",
                   "answered when `_schemas` cannot be read to its end in time: no request triggers it"),
    ConfluentError(_S.REQUEST_FORWARDING_FAILED, "registry", "the leader did not answer a forwarded write",
                   "answered during a `_schemas` leader failover; tests/schema_registry/test_failover.py"),
    ConfluentError(_S.UNKNOWN_LEADER, "registry", "no leader is known to forward a write to",
                   "answered during a `_schemas` leader failover; tests/schema_registry/test_failover.py"),
    ConfluentError(_S.JSON_PARSE_ERROR, "registry", "the client could not parse the registry's answer",
                   "a client-side code (Confluent's RestService); no registry answers it"),
)
