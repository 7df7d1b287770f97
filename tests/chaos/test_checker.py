"""The checker finds each violation it promises, on small histories made by hand — and none in a clean one.

A check that cannot fail proves nothing: every violation kind gets a
history that breaks exactly it, and the clean history passes. Also: a
history written and read back through history.py gives the same verdict
(what `runner --replay` relies on), and a torn last line is tolerated.
"""

from __future__ import annotations

import copy
import gzip

import pytest

from tests.chaos.checker import VIOLATIONS, check
from tests.chaos.history import History, read_history

T0 = 1000.0


def clean() -> list[list]:
    """Two records acked on chaos-0, delivered to g0 and committed; two replicas alike; everything whole at the end."""
    return [
        ["meta", {"seed": 1, "mode": "short", "network": "netns", "brokers": 2, "topics": ["chaos"], "groups": ["g0"],
                  "workload_start": T0}],
        ["ack", T0 + 1, 0, 0, "chaos", 0, 0],
        ["ack", T0 + 2, 0, 1, "chaos", 0, 1],
        ["dlv", T0 + 3, "g0", "m0", "chaos", 0, 0, 0, 0],
        ["dlv", T0 + 3, "g0", "m0", "chaos", 0, 1, 0, 1],
        ["commit", T0 + 4, T0 + 4.1, "g0", "m0", "chaos", 0, 2, None],
        ["fault", T0 + 5, T0 + 6, 0, "kill", {"broker": 1}, {}],
        ["recovered", T0 + 7, 0, 1.0],
        ["state", T0 + 8, {"chaos": [[0, 0, [0, 1], [0, 1], 2, 2]]}],
        ["stop", T0 + 9, 0, 1.5, 0],
        ["stop", T0 + 9, 1, 1.6, 0],
        ["log", "chaos", 0, 0, [[0, 0, 0], [1, 0, 1]]],
        ["replica", "chaos", 0, 0, {"hw_ref": 2, "source": 0, "leo": 2, "sha256_below_hw": "aa"}],
        ["replica", "chaos", 0, 1, {"hw_ref": 2, "source": 0, "leo": 2, "sha256_below_hw": "aa"}],
        ["end", T0 + 10, {"unknown": 0, "nemesis_end": T0 + 7}],
    ]


def edit(lines: list[list], kind: str, index: int = 0) -> list:
    """The index-th line of `kind` (for changing in place)."""
    return [line for line in lines if line[0] == kind][index]


def test_a_clean_history_has_no_violation() -> None:
    v = check(clean())
    assert v.ok, v.table()
    assert v.faults["kill"] == 1 and v.stats["acked"] == 2 and v.stats["delivered"] == 2


def _broken(mutate) -> dict[str, int]:
    lines = copy.deepcopy(clean())
    mutate(lines)
    v = check(lines)
    return {k: n for k, n in v.counts.items() if n}


def test_a_lost_acknowledged_record() -> None:
    def m(lines):
        edit(lines, "log")[4] = [[0, 0, 0]]
        edit(lines, "state")[2]["chaos"][0][4:] = [1, 1]
        for r in (edit(lines, "replica", 0), edit(lines, "replica", 1)):
            r[4]["hw_ref"] = r[4]["leo"] = 1
        lines.remove(edit(lines, "dlv", 1))
        edit(lines, "commit")[7] = 1
    assert _broken(m) == {"lost": 1}


def test_a_record_acknowledged_at_an_offset_that_holds_another() -> None:  # issue 17 item 6
    def m(lines):
        edit(lines, "ack", 1)[6] = 0
    assert _broken(m) == {"moved": 1}


def test_an_ack_without_offset_is_not_moved_but_still_must_be_stored() -> None:
    def m(lines):
        edit(lines, "ack", 1)[6] = None
    assert _broken(m) == {}


