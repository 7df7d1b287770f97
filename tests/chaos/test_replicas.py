"""The suite reads replicas from disk with Kelp's own Log: identical replicas agree, a replica whose bytes differ below
the high watermark or that ends before it is reported divergent (with the first differing offset), and the records it
decodes name their producer, sequence, producer id and epoch — what the checker's exactly-once proof stands on.
"""

from __future__ import annotations

from pathlib import Path

from kelp.broker.storage import Log
from kelp.records.build import build_batch
from tests.chaos.checker import check
from tests.chaos.history import History, read_history
from tests.chaos.replicas import collect


def _value(producer: int, seq: int) -> bytes:
    return b"kc|%d|%d|xx" % (producer, seq)


def _write(directory: Path, batches: list[list[tuple[int, int]]], *, pid: int = 7) -> None:
    log = Log.open(directory)
    try:
        for b in batches:
            data = build_batch([(b"k", _value(p, s)) for p, s in b], producer_id=pid, producer_epoch=0,
                               base_sequence=b[0][1], now_ms=1_700_000_000_000)
            log.append_as_leader(data, leader_epoch=0)
        log.flush()
    finally:
        log.close()


def _run(tmp_path: Path, replicas: dict[int, list[list[tuple[int, int]]]], hw: int) -> tuple[list, object]:
    for b, batches in replicas.items():
        _write(tmp_path / f"broker-{b}" / "chaos-0", batches)
    h = History(tmp_path / "h.jsonl.gz")
    h.add("meta", {"seed": 0, "topics": ["chaos"], "groups": []})
    h.add("state", 0.0, {"chaos": [[0, 0, sorted(replicas), sorted(replicas), hw, hw]]})
    collect(tmp_path, {"chaos": [[0, 0, sorted(replicas), sorted(replicas), hw, hw]]}, ["chaos"], h)
    h.add("end", 1.0, {"unknown": 0})
    h.close()
    lines = list(read_history(tmp_path / "h.jsonl.gz"))
    return lines, check(lines)


def test_identical_replicas_agree_and_records_name_their_producer(tmp_path: Path) -> None:
    same = [[(0, 0), (0, 1)], [(0, 2)]]
    lines, v = _run(tmp_path, {0: same, 1: same}, hw=3)
    assert v.ok, v.table()
    log = next(line for line in lines if line[0] == "log")
    assert log[1:4] == ["chaos", 0, 0]
    assert [r[:5] for r in log[4]] == [[0, 0, 0, 7, 0], [1, 0, 1, 7, 0], [2, 0, 2, 7, 0]]
    replica = [line[4] for line in lines if line[0] == "replica"]
    assert replica[0]["sha256_below_hw"] == replica[1]["sha256_below_hw"] and replica[0]["leo"] == 3


def test_bytes_that_differ_below_the_high_watermark_are_divergent(tmp_path: Path) -> None:
    _, v = _run(tmp_path, {0: [[(0, 0)], [(0, 1)]], 1: [[(0, 0)], [(1, 5)]]}, hw=2)
    assert v.counts["divergent"] == 1, v.table()
    assert "first differing batch at offset 1" in v.examples["divergent"][0]


def test_differences_above_the_high_watermark_are_allowed(tmp_path: Path) -> None:
    _, v = _run(tmp_path, {0: [[(0, 0)], [(0, 1)]], 1: [[(0, 0)], [(1, 5)]]}, hw=1)
    assert v.counts["divergent"] == 0, v.table()


def test_a_replica_ending_before_the_high_watermark_is_divergent(tmp_path: Path) -> None:
    _, v = _run(tmp_path, {0: [[(0, 0)], [(0, 1)]], 1: [[(0, 0)]]}, hw=2)
    assert v.counts["divergent"] == 1 and "ends at 1, below the high watermark 2" in v.examples["divergent"][0]


def test_a_record_stored_twice_names_both_batches(tmp_path: Path) -> None:
    twice = [[(0, 0)], [(0, 0)]]
    _, v = _run(tmp_path, {0: twice, 1: twice}, hw=2)
    assert v.counts["duplicated"] == 1
    assert "producer id 7, epoch 0, batch sequence 0" in v.examples["duplicated"][0]
