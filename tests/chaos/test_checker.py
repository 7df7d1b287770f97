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
    covered = {"lost", "moved", "duplicated", "order", "divergent", "phantom", "commit-ahead", "isr-not-restored",
               "group-stalled", "group-behind", "stop-hung", "incomplete"}
    assert covered == set(VIOLATIONS)


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
