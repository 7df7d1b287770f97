"""The churn suite's checker catches each violation it exists for, and passes only data that keeps every promise.

No cluster needed: the churn cases (`test_churn_cluster.py`) are only as
strong as `churn_check`, so each kind of damage a churn could do — a lost
acknowledged record, a record stored twice, a producer's records out of
order, a consumer served data the log no longer holds, a group that never
caught up, replicas whose bytes differ or that stop short of the high
watermark — is fed to it here and must be reported. Replica logs are
written by the broker's own storage layer (leader appends, follower copies
the bytes, with different segment sizes), as on a broker's volume.
"""

from __future__ import annotations

from pathlib import Path

from kelp.broker.storage.log import Log
from kelp.config.log_config import LogConfig
from kelp.records.build import build_batch
from tests.kube.churn_check import (
    Acked,
    Consumed,
    check_records,
    compare_replicas,
    parse_value,
    read_replica_batches,
    value_for,
)


def _clean():
    """Two producers, two partitions, every record acked and consumed: nothing to report."""
    log = {0: [], 1: []}
    acked, consumed = [], []
    for seq in range(6):
        for n, producer in enumerate(("p0", "p1")):
            partition = (seq + n) % 2
            value = value_for(producer, seq)
            offset = len(log[partition])
            log[partition].append((offset, value))
            acked.append(Acked(partition, offset, value))
            consumed.append(Consumed(partition, offset, value))
    return acked, log, consumed


def test_values_name_their_producer_and_sequence() -> None:
    assert parse_value(value_for("churn-a/p1", 42)) == ("churn-a/p1", 42)
    assert parse_value(b"not-ours") is None and parse_value(None) is None


def test_data_that_keeps_every_promise_passes() -> None:
    acked, log, consumed = _clean()
    verdict = check_records(acked=acked, log=log, consumed=consumed)
    assert verdict.ok, verdict.failures()
    assert (verdict.acked, verdict.stored) == (12, 12)


def test_nothing_acknowledged_is_not_a_pass() -> None:
    verdict = check_records(acked=[], log={0: []}, consumed=[])
    assert not verdict.ok and "checked nothing" in verdict.failures()


def test_a_lost_acknowledged_record_is_reported() -> None:
    acked, log, consumed = _clean()
    gone = log[1].pop(2)
    verdict = check_records(acked=acked, log=log, consumed=[c for c in consumed if c.value != gone[1]])
    assert len(verdict.lost) == 1 and "stored nowhere" in verdict.lost[0]
    assert not verdict.ok


def test_an_acknowledged_record_at_another_offset_is_reported_lost() -> None:
    acked, log, consumed = _clean()
    log[0][1], log[0][2] = (1, log[0][2][1]), (2, log[0][1][1])
    verdict = check_records(acked=acked, log=log, consumed=[])
    assert len(verdict.lost) == 2 and all("stored at" in x for x in verdict.lost)


def test_an_acknowledgement_without_an_offset_needs_the_value_in_its_partition() -> None:
    # Churn case (h), after issue 31's merge: 9 records the producer confirmed without an offset (librdkafka's
    # implicit acks of a timed-out request) were stored once each, in order, yet counted lost.
    acked, log, consumed = _clean()
    acked[3] = Acked(acked[3].partition, None, acked[3].value)
    verdict = check_records(acked=acked, log=log, consumed=consumed)
    assert verdict.ok, verdict.failures()
    # Stored in another partition only, or nowhere: lost all the same.
    moved = acked[3]
    log[moved.partition] = [(o, v) for o, v in log[moved.partition] if v != moved.value]
    other = 1 - moved.partition
    log[other].append((len(log[other]), moved.value))
    verdict = check_records(acked=acked, log=log, consumed=[c for c in consumed if c.value != moved.value])
    assert len(verdict.lost) == 1 and "acked at" in verdict.lost[0] and "stored at" in verdict.lost[0]
    log[other].pop()
    verdict = check_records(acked=acked, log=log, consumed=[c for c in consumed if c.value != moved.value])
    assert len(verdict.lost) == 1 and "stored nowhere" in verdict.lost[0]


def test_a_record_stored_twice_is_reported() -> None:
    acked, log, consumed = _clean()
    log[0].append((len(log[0]), log[0][0][1]))
    verdict = check_records(acked=acked, log=log, consumed=consumed)
    assert len(verdict.duplicated) == 1 and not verdict.lost
    assert not verdict.ok


def test_a_producers_records_out_of_order_are_reported() -> None:
    _acked, log, _consumed = _clean()
    swapped = [(o, v) for o, v in log[0]]
    swapped[0], swapped[2] = (0, swapped[2][1]), (2, swapped[0][1])
    verdict = check_records(acked=[Acked(0, o, v) for o, v in swapped], log={0: swapped, 1: log[1]}, consumed=[])
    assert verdict.reordered and not verdict.lost


def test_data_served_to_the_group_but_no_longer_in_the_log_is_reported() -> None:
    acked, log, consumed = _clean()
    stale = Consumed(1, len(log[1]), value_for("p0", 99))  # served, then truncated away
    verdict = check_records(acked=acked, log=log, consumed=[*consumed, stale])
    assert len(verdict.divergent) == 1 and "holds nothing" in verdict.divergent[0]


