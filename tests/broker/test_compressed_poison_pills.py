"""Poison pills over the wire: compressed batches whose records lie, to a plain (non-compacted) topic.

Issue 36. A compressed batch's CRC covers its compressed bytes, so a payload that does not decompress, a
header record count the records do not have, or a zip bomb passes every header check; a plain topic stored
them without looking inside, acknowledged them, and every consumer of the partition then failed on them.
Kafka's LogValidator iterates the records of every compressed batch; so does Kelp now: each is answered with
Kafka's error, nothing of the partition's request is stored, the connection stays open, and the next good
batch on it is accepted.
"""

from __future__ import annotations

import pytest

from kelp.errors import ErrorCode
from tests.broker.helpers import create_topic_wire, fetch_all_batches, list_offset, produce
from tests.support.kafka_wire import WireClient
from tests.support.poison import CODECS, bomb, garbage, good_batch, lying_count

BOMB = 65 << 20  # past the 64 MiB a batch may inflate to under the default max.message.bytes (1 MiB)


@pytest.mark.parametrize("codec", CODECS)
def test_poison_pills_are_refused_nothing_is_stored_and_the_connection_goes_on(broker, codec: str) -> None:
    topic = f"plain-poison-{codec}"
    assert create_topic_wire(broker.bootstrap, topic) == 0
    pills = [("garbage", garbage(codec), ErrorCode.CORRUPT_MESSAGE),
             ("lying count", lying_count(codec), ErrorCode.CORRUPT_MESSAGE),
             ("zip bomb", bomb(codec, BOMB), ErrorCode.MESSAGE_TOO_LARGE)]
    with WireClient(broker.bootstrap, timeout=30) as client:
        for name, pill, want in pills:
            assert len(pill) < 1 << 20, name  # under max.message.bytes: only its records give it away
            error, _ = produce(client, topic, pill)
            assert error == want, (name, error)
            assert list_offset(broker.bootstrap, topic, 0, -1)[:2] == (0, 0), f"{name}: something was stored"
        error, base = produce(client, topic, good_batch(codec, 5))  # the same connection
        assert (error, base) == (0, 0)
    stored = fetch_all_batches(broker.bootstrap, topic, 0)
    assert stored  # what a consumer reads back is the good batch alone
    from kelp.records.record import iter_records

    assert [r.key for r in iter_records(stored)] == [b"k%d" % i for i in range(5)]
