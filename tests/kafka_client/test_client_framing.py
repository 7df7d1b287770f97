"""The client core's pure parts: framing and reply checks, metadata, retry decisions (no sockets)."""

from __future__ import annotations

import pytest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from kelp.errors import ErrorCode
from kelp.kafka_client import (
    BadResponse,
    BrokerTimeout,
    BrokerUnavailable,
    ClusterMetadata,
    ErrorResponse,
    RetriesExhausted,
    RetryPolicy,
)
from kelp.kafka_client.framing import CorrelationIds, decode_response, encode_request, response_size
from kelp.kafka_client.metadata import parse_bootstrap
from tests.support.fake_kafka_broker import coordinator_response, encode_response, metadata_response


def test_correlation_ids_count_up_and_wrap_within_int32() -> None:
    ids = CorrelationIds()
    assert [ids.next(), ids.next()] == [1, 2]
    ids._last = 0x7FFFFFFE
    assert [ids.next(), ids.next(), ids.next()] == [0x7FFFFFFF, 0, 1]


@pytest.mark.parametrize(("request_", "response", "version"), [
    (FetchRequest(replica_id=2, max_wait_ms=0, min_bytes=1, max_bytes=1, isolation_level=0, session_id=0,
                  session_epoch=-1, topics=[], forgotten_topics_data=[], rack_id=""),
     FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[]), 11),
    (ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[]),
     ListOffsetsResponse(throttle_time_ms=0, topics=[]), 5),
    (ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1, topic_data=[]),
     ProduceResponse(throttle_time_ms=0, responses=[]), 8),
    (MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False),
     metadata_response({}, {}), 12),
    (OffsetForLeaderEpochRequest(replica_id=1, topics=[]),
     OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=[]), 3),
    (FindCoordinatorRequest(key="g", key_type=0), coordinator_response(1, 9092), 3),
    (HeartbeatRequest(group_id="g", generation_id=1, member_id="m", group_instance_id=None),
     HeartbeatResponse(throttle_time_ms=0, error_code=0), 4),
])
def test_every_request_the_clients_send_is_paired_with_its_response(request_: ApiMessage, response: ApiMessage,
                                                                    version: int) -> None:
    """kafka-python's own pairing (by API key, at the request's version) finds each response class."""
    data = encode_request(request_, version, correlation_id=7, client_id="test")
    assert response_size(data[:4], address="a:1") == len(data) - 4
    frame = encode_response(response, version, 7)[4:]
    decoded = decode_response(request_, version, frame, correlation_id=7, address="a:1")
    assert type(decoded) is type(response) and decoded.header.correlation_id == 7


def test_a_reply_with_another_correlation_id_is_refused_before_decoding() -> None:
    request = HeartbeatRequest(group_id="g", generation_id=1, member_id="m", group_instance_id=None)
    encode_request(request, 4, correlation_id=7, client_id="test")
    frame = encode_response(HeartbeatResponse(throttle_time_ms=0, error_code=0), 4, 8)[4:]
    with pytest.raises(BadResponse, match=r"broker at b:2 answered correlation id 8, expected 7"):
        decode_response(request, 4, frame, correlation_id=7, address="b:2")


def test_undecodable_bytes_name_the_response_and_the_broker() -> None:
    request = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    encode_request(request, 12, correlation_id=3, client_id="test")
    with pytest.raises(BadResponse, match=r"broker at b:2 sent a reply that is no MetadataResponse v12"):
        decode_response(request, 12, b"\x00\x00\x00\x03\xff\xff", correlation_id=3, address="b:2")


@pytest.mark.parametrize("size", [-1, 0, 3, 1001])
def test_a_frame_size_out_of_bounds_is_refused(size: int) -> None:
    with pytest.raises(BadResponse, match=rf"broker at b:2 sent a response frame of {size} bytes"):
        response_size(size.to_bytes(4, "big", signed=True), address="b:2", limit=1000)