def test_a_record_stored_twice() -> None:
    def m(lines):
        edit(lines, "log")[4].append([2, 0, 0])
    assert _broken(m) == {"duplicated": 1}


def test_acknowledged_records_out_of_order() -> None:
    def m(lines):
        edit(lines, "log")[4] = [[0, 0, 1], [1, 0, 0]]
        edit(lines, "ack", 0)[6], edit(lines, "ack", 1)[6] = 1, 0
        edit(lines, "dlv", 0)[7:] = [0, 1]
        edit(lines, "dlv", 1)[7:] = [0, 0]
    assert _broken(m) == {"order": 1}


@pytest.mark.parametrize("how", ["bytes", "short", "missing"])
def test_a_divergent_replica(how: str) -> None:
    def m(lines):
        r = edit(lines, "replica", 1)[4]
        if how == "bytes":
            r["sha256_below_hw"], r["first_diff_offset"] = "bb", 1
        elif how == "short":
            r["leo"] = 1
        else:
            edit(lines, "replica", 1)[4] = {"missing": True, "source": 0}
    assert _broken(m) == {"divergent": 1}


def test_a_delivery_the_final_log_does_not_hold() -> None:
    def m(lines):
        edit(lines, "dlv", 1)[8] = 7
    assert _broken(m) == {"phantom": 1}


def test_a_commit_ahead_of_what_the_group_was_delivered() -> None:
    def m(lines):
        edit(lines, "dlv", 1)[1] = T0 + 5  # delivered after the commit that covers it
    assert _broken(m) == {"commit-ahead": 1}


def test_a_commit_past_the_log_end() -> None:
    def m(lines):
        edit(lines, "commit")[7] = 5
    assert _broken(m) == {"commit-ahead": 1, "group-behind": 1}


def test_an_isr_not_restored_at_the_end() -> None:
    def m(lines):
        edit(lines, "state")[2]["chaos"][0][3] = [0]
    assert _broken(m) == {"isr-not-restored": 1}


def test_a_group_behind_at_the_end() -> None:
    def m(lines):
        edit(lines, "commit")[7] = 1
    assert _broken(m) == {"group-behind": 1}


def test_a_group_that_stalled_while_records_were_acknowledged() -> None:
    def m(lines):
        edit(lines, "meta")[1]["workload_start"] = T0 - 200
        lines.insert(1, ["ack", T0 - 100, 0, 9, "chaos", 0, None])
        edit(lines, "log")[4].append([2, 0, 9])
        edit(lines, "state")[2]["chaos"][0][4:] = [3, 3]
        edit(lines, "commit")[7] = 3
        lines.insert(5, ["dlv", T0 + 3, "g0", "m0", "chaos", 0, 2, 0, 9])
        for r in (edit(lines, "replica", 0), edit(lines, "replica", 1)):
            r[4]["hw_ref"] = r[4]["leo"] = 3
    assert _broken(m) == {"group-stalled": 1}


def test_a_broker_that_did_not_stop_within_the_bound() -> None:
    def m(lines):
        edit(lines, "stop", 1)[4] = None
        edit(lines, "fault")[6]["stop_hung"] = True
    assert _broken(m) == {"stop-hung": 2}


def test_a_history_without_its_end_is_incomplete() -> None:
    def m(lines):
        lines.remove(edit(lines, "end"))
    assert _broken(m) == {"incomplete": 1}


def test_every_violation_kind_has_a_test_here() -> None:
    from tests.chaos.test_checker_metadata import COVERED  # issue 31's kinds, tested there

    covered = {"lost", "moved", "duplicated", "order", "divergent", "phantom", "commit-ahead", "isr-not-restored",
               "group-stalled", "group-behind", "stop-hung", "incomplete"}
    assert covered | COVERED == set(VIOLATIONS)


