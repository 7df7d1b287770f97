"""Crash safety: kill -9 under load loses no acknowledged record; torn tails are cut and reported."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.broker.helpers import batch_headers, create_topic_wire, fetch_all_batches, produce
from tests.support.kafka_wire import WireClient, make_batch

pytestmark = pytest.mark.clients


def consume_all(bootstrap: str, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=2000,
                             fetch_max_wait_ms=100)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    values = [m.value for m in consumer]
    consumer.close()
    return values


# The producer's unsent records cannot be flushed once the broker is killed: kafka-python's close() raises
# (caught below) and its __del__, closing again, raises the same timeout where no one can catch it.
@pytest.mark.filterwarnings("ignore:Exception ignored in. <function KafkaProducer.__del__"
                            ":pytest.PytestUnraisableExceptionWarning")
def test_sigkill_during_acks1_produce_keeps_every_acked_record(broker) -> None:
    from kafka import KafkaProducer

    topic = "crash"
    assert create_topic_wire(broker.bootstrap, topic) == 0
    acked: list[int] = []
    lock = threading.Lock()
    enough = threading.Event()
    stop = threading.Event()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, linger_ms=2, retries=0,
                             enable_idempotence=False, max_in_flight_requests_per_connection=1,
                             request_timeout_ms=3000)

    def on_ack(i: int) -> None:
        with lock:
            acked.append(i)
            if len(acked) >= 2000:
                enough.set()

    def run() -> None:
        i = 0
        while not stop.is_set():
            try:
                fut = producer.send(topic, value=str(i).encode())
            except Exception:
                return
            fut.add_callback(lambda _md, i=i: on_ack(i))
            i += 1
            if i % 500 == 0:
                time.sleep(0.01)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert enough.wait(30), f"only {len(acked)} records acknowledged in 30 s"
    broker.kill()
    stop.set()
    t.join(10)
    try:
        producer.close(timeout=1)  # unacknowledged records may be dropped: the broker is gone
    except Exception:
        pass
    with lock:
        acked_now = sorted(acked)
    broker.start()
    values = [int(v) for v in consume_all(broker.bootstrap, topic)]
    assert len(values) == len(set(values)), "a record is served twice"
    assert values == sorted(values), "records out of order"
    missing = set(acked_now) - set(values)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"


def _segment_file(log_dir: Path, topic: str) -> Path:
    files = sorted((log_dir / f"{topic}-0").glob("*.log"))
    assert files, f"no segment files for {topic}"
    return files[-1]


def test_torn_tail_is_truncated_and_reported(broker) -> None:
    topic = "torn"
    assert create_topic_wire(broker.bootstrap, topic) == 0
    with WireClient(broker.bootstrap) as c:
        for i in range(5):
            assert produce(c, topic, make_batch([(b"k", f"v{i}".encode())]))[0] == 0
    broker.kill()
    seg = _segment_file(broker.log_dir, topic)
    good_size = seg.stat().st_size
    last = make_batch([(b"k", b"torn")])
    with open(seg, "ab") as fh:
        fh.write(last[: len(last) // 2])  # half a batch, as after a crash mid-write
    broker.start()
    line = broker.wait_for_log("truncated")
    assert str(seg) in line and f"position {good_size}" in line, line
    assert len(batch_headers(fetch_all_batches(broker.bootstrap, topic, 0))) == 5
    with WireClient(broker.bootstrap) as c:
        assert produce(c, topic, make_batch([(b"k", b"after")])) == (0, 5)


def test_corrupt_tail_batch_is_cut_and_reported(broker) -> None:
    topic = "corrupt"
    assert create_topic_wire(broker.bootstrap, topic) == 0
    with WireClient(broker.bootstrap) as c:
        for i in range(3):
            assert produce(c, topic, make_batch([(b"k", f"value-{i}".encode())]))[0] == 0
    broker.kill()
    seg = _segment_file(broker.log_dir, topic)
    data = bytearray(seg.read_bytes())
    assert batch_headers(bytes(data))[-1][0] == 2
    # flip a byte inside the last batch's records (covered by the CRC)
    data[-2] ^= 0xFF
    seg.write_bytes(bytes(data))
    broker.start()
    line = broker.wait_for_log("truncated")
    assert str(seg) in line and "crc" in line.lower(), line
    assert [h[0] for h in batch_headers(fetch_all_batches(broker.bootstrap, topic, 0))] == [0, 1]


def test_sigterm_stops_gracefully_while_a_fetch_waits(broker) -> None:
    assert create_topic_wire(broker.bootstrap, "graceful") == 0
    with WireClient(broker.bootstrap) as c:
        assert produce(c, "graceful", make_batch([(b"k", b"v")])) == (0, 0)
    waiting = WireClient(broker.bootstrap)
    from kafka.protocol.consumer import FetchRequest

    F = FetchRequest.FetchTopic
    waiting.send(FetchRequest(replica_id=-1, max_wait_ms=30000, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                              session_id=0, session_epoch=-1, topics=[F(topic="graceful", partitions=[
                                  F.FetchPartition(partition=0, fetch_offset=1, partition_max_bytes=1 << 20)])],
                              forgotten_topics_data=[], rack_id=""), 11)
    time.sleep(0.2)
    t0 = time.monotonic()
    assert broker.terminate(timeout=10) == 0
    assert time.monotonic() - t0 < 5
    waiting.close()
    assert "all segments flushed and closed" in broker.log_text()
    broker.start()
    assert len(batch_headers(fetch_all_batches(broker.bootstrap, "graceful", 0))) == 1
