"""A partition whose log has a hole (a segment file removed by hand) stays offline; the rest serve.

Apache Kafka's loader would not notice and serve the hole silently. Kelp logs
an ERROR naming the missing offsets at start, answers KAFKA_STORAGE_ERROR (56)
for that partition, deletes nothing, and serves every other partition.
"""

from __future__ import annotations

import pytest

from kelp.errors import ErrorCode
from tests.broker.helpers import create_topic_wire, fetch_all_batches, produce
from tests.support.kafka_wire import WireClient, make_batch

pytestmark = pytest.mark.clients


def test_a_log_with_a_missing_segment_is_offline_and_other_partitions_serve(broker_factory) -> None:
    broker = broker_factory()
    assert create_topic_wire(broker.bootstrap, "holey", configs={"segment.bytes": "1024"}) == 0
    assert create_topic_wire(broker.bootstrap, "fine") == 0
    with WireClient(broker.bootstrap) as w:
        for i in range(40):
            assert produce(w, "holey", make_batch([(None, b"x" * 100 + b"%03d" % i)]))[0] == 0
        assert produce(w, "fine", make_batch([(None, b"before")])) == (0, 0)
    broker.terminate()
    directory = broker.log_dir / "holey-0"
    segments = sorted(directory.glob("*.log"))
    assert len(segments) >= 4
    victim, after = segments[1], segments[2]
    first, nxt = int(victim.name[:-4]), int(after.name[:-4])
    victim.unlink()
    sizes = {p.name: p.stat().st_size for p in directory.glob("*.log")}
    broker.start()
    broker.wait_for_log(f"offsets {first}..{nxt - 1} ({nxt - first}) are missing")
    with WireClient(broker.bootstrap) as w:
        code, _ = produce(w, "holey", make_batch([(None, b"into the hole?")]))
        assert code == ErrorCode.KAFKA_STORAGE_ERROR
        assert produce(w, "fine", make_batch([(None, b"after")])) == (0, 1)
    assert len(fetch_all_batches(broker.bootstrap, "fine", 0)) > 0
    broker.terminate()
    assert {p.name: p.stat().st_size for p in directory.glob("*.log")} == sizes  # nothing deleted or rewritten