def test_a_history_written_and_read_back_gives_the_same_verdict_and_a_torn_tail_is_tolerated(tmp_path) -> None:
    h = History(tmp_path / "history.jsonl.gz")
    broken = copy.deepcopy(clean())
    edit(broken, "log")[4].append([2, 0, 0])
    for line in broken:
        h.add(*line)
    h.close()
    assert check(read_history(tmp_path / "history.jsonl.gz")).to_json() == check(broken).to_json()
    raw = gzip.decompress((tmp_path / "history.jsonl.gz").read_bytes())
    (tmp_path / "torn.jsonl.gz").write_bytes(gzip.compress(raw[:-7]))
    assert [line[0] for line in read_history(tmp_path / "torn.jsonl.gz")][-1] == "replica"
    (tmp_path / "cut.jsonl.gz").write_bytes((tmp_path / "history.jsonl.gz").read_bytes()[:-20])
    assert len(list(read_history(tmp_path / "cut.jsonl.gz"))) <= len(broken)


# -- duplicates the client makes by bumping its idempotent epoch (docs/chaos.md) --------------------------------
PID = 7
ERRSEQ = ("[thrd:10.0.0.11:9092/0]: 10.0.0.11:9092/0: ProduceRequest for chaos [0] with 3 message(s) failed due to "
          "skipped sequence numbers (PID{Id:7,Epoch:0}, base seq %d > next seq %d) caused by previous failed request "
          "(NOT_LEADER_OR_FOLLOWER, actions Refresh,MsgNotPersisted, base seq 2..4, base msgid 3, 40ms ago): "
          "recovering and retrying")


def _drain(reason: str) -> str:
    return ("[thrd:10.0.0.11:9092/0]: Beginning partition drain in state Assigned for PID{Id:7,Epoch:0} epoch bump "
            f"for 2 partition(s) with in-flight requests: {reason}")


BUMPED = "[thrd:main]: All partitions drained, bumped epoch to PID{Id:7,Epoch:1}"


def _stored_again(pidem: list[tuple[str, str]], *, again_epoch: int = 1, ack_at: int = 2):
    """Producer 0's seq 0, stored at chaos-0@0 (producer id 7, epoch 0), is stored again at @2 under
    `again_epoch` at sequence 0 and acknowledged at `ack_at`; the log keeps epoch 0 up to sequence 1. `pidem`:
    the producer's librdkafka lines, (facility, text)."""
    def m(lines):
        edit(lines, "log")[4] = [[0, 0, 0, PID, 0, 0, 1], [1, 0, 1, PID, 0, 1, 1], [2, 0, 0, PID, again_epoch, 0, 2]]
        edit(lines, "ack", 0)[6] = ack_at
        at = lines.index(edit(lines, "state"))
        lines[at:at] = [["pidem", T0 + 2.5, 0, fac, text] for fac, text in pidem]
    return m


def _verdict(mutate):
    lines = copy.deepcopy(clean())
    mutate(lines)
    return check(lines)


@pytest.mark.parametrize("expected", [2, 1])  # the client expected 1: sequence 1 stored, not yet acknowledged
def test_a_copy_the_client_made_after_an_out_of_order_answer_the_log_confirms_is_not_a_violation(expected) -> None:
    v = _verdict(_stored_again([("ERRSEQ", ERRSEQ % (5, expected)), ("DRAIN", _drain("skipped sequence numbers")),
                                ("DRAIN", BUMPED)]))
    assert v.ok, v.table()
    assert v.stats["duplicated_by_client"] == 1
    why = ("producer 0 bumped its idempotent epoch (OUT_OF_ORDER_SEQUENCE_NUMBER on chaos-0 for base seq 5, the "
           f"client expecting {expected} (epoch 0): the log keeps epoch 0 only up to sequence 1)")
    assert any(a.startswith(why)
               and "stored 1 record(s) again" in a and "chaos-0@2" in a for a in v.anomalies), v.anomalies
    assert "copies stored again by the client's epoch bump 1" in v.table()


