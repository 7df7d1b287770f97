"""Helpers for broker tests: raw fetches to inspect stored batches."""

from __future__ import annotations

import struct

from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.producer import ProduceRequest

from tests.support.kafka_wire import WireClient

HEADER = struct.Struct(">qiibIhiqqqhii")


def batch_headers(data: bytes) -> list[tuple]:
    """(base_offset, attributes, last_offset_delta, record_count) per batch."""
    out = []
    pos = 0
    while pos + 61 <= len(data):
        (base, length, _ple, _magic, _crc, attrs, lod, _bts, _mts, _pid, _ep, _seq,
         count) = HEADER.unpack_from(data, pos)
        if pos + 12 + length > len(data):
            break
        out.append((base, attrs, lod, count))
        pos += 12 + length
    return out


def raw_fetch(bootstrap: str, topic: str, partition: int, offset: int = 0, *, max_bytes: int = 50 << 20,
              max_wait_ms: int = 0, min_bytes: int = 0, version: int = 11) -> object:
    with WireClient(bootstrap) as c:
        return raw_fetch_on(c, topic, partition, offset, max_bytes=max_bytes, max_wait_ms=max_wait_ms,
                            min_bytes=min_bytes, version=version)


def raw_fetch_on(c: WireClient, topic: str, partition: int = 0, offset: int = 0, *, max_bytes: int = 50 << 20,
                 max_wait_ms: int = 0, min_bytes: int = 0, version: int = 11, replica_id: int = -1) -> object:
    """One Fetch of one partition on an open connection (`replica_id` >= 0: as that follower)."""
    req = FetchRequest(
        replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=max_bytes)])],
        forgotten_topics_data=[], rack_id="",
    )
    return c.request(req, version)


def fetch_all_batches(bootstrap: str, topic: str, partition: int) -> bytes:
    """Every stored batch of a partition, as served over the wire."""
    out = bytearray()
    offset = 0
    while True:
        resp = raw_fetch(bootstrap, topic, partition, offset)
        pd = resp.responses[0].partitions[0]
        assert pd.error_code == 0, pd
        data = pd.records or b""
        hs = batch_headers(data)
        if not hs:
            return bytes(out)
        out += data
        offset = hs[-1][0] + hs[-1][2] + 1


def create_topic_wire(bootstrap: str, name: str, partitions: int = 1, configs: dict | None = None) -> int:
    with WireClient(bootstrap) as c:
        T = CreateTopicsRequest.CreatableTopic
        req = CreateTopicsRequest(topics=[T(name=name, num_partitions=partitions, replication_factor=1, assignments=[],
                                            configs=[T.CreatableTopicConfig(name=k, value=str(v))
                                                     for k, v in (configs or {}).items()])],
                                  timeout_ms=10000, validate_only=False)
        resp = c.request(req, 5)
        return resp.topics[0].error_code


def list_offset(bootstrap: str, topic: str, partition: int, timestamp: int) -> tuple[int, int, int]:
    with WireClient(bootstrap) as c:
        T = ListOffsetsRequest.ListOffsetsTopic
        req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[T(name=topic, partitions=[
            T.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)])])
        resp = c.request(req, 5)
        p = resp.topics[0].partitions[0]
        return p.error_code, p.offset, p.timestamp


def advertised_api_keys(bootstrap: str) -> set[int]:
    from kafka.protocol.metadata import ApiVersionsRequest

    with WireClient(bootstrap) as c:
        resp = c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        return {k.api_key for k in resp.api_keys}


def produce(client: WireClient, topic: str, batch: bytes, *, partition: int = 0, acks: int = 1,
            version: int = 7) -> tuple[int, int]:
    """Produce one raw batch; returns (error code, base offset)."""
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=partition, records=batch)])])
    p = client.request(req, version).responses[0].partition_responses[0]
    return p.error_code, p.base_offset
