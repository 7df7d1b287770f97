"""`__consumer_offsets` stays bounded on disk under 100,000 commits of a few groups:
it is a compacted topic, and the storage cleaner keeps the newest record per key."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from kafka.protocol.consumer import OffsetCommitRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from tests.support.kafka_wire import WireClient

from .conftest import GROUP_SETTINGS
from .test_clients_share_partitions import create_topic

COMMITS = 100_000
WINDOW = 250
SEGMENT_BYTES = 64 * 1024


def offsets_log_bytes(log_dir: Path) -> int:
    """Bytes of __consumer_offsets segments on disk; a segment the cleaner deletes meanwhile counts 0."""
    total = 0
    for f in (f for d in log_dir.glob("__consumer_offsets-*") for f in d.glob("*.log")):
        try:
            total += f.stat().st_size
        except FileNotFoundError:
            pass
    return total


@pytest.mark.timeout(150)
def test_consumer_offsets_bounded_under_many_commits(broker_factory) -> None:
    broker = broker_factory(settings={**GROUP_SETTINGS, "log.segment.bytes": SEGMENT_BYTES,
                                      "log.retention.check.interval.ms": 500})
    create_topic(broker.bootstrap, "hot", 4)
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    P = T.OffsetCommitRequestPartition
    groups = ["app-1", "app-2", "app-3"]
    sentinel = 0x0123456789ABCDEF
    templates = {}
    for g in groups:
        for part in range(4):
            req = OffsetCommitRequest(
                group_id=g, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                topics=[T(name="hot", partitions=[P(partition_index=part, committed_offset=sentinel,
                                                    committed_leader_epoch=-1, committed_metadata="")])])
            req.with_header(correlation_id=0, client_id="bounded-test")
            raw = bytes(req.encode(version=7, header=True, framed=True))
            templates[(g, part)] = (raw, raw.index(struct.pack(">q", sentinel)))
    t0 = time.monotonic()
    with WireClient(broker.bootstrap, timeout=30) as w:
        # As every client does before committing: find the coordinator (the first ask creates __consumer_offsets).
        deadline = time.monotonic() + 30
        while True:
            fc = w.request(FindCoordinatorRequest(key_type=0, coordinator_keys=groups), 4)
            if all(c.error_code == 0 for c in fc.coordinators):
                break
            assert time.monotonic() < deadline, f"no coordinator for {groups}: {fc.coordinators}"
            time.sleep(0.1)  # clients' retry.backoff.ms; the deadline bounds it
        sent = 0
        while sent < COMMITS:
            n = min(WINDOW, COMMITS - sent)
            chunk = bytearray()
            for i in range(sent, sent + n):
                # Pre-encoded request, patched with this commit's offset and correlation id
                # (client CPU is not the subject).
                raw, at = templates[(groups[i % 3], i % 4)]
                buf = bytearray(raw)
                struct.pack_into(">i", buf, 8, i)
                struct.pack_into(">q", buf, at, i)
                chunk += buf
            w.send_raw(bytes(chunk))
            for _ in range(n):
                frame = w.recv_frame()
                # Response v7: correlation id, throttle, [topics]: name, [partitions]: index, error code (last 2 bytes).
                assert frame[-2:] == b"\x00\x00", f"commit failed with error {struct.unpack('>h', frame[-2:])[0]}"
            sent += n
    print(f"commits took {time.monotonic() - t0:.1f}s")
    written = COMMITS * 60  # a lower bound on what was appended (key + value + record overhead)
    deadline = time.monotonic() + 30
    size = offsets_log_bytes(broker.log_dir)
    while size > 6 * SEGMENT_BYTES and time.monotonic() < deadline:
        time.sleep(0.5)  # the broker's cleaner runs on its own schedule; poll the disk, bounded
        size = offsets_log_bytes(broker.log_dir)
    assert size <= 6 * SEGMENT_BYTES, f"__consumer_offsets holds {size} bytes of logs after {COMMITS} commits"
    assert size < written / 10
    print(f"bounded after {time.monotonic() - t0:.1f}s: {size} bytes")
    # The newest offsets are intact after compaction: restart and read them back.
    broker.restart(kill=True)
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        got = admin.list_group_offsets("app-1")["app-1"]
    finally:
        admin.close()
    last_for = {}
    for i in range(COMMITS):
        if i % 3 == 0:
            last_for[i % 4] = i
    assert {tp.partition: om.offset for tp, om in got.items()} == last_for