def test_a_request_without_a_reply_is_refused_before_sending() -> None:
    with pytest.raises(ValueError, match="expects no response"):
        encode_request(ProduceRequest(transactional_id=None, acks=0, timeout_ms=1, topic_data=[]), 8,
                       correlation_id=1, client_id="test")


def test_bootstrap_servers_parse_or_say_which_entry_is_wrong() -> None:
    assert parse_bootstrap(" a:1, [::1]:2 ,") == [("a", 1), ("::1", 2)]
    with pytest.raises(ValueError, match="'a' is not host:port"):
        parse_bootstrap("a")
    with pytest.raises(ValueError, match="names no broker"):
        parse_bootstrap(" , ")


def test_metadata_replaces_a_listing_and_updates_only_the_topics_asked() -> None:
    md = ClusterMetadata()
    md.apply(metadata_response({0: 1, 1: 2}, {("a", 0): (0, 3), ("b", 0): (1, 1), ("__consumer_offsets", 0): (0, 0)}),
             None)
    assert set(md.partitions) == {"a", "b"}  # internal topics left out of a listing
    assert md.brokers == {0: ("127.0.0.1", 1), 1: ("127.0.0.1", 2)}
    md.apply(metadata_response({0: 1}, {("a", 0): (-1, 4)}), ["a", "gone"])
    assert md.leader("a", 0) is None and md.partitions["a"][0].leader_epoch == 4 and "b" in md.partitions
    with pytest.raises(ErrorResponse, match="partition a-0 has no leader") as no_leader:
        md.require_leader("a", 0)
    assert no_leader.value.code == ErrorCode.LEADER_NOT_AVAILABLE
    with pytest.raises(ErrorResponse, match="partition gone-0 does not exist"):
        md.require_leader("gone", 0)


def test_a_coordinator_answer_is_cached_and_an_error_forgets_it() -> None:
    md = ClusterMetadata()
    assert md.apply_coordinator("g", coordinator_response(2, 7), address="x:1").address == "127.0.0.1:7"
    assert md.coordinators["g"].node_id == 2
    with pytest.raises(ErrorResponse, match=r"broker at x:1 found no coordinator for group 'g'") as err:
        md.apply_coordinator("g", coordinator_response(-1, -1, ErrorCode.COORDINATOR_NOT_AVAILABLE), address="x:1")
    assert err.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE and "g" not in md.coordinators


def test_attempts_retry_what_a_refresh_can_cure_and_stop_at_the_bound() -> None:
    attempts = RetryPolicy(retries=2, backoff_s=0.5, max_backoff_s=0.8).start("fetching t-0")
    assert attempts.failed(ErrorResponse("moved", ErrorCode.NOT_LEADER_OR_FOLLOWER)) == 0.5
    assert attempts.failed(BrokerTimeout("slow", address="h:1")) == 0.8  # capped
    with pytest.raises(RetriesExhausted, match="fetching t-0 failed after 3 attempts: gone") as out:
        attempts.failed(BrokerUnavailable("gone", address="h:1"))
    assert out.value.address == "h:1" and out.value.code is None
    final = ErrorResponse("out of range", ErrorCode.OFFSET_OUT_OF_RANGE)
    with pytest.raises(ErrorResponse) as raised:
        RetryPolicy().start("x").failed(final)
    assert raised.value is final  # not retriable: raised as it is


def test_a_failed_recovery_is_reported_when_the_attempts_run_out() -> None:
    attempts = RetryPolicy(retries=1, backoff_s=0).start("listing offsets")
    attempts.failed(ErrorResponse("moved", ErrorCode.NOT_LEADER_OR_FOLLOWER))
    attempts.recovered(BrokerUnavailable("no broker answered a metadata request"))
    with pytest.raises(RetriesExhausted, match="the last recovery failed: no broker answered") as out:
        attempts.failed(ErrorResponse("moved", ErrorCode.NOT_LEADER_OR_FOLLOWER))
    assert out.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_policy_refuses_negative_bounds() -> None:
    with pytest.raises(ValueError, match="retries, backoff_s and max_backoff_s >= 0"):
        RetryPolicy(retries=-1)
