"""The error-code table of kelp.errors against Kafka's, and what an enum member looks like on the wire.

kafka-python ships every Kafka error code as a class (`kafka.errors.for_code`) whose `message` is Kafka's
name for it; a wrong number in `ErrorCode` finds a class of another name here.
"""

from __future__ import annotations

import json

import kafka.errors
import pytest
from kafka.protocol.metadata import ApiVersionsResponse

import kelp.errors
from kelp.errors import ErrorCode, KelpError
from kelp.rest_errors import CONFLUENT_ERRORS, RegistryErrorCode, RestErrorCode

# Codes Kafka has renamed since kafka-python took its names: Kafka's name -> kafka-python's.
KAFKA_PYTHON_NAMES = {
    "UNKNOWN_SERVER_ERROR": "UNKNOWN",
    "NONE": "NO_ERROR",
    "NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION",
    "MESSAGE_TOO_LARGE": "MESSAGE_SIZE_TOO_LARGE",
    "INVALID_TOPIC_EXCEPTION": "INVALID_TOPIC",
    "INVALID_REPLICA_ASSIGNMENT": "INVALID_REPLICATION_ASSIGNMENT",
}


# Codes newer than kafka-python 3.0.12's table, with their number in Kafka's Errors.java.
NEWER_THAN_KAFKA_PYTHON = {"INVALID_REGULAR_EXPRESSION": 128}  # KIP-848; ListTransactions v2's bad pattern


@pytest.mark.parametrize("code", list(ErrorCode), ids=lambda c: c.name)
def test_each_code_is_kafkas_number_for_its_name(code: ErrorCode) -> None:
    if code.name in NEWER_THAN_KAFKA_PYTHON:
        assert int(code) == NEWER_THAN_KAFKA_PYTHON[code.name]
        assert kafka.errors.for_code(int(code)).__name__ == "UnrecognizedBrokerError"  # drop once it knows it
        return
    known = kafka.errors.for_code(int(code))
    assert known.__name__ != "UnrecognizedBrokerError", f"{code.name}={int(code)} is no Kafka error code"
    assert known.errno == code
    assert known.message == KAFKA_PYTHON_NAMES.get(code.name, code.name), (
        f"ErrorCode.{code.name} is {int(code)}, which Kafka calls {known.message}")


def test_the_renamed_codes_are_all_in_the_enum() -> None:
    assert set(KAFKA_PYTHON_NAMES) <= set(ErrorCode.__members__)


def _kelp_error_classes() -> list[type[KelpError]]:
    return [v for v in vars(kelp.errors).values()
            if isinstance(v, type) and issubclass(v, KelpError)]


@pytest.mark.parametrize("cls", _kelp_error_classes(), ids=lambda c: c.__name__)
def test_every_kelp_error_carries_an_enum_member(cls: type[KelpError]) -> None:
    assert type(cls.code) is ErrorCode


def test_confluent_codes_are_http_status_times_100_plus_n_or_the_status() -> None:
    for row in CONFLUENT_ERRORS:
        assert (10000 <= row.code < 60000 or row.code in (409, 422)) and row.status in (
            400, 401, 403, 404, 406, 408, 409, 422, 429, 500, 501, 503), row
    documented = {(type(row.code), row.code) for row in CONFLUENT_ERRORS}
    for enum in (RestErrorCode, RegistryErrorCode):  # every code is in the table, with its meaning
        assert {(enum, code) for code in enum} <= documented


def test_a_member_is_the_plain_number_on_the_wire_in_json_and_in_messages() -> None:
    code = ErrorCode.UNSUPPORTED_VERSION
    as_enum = ApiVersionsResponse(error_code=code, api_keys=[], throttle_time_ms=0)
    as_int = ApiVersionsResponse(error_code=35, api_keys=[], throttle_time_ms=0)
    for version in (0, 3):
        assert as_enum.encode(version=version) == as_int.encode(version=version)
    assert json.dumps({"error_code": code}) == '{"error_code": 35}'
    assert json.dumps({"error_code": RestErrorCode.CONSUMER_FORMAT_MISMATCH}) == '{"error_code": 40601}'
    assert f"error {code}" == "error 35" and "error %d" % code == "error 35" and str(code) == "35"
    assert ErrorCode(35) is code and code == 35 and {35: "x"}[code] == "x"
