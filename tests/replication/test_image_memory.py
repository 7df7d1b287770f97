"""What the metadata image holds per partition, in bytes `tracemalloc` traces, against a budget (issue 38; not a
timed test).

The image is held twice by a broker that is the controller too (the controller's and the broker's), and once by
every other broker; a topic of 10,000 partitions was 10,000 `PartitionState`s and 20,000 one-id tuples in each.
Images are applied from an entry holding one topic record, decoded from JSON as a push or the log's file gives it,
and the growth of the image over one with a small topic is divided by the difference in partitions; the entry
itself is made before the measurement (the input, not what the image keeps).

Measured (CPython 3.11, three runs each): before `PartitionState.from_json` shared equal states and id tuples,
200 B per partition at RF 1 and 232 B at RF 3 (a state object of 96 B and its two tuples); after, 8.1 B at
both (the pointer in the topic's tuple of states; the states are a handful per topic). The budget is 40 B: a
state object per partition (96 B) fails it.
"""

from __future__ import annotations

import gc
import json
import tracemalloc

from kelp.broker.metadata.image import MetadataImage, apply_entry, topic_record
from kelp.broker.metadata.model import SHARED_LIMIT, PartitionState, TopicState, _ids, _shared_ids, _shared_states
from kelp.broker.metadata.records import MetadataEntry

BYTES_PER_PARTITION = 40
SMALL, LARGE = 20, 4_020
BROKERS = (0, 1, 2)


def _topic(name: str, count: int, rf: int) -> TopicState:
    states = []
    for p in range(count):
        replicas = tuple(BROKERS[(p + i) % len(BROKERS)] for i in range(rf))
        states.append(PartitionState(replicas, replicas[0], 0, replicas, 0))
    return TopicState(name, tuple(states), configs={}, topic_id=f"{count:032x}")


def _entry(offset: int, topic: TopicState) -> MetadataEntry:
    entry: MetadataEntry = json.loads(json.dumps({"offset": offset, "epoch": 1, "records": [topic_record(topic)]}))
    return entry


def _bytes_per_partition(rf: int) -> float:
    image, _ = apply_entry(MetadataImage(), _entry(0, _topic("small", SMALL, rf)))
    entry = _entry(1, _topic("large", LARGE - SMALL, rf))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        image, delta = apply_entry(image, entry)
        del delta, entry
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert image.topics["large"].partitions == LARGE - SMALL
    # What the image's topics hold, beyond the one dict of topics (its growth is the other topic's entry).
    return (grown - 200) / (LARGE - SMALL)


def test_the_image_holds_a_partition_within_its_byte_budget() -> None:
    for rf in (1, 3):
        per = _bytes_per_partition(rf)
        assert per <= BYTES_PER_PARTITION, f"RF {rf}: {per:,.1f} B traced per partition of the image"


def test_equal_states_decoded_are_one_object_and_unequal_ones_stay_apart() -> None:
    doc = PartitionState((2, 0, 1), 2, 7, (2, 0), 9).to_json()
    a, b = PartitionState.from_json(doc), PartitionState.from_json(json.loads(json.dumps(doc)))
    assert a is b and a.replicas == (2, 0, 1) and a.isr == (2, 0) and a.replicas is PartitionState.from_json(
        {**doc, "leader_epoch": 8}).replicas
    other = PartitionState.from_json({**doc, "isr": [2, 0, 1]})
    assert other is not a and other.isr == (2, 0, 1) and a.isr == (2, 0)  # the shared one never changed
    assert type(a.replicas[0]) is int  # a string id in a document is converted, never kept as a string
    assert PartitionState.from_json({**doc, "replicas": ["2", "0", "1"]}) is a


def test_the_memo_of_shared_values_is_bounded() -> None:
    for i in range(3 * SHARED_LIMIT):
        PartitionState.from_json({"replicas": [i], "leader": i, "leader_epoch": 0, "isr": [i]})
        _ids((i, i + 1))
    assert len(_shared_states) <= SHARED_LIMIT and len(_shared_ids) <= SHARED_LIMIT
