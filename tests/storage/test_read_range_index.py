"""A fetch range is cut with the offset index, not by reading every batch it holds (issue 38).

Why: Kafka's Java consumer fetches from a broker only once it has drained everything that broker sent it
(its AbstractFetch skips a node with buffered partitions), so each fetch's wait for its first byte is on the
consumer's critical path. ConsumerPerformance asks 1 MiB of each of 6 partitions; cutting each 1 MiB range at
its last whole batch by walking every header read the whole megabyte per partition per fetch (a third of the
broker's fetch time in a profile). The index names batch starts every `index.interval.bytes`: the walk now
starts at the last entry within the limit. These tests hold the cut to the full walk's answer over random logs
and bound the bytes read to find it.
"""

from __future__ import annotations

import os
import random

import pytest

from kelp.broker.storage import Log
from kelp.config.log_config import LogConfig

from .helpers import batch, count_preads


def _walked(log: Log, offset: int, max_bytes: int, max_offset: int | None,
            min_one: bool) -> tuple[int, int, int, int] | None:
    """(position, size, records, next offset) by walking every header from the first batch (the old cut)."""
    located = log._reader.locate(offset)
    if located is None:
        return None
    segment, first = located
    end, records, next_offset = first.position, 0, -1
    for info in segment.headers(first.position):
        if max_offset is not None and info.base_offset >= max_offset:
            break
        if info.end > first.position + max_bytes:
            if end == first.position and min_one:
                end, records, next_offset = info.end, records + info.record_count, info.next_offset
            break
        end, records, next_offset = info.end, records + info.record_count, info.next_offset
    return None if end == first.position else (first.position, end - first.position, records, next_offset)


@pytest.mark.parametrize("seed", range(6))
def test_index_cut_matches_the_full_walk(tmp_path, clock, seed: int) -> None:
    rng = random.Random(seed)
    config = LogConfig(index_interval_bytes=rng.choice([0, 1, 512, 4096]), segment_bytes=rng.choice([40_000, 1 << 20]))
    log = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    for _ in range(300):  # tiny batches, batches larger than the index interval, one record or many
        values = [os.urandom(rng.choice([1, 30, 700, 5000])) for _ in range(rng.choice([1, 1, 3, 12]))]
        log.append_as_leader(batch(*values), leader_epoch=0)
    end = log.log_end_offset
    for _ in range(400):
        offset = rng.randrange(0, end)
        max_bytes = rng.choice([0, 1, 100, 4096, 9000, 30_000, 1 << 20])
        max_offset = rng.choice([None, end, rng.randrange(offset, end + 1)])
        min_one = rng.random() < 0.8
        found = log.read_slice(offset, max_bytes=max_bytes, max_offset=max_offset, min_one_batch=min_one)
        got = None if found is None else (found.position, found.size, found.records, found.next_offset)
        if found is not None:
            found.close()
        assert got == _walked(log, offset, max_bytes, max_offset, min_one), (offset, max_bytes, max_offset, min_one)
        # and the bytes are the copying read's (whole batches, the same cut)
        copied = log.read(offset, max_bytes=max_bytes, max_offset=max_offset, min_one_batch=min_one)
        assert (found.size if found is not None else 0) == len(copied)


def test_a_megabyte_range_is_cut_without_reading_the_megabyte(tmp_path, clock, monkeypatch) -> None:
    """ConsumerPerformance's shape: 16 KiB batches (the Java producer's batch.size), 1 MiB per partition."""
    log = Log.open(tmp_path / "t-0", clock_ms=clock)
    one = batch(*[b"x" * 1000 for _ in range(15)])
    for _ in range(200):
        log.append_as_leader(one, leader_epoch=0)
    read = count_preads(monkeypatch)
    found = log.read_slice(1000, max_bytes=1 << 20, max_offset=log.log_end_offset)
    monkeypatch.undo()
    assert found is not None
    found.close()
    assert found.size == (1 << 20) // len(one) * len(one)  # whole batches up to the limit
    assert found.records == found.size // len(one) * 15
    # Old: the whole megabyte was read to walk its 69 headers. Now: the first batch's lookup and the walk from the
    # last index entry within the limit, a chunk each.
    assert sum(read) <= 3 * 64 * 1024, f"{sum(read):,} bytes read to cut a {found.size:,}-byte range"