def test_a_group_that_never_read_an_acknowledged_record_is_reported() -> None:
    acked, log, consumed = _clean()
    verdict = check_records(acked=acked, log=log, consumed=consumed[1:])
    assert len(verdict.unconsumed) == 1 and not verdict.lost


def _replica_pair(tmp_path: Path) -> tuple[Log, Log]:
    """A leader and a follower of one partition, rolling segments at different sizes, as two brokers may."""
    leader = Log.open(tmp_path / "leader" / "t-0", LogConfig(segment_bytes=600))
    follower = Log.open(tmp_path / "follower" / "t-0", LogConfig(segment_bytes=1500))
    for i in range(12):
        batch = build_batch([(b"k", value_for("p0", 3 * i + j)) for j in range(3)], now_ms=1_700_000_000_000)
        leader.append_as_leader(batch, leader_epoch=1 + i // 6)
    for _base, _next, raw in read_replica_batches(leader.directory):  # the follower copies the leader's bytes
        follower.append_as_follower(raw)
    leader.flush()
    follower.flush()
    return leader, follower


def test_replicas_with_the_same_batches_compare_equal_across_segment_boundaries(tmp_path: Path) -> None:
    leader, follower = _replica_pair(tmp_path)
    assert len(list(leader.directory.glob("*.log"))) > len(list(follower.directory.glob("*.log"))) >= 1
    batches = {0: read_replica_batches(leader.directory), 1: read_replica_batches(follower.directory)}
    assert len(batches[0]) == 12 and batches[0] == batches[1]
    assert compare_replicas("t", 0, batches, high_watermark=36) == []


def test_replicas_whose_bytes_differ_are_reported(tmp_path: Path) -> None:
    leader, follower = _replica_pair(tmp_path)
    segment = sorted(follower.directory.glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    data[-5] ^= 0xFF  # inside the last record of the segment's last batch
    segment.write_bytes(bytes(data))
    batches = {0: read_replica_batches(leader.directory), 1: read_replica_batches(follower.directory)}
    problems = compare_replicas("t", 0, batches, high_watermark=36)
    assert len(problems) == 1 and "different bytes" in problems[0], problems


def test_a_replica_short_of_the_high_watermark_is_reported_and_uncommitted_tails_are_not(tmp_path: Path) -> None:
    leader, follower = _replica_pair(tmp_path)
    batches = {0: read_replica_batches(leader.directory), 1: read_replica_batches(follower.directory)[:-2]}
    problems = compare_replicas("t", 0, batches, high_watermark=36)
    assert any("below the high watermark 36" in p for p in problems), problems
    assert compare_replicas("t", 0, batches, high_watermark=30) == []  # the missing tail is above it
    assert compare_replicas("t", 0, {}, high_watermark=0)  # nothing to compare is not a pass


def test_a_client_that_dies_is_an_error_and_stalls_until_the_end() -> None:
    """A producer killed by a fatal error (e.g. OUT_OF_ORDER_SEQUENCE_NUMBER from poll()) must fail the case."""
    from tests.kube.churn_workload import Workload, WorkloadSettings

    work = Workload(bootstrap="127.0.0.1:9", topic="t", group="g", settings=WorkloadSettings(producers=1))
    state = work.producers[0]

    def fatal(_state) -> None:
        state.acks.append(work.started_at + 1.0)
        raise RuntimeError("KafkaError{FATAL,code=OUT_OF_ORDER_SEQUENCE_NUMBER}")
    work._produce_until_stopped = fatal  # type: ignore[method-assign]
    work.started_at = 100.0
    work._produce(state)
    work.stopped_at = 130.0
    assert state.died and any("died" in e and "OUT_OF_ORDER" in e for e in work.errors())
    assert work.longest_stall() == 29.0  # from its last acknowledgement to the stop

    def consumer_fatal(_index) -> None:
        raise RuntimeError("consumer fenced")
    work._consume_until_stopped = consumer_fatal  # type: ignore[method-assign]
    work._consume(1)
    assert "g-c1 died: consumer fenced" in work.errors()


def test_the_report_keeps_a_failed_case_with_what_it_measured(monkeypatch, tmp_path: Path) -> None:
    import pytest

    from tests.kube import churn_report

    monkeypatch.setattr(churn_report, "ROWS", [])
    monkeypatch.setenv("KELP_CHURN_REPORT", str(tmp_path / "churn.txt"))
    with churn_report.record_case("a passes", "short") as row:
        row.acked, row.longest_stall_s = 10, 1.25
        row.ready("roll", 30.0)
    with pytest.raises(AssertionError):
        with churn_report.record_case("b fails", "short") as row:
            row.take(check_records(acked=[Acked(0, 0, b"p:1")], log={0: []}, consumed=[]))
            raise AssertionError("records were not kept:\nlost: 1")
    lines = churn_report.table(churn_report.ROWS)
    assert lines[0].split()[:4] == ["case", "form", "acked", "lost"]
    assert "roll 30.0s" in lines[2] and "1.2s" in lines[2] and lines[2].endswith("passed")
    assert "FAILED: records were not kept: / lost: 1" in lines[3] and " 1 " in lines[3]
    assert (tmp_path / "churn.txt").read_text().splitlines() == lines
