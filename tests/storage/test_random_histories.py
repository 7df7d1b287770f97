"""Property-style tests: random histories of appends, reads, crashes, torn tails, retention
and compaction, checked against a plain in-memory model of the partition."""

from __future__ import annotations

import os
import random

import pytest

from kelp.broker.storage import Log, LogCleaner
from kelp.config.log_config import LogConfig
from kelp.records.build import build_batch
from kelp.records.compression import available_compressions
from kelp.records.record import Record, iter_records
from kelp.records.validation import parse_batches

from .helpers import read_all

SEEDS = [1, 2, 3, 4, 5, 6]


def _random_batch(rng: random.Random,
                  ts: int, keys: int | None = None) -> tuple[bytes, list[tuple[bytes | None, bytes | None]]]:
    pairs = []
    for _ in range(rng.randint(1, 6)):
        key = b"key-%d" % rng.randrange(keys) if keys else (None if rng.random() < 0.2
                                                            else os.urandom(rng.randint(0, 8)))
        value = None if (keys and rng.random() < 0.1) else os.urandom(rng.randint(0, 40 if keys else 300))
        pairs.append((key, value))
    data = build_batch(
        [Record(k, v, timestamp=ts + i) for i, (k, v) in enumerate(pairs)],
        compression=rng.choice(available_compressions()),
    )
    return data, pairs


@pytest.mark.parametrize("seed", SEEDS)
def test_random_appends_reads_crashes_and_torn_tails_match_the_model(tmp_path, clock, seed) -> None:
    rng = random.Random(seed)
    config = LogConfig(segment_bytes=rng.choice([700, 2000, 5000]), index_interval_bytes=rng.choice([0, 128, 1024]))
    directory = tmp_path / "t-0"
    log = Log.open(directory, config, clock_ms=clock)
    model: list[tuple[bytes | None, bytes | None]] = []
    for step in range(150):
        action = rng.random()
        if action < 0.75:
            data, pairs = _random_batch(rng, clock.ms)
            result = log.append_as_leader(data, leader_epoch=step // 50)
            assert result.first_offset == len(model)
            model.extend(pairs)
            clock.advance(rng.randint(0, 1000))
        elif action < 0.85:
            offset = rng.randrange(len(model) + 1)
            data = log.read(offset, max_bytes=rng.randint(1, 3000), min_one_batch=rng.random() < 0.8)
            if offset == len(model):
                assert data == b""
            if data:
                batches = parse_batches(data)
                assert batches[0].base_offset <= offset <= batches[0].last_offset
                for record in iter_records(data):
                    assert (record.key, record.value) == model[record.offset]
        elif action < 0.92:
            log = Log.open(directory, config, clock_ms=clock)  # crash: the old object is abandoned
            assert log.log_end_offset == len(model)
        elif action < 0.96:
            # Tear the active segment at a random byte, as a crash mid-write would.
            active = log.active_segment
            if active.size:
                os.truncate(active.log_path, rng.randrange(active.size))
            log = Log.open(directory, config, clock_ms=clock)
            end = log.log_end_offset
            assert active.base_offset <= end <= len(model)
            del model[end:]
        else:
            log.close()
            log = Log.open(directory, config, clock_ms=clock)
        assert log.log_end_offset == len(model)
    assert [(r.offset, r.key, r.value) for r in read_all(log)] == [(o, k, v) for o, (k, v) in enumerate(model)]


@pytest.mark.parametrize("seed", SEEDS)
def test_random_compaction_keeps_exactly_the_newest_value_per_key(tmp_path, clock, seed) -> None:
    rng = random.Random(seed)
    config = LogConfig(
        segment_bytes=rng.choice([1000, 2500]), cleanup_policy="compact", delete_retention_ms=10_000,
        min_cleanable_dirty_ratio=0.0,
    )
    log = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    cleaner = LogCleaner(clock_ms=clock)
    newest: dict[bytes, tuple[int, bytes | None]] = {}
    offset = 0
    for _ in range(100):
        data, pairs = _random_batch(rng, clock.ms, keys=rng.choice([3, 10, 30]))
        log.append_as_leader(data, leader_epoch=0)
        for key, value in pairs:
            newest[key] = (offset, value)
            offset += 1
        clock.advance(rng.randint(0, 500))
        if rng.random() < 0.1:
            cleaner.clean(log, clock.ms)
        if rng.random() < 0.05:
            log.close()
            log = Log.open(tmp_path / "t-0", config, clock_ms=clock)
    cleaner.clean(log, clock.ms)
    active_base = log.active_segment.base_offset
    found: dict[bytes, tuple[int, bytes | None]] = {}
    seen_closed: set[bytes] = set()
    for record in read_all(log):
        if record.offset < active_base:
            assert record.key not in seen_closed, "a closed segment kept two records of one key"
            seen_closed.add(record.key)
        found[record.key] = (record.offset, record.value)
    # Every key's newest record survives at its original offset, except expired tombstones.
    for key, (off, value) in newest.items():
        if key in found:
            assert found[key] == (off, value)
        else:
            assert value is None, f"{key!r} lost its newest value"
    assert log.log_end_offset == offset
