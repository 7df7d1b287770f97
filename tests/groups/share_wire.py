"""A share-group member on the wire for tests: ShareGroupHeartbeat, ShareFetch, ShareAcknowledge at v1.

Why: the acknowledgement and session rules (INVALID_RECORD_STATE for a record another member holds, session
epochs, member epochs) can only be attacked below a client library, which never sends the wrong thing.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from kelp.broker.kafka.messages import (
    ShareAcknowledgeRequest,
    ShareFetchRequest,
    ShareGroupHeartbeatRequest,
)
from kelp.records.record import iter_records
from tests.support.kafka_wire import WireClient

__all__ = ["ShareMember", "topic_id"]

ACCEPT, RELEASE, REJECT = 1, 2, 3


def topic_id(c: WireClient, topic: str) -> uuid.UUID:
    from kafka.protocol.metadata import MetadataRequest

    T = MetadataRequest.MetadataRequestTopic
    resp = c.request(MetadataRequest(topics=[T(topic_id=None, name=topic)], allow_auto_topic_creation=False,
                                     include_topic_authorized_operations=False), 12)
    return resp.topics[0].topic_id


class ShareMember:
    """One member: its own connection, session epoch and member epoch."""

    def __init__(self, bootstrap: str, group: str, member: str, topic: str) -> None:
        self.c = WireClient(bootstrap, client_id=member)
        self.group, self.member, self.topic = group, member, topic
        self.tid = topic_id(self.c, topic)
        self.session_epoch = 0
        self.member_epoch = 0

    def close(self) -> None:
        self.c.close()

    def find_coordinator(self, *, timeout_s: float = 30.0) -> None:
        """FindCoordinator until the group's coordinator answers (the first creates `__consumer_offsets`)."""
        from kafka.protocol.metadata import FindCoordinatorRequest

        deadline = time.monotonic() + timeout_s
        while True:
            fc = self.c.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[self.group]), 4)
            if fc.coordinators[0].error_code == 0:
                return
            assert time.monotonic() < deadline, fc
            time.sleep(0.1)  # the coordinator's partition is being created: poll it, bounded

    def heartbeat(self, epoch: int | None = None, topics: list[str] | None = None) -> Any:
        resp = self.c.request(ShareGroupHeartbeatRequest(
            group_id=self.group, member_id=self.member, member_epoch=self.member_epoch if epoch is None else epoch,
            rack_id=None, subscribed_topic_names=topics if topics is not None else [self.topic]), 1)
        if resp.error_code == 0:
            self.member_epoch = resp.member_epoch
        return resp

    def _batches(self, acks: list[tuple[int, int, int]]) -> list[Any]:
        B = ShareFetchRequest.FetchTopic.FetchPartition.AcknowledgementBatch
        return [B(first_offset=f, last_offset=last, acknowledge_types=[t]) for f, last, t in acks]

    def fetch(self, *, acks: list[tuple[int, int, int]] | None = None, max_wait_ms: int = 200,
              max_records: int = 500, epoch: int | None = None) -> Any:
        """One ShareFetch of partition 0 (acks piggybacked); the next session epoch is kept on success."""
        E = self.session_epoch if epoch is None else epoch
        FT = ShareFetchRequest.FetchTopic
        resp = self.c.request(ShareFetchRequest(
            group_id=self.group, member_id=self.member, share_session_epoch=E, max_wait_ms=max_wait_ms,
            min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=max_records,
            topics=[FT(topic_id=self.tid, partitions=[FT.FetchPartition(
                partition_index=0, acknowledgement_batches=self._batches(acks or []))])],
            forgotten_topics_data=[]), 1)
        if resp.error_code == 0 and epoch is None:
            self.session_epoch = 1 if E == 0 else E + 1
        return resp

    def acknowledge(self, acks: list[tuple[int, int, int]], *, epoch: int | None = None) -> Any:
        E = self.session_epoch if epoch is None else epoch
        AT = ShareAcknowledgeRequest.AcknowledgeTopic
        B = AT.AcknowledgePartition.AcknowledgementBatch
        resp = self.c.request(ShareAcknowledgeRequest(
            group_id=self.group, member_id=self.member, share_session_epoch=E,
            topics=[AT(topic_id=self.tid, partitions=[AT.AcknowledgePartition(
                partition_index=0, acknowledgement_batches=[
                    B(first_offset=f, last_offset=last, acknowledge_types=[t]) for f, last, t in acks])])]), 1)
        if resp.error_code == 0 and epoch is None:
            self.session_epoch = E + 1
        return resp


def acquired(resp: Any) -> list[tuple[int, int, int]]:
    """(first, last, delivery count) of what a ShareFetch answer acquired (partition 0)."""
    out = []
    for t in resp.responses:
        for p in t.partitions:
            out += [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records]
    return out


def acquired_offsets(resp: Any) -> list[int]:
    return [o for f, last, _n in acquired(resp) for o in range(f, last + 1)]


def record_values(resp: Any) -> dict[int, bytes | None]:
    """Offset -> value of the records an answer carries (acquired or not)."""
    out: dict[int, bytes | None] = {}
    for t in resp.responses:
        for p in t.partitions:
            for r in iter_records(bytes(p.records or b"")):
                out[r.offset] = r.value
    return out


def partition_errors(resp: Any) -> tuple[int, int]:
    """(error code, acknowledge error code) of partition 0 in a ShareFetch answer ((0, 0) if absent)."""
    for t in resp.responses:
        for p in t.partitions:
            return p.error_code, getattr(p, "acknowledge_error_code", p.error_code)
    return 0, 0