def test_a_copy_after_messages_timed_out_in_the_client_is_not_a_violation() -> None:
    v = _verdict(_stored_again([("DRAIN", _drain("3 message(s) timed out on chaos [1]")), ("DRAIN", BUMPED)]))
    assert v.ok and v.stats["duplicated_by_client"] == 1, v.table()


@pytest.mark.parametrize("case", [
    "no reason logged", "log does not confirm", "errseq missing", "unknown producer id", "sequence gap",
    "same epoch", "acked at the first copy", "nacked", "another producer id",
])
def test_a_copy_without_proof_that_the_client_made_it_stays_a_violation(case: str) -> None:
    bump = [("ERRSEQ", ERRSEQ % (5, 2)), ("DRAIN", _drain("skipped sequence numbers")), ("DRAIN", BUMPED)]
    kw = {}
    if case == "no reason logged":
        bump = [("DRAIN", BUMPED)]
    elif case == "log does not confirm":  # base seq 2 refused, yet the log keeps sequence 1: it was in sequence
        bump[0] = ("ERRSEQ", ERRSEQ % (2, 0))
    elif case == "errseq missing":
        bump = bump[1:]
    elif case == "unknown producer id":
        bump = [("UNKPID", "ProduceRequest for chaos [0] with 1 message(s) failed due to unknown producer id "
                           "(PID{Id:7,Epoch:0}, base seq 2, 0 retries): no risk of duplication/reordering: "
                           "resetting PID and retrying"),
                ("DRAIN", _drain("unknown producer id")), ("DRAIN", BUMPED)]
    elif case == "sequence gap":
        bump = [("DRAIN", _drain("message sequence gap")), ("DRAIN", BUMPED)]
    elif case == "same epoch":  # the broker appended one batch twice: never the client's doing
        kw = {"again_epoch": 0}
    elif case == "acked at the first copy":  # librdkafka never sends an acknowledged record again
        kw = {"ack_at": 0}

    def m(lines):
        _stored_again(bump, **kw)(lines)
        if case == "nacked":
            lines.insert(lines.index(edit(lines, "state")), ["nack", T0 + 2, 0, 0, "chaos", 0, "Local: timed out"])
        if case == "another producer id":
            edit(lines, "log")[4][2][3] = PID + 1
    v = _verdict(m)
    assert v.counts["duplicated"] == 1 and not v.stats["duplicated_by_client"], v.table()
    if case in ("no reason logged", "log does not confirm", "unknown producer id"):
        assert "client epoch bumps: to epoch 1" in v.examples["duplicated"][0]


def test_the_producer_keeps_only_the_debug_lines_that_explain_a_bump(tmp_path) -> None:
    import logging

    from tests.chaos.workload import IdempotenceEvents
    h = History(tmp_path / "h.jsonl.gz")
    f = IdempotenceEvents(2, h)

    def rec(level: int, fac: str, text: str) -> logging.LogRecord:
        return logging.LogRecord("chaos.clients.p2", level, __file__, 1, "%s [%s] %s",
                                 (fac, "chaos-p2#producer-3", text), None)
    kept = rec(logging.DEBUG, "DRAIN", _drain("skipped sequence numbers"))
    assert f.filter(kept) and kept.levelno == logging.INFO
    assert f.filter(rec(logging.DEBUG, "ERRSEQ", ERRSEQ % (5, 2)))
    assert not f.filter(rec(logging.DEBUG, "DRAIN", "chaos [0] beginning partition drain: drain before retrying"))
    assert not f.filter(rec(logging.DEBUG, "IDEMPSTATE", "Idempotent producer state change Assigned -> DrainBump"))
    assert f.filter(rec(logging.WARNING, "FAIL", "Disconnected"))
    h.close()
    got = [line for line in read_history(tmp_path / "h.jsonl.gz")]
    assert [(line[0], line[2], line[3]) for line in got] == [("pidem", 2, "DRAIN"), ("pidem", 2, "ERRSEQ")]
