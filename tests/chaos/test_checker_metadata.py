"""The checker's issue 31 rules find what they promise on small histories made by hand, and nothing in clean ones.

Topic incarnations (a record of an earlier incarnation served in the current one: `resurrected`; one of the
current one missing: `lost`), metadata changes answered success (`metadata-lost`, `metadata-undead`), brokers'
metadata at the end (`metadata-divergent`), a compacted topic's replicas compared by what they hold, and what a
power loss may take at which settings.
"""

from __future__ import annotations

import copy

from tests.chaos.checker import check
from tests.chaos.test_checker import T0, clean, edit

COVERED = {"resurrected", "metadata-lost", "metadata-undead", "metadata-divergent"}
CHURN = "chaos-churn"


def with_metadata(lines: list[list], *, topics: dict[str, str] | None = None,
                  applied: dict[str, list] | None = None) -> list[list]:
    out = copy.deepcopy(lines)
    edit(out, "meta")[1].update({"churn_topics": [CHURN], "churn_producer": 100,
                                 "min_insync": {"chaos": 2, "chaos-moves": 1, CHURN: 2}})
    out.insert(len(out) - 1, ["metadata", T0 + 8.5, applied or {"0": [7, "d7"], "1": [7, "d7"]},
                              {"chaos": "c0", **(topics or {})}])
    return out


def churned() -> list[list]:
    """chaos-churn deleted at T0+2 and re-created (id "new") at T0+2.5..T0+3; records 0 and 1 before, 2 after."""
    lines = with_metadata(clean(), topics={CHURN: "new"})
    at = lines.index(edit(lines, "state"))
    lines[at:at] = [
        ["csend", T0 + 1.0, 100, 0], ["ack", T0 + 1.2, 100, 0, CHURN, 0, 0],
        ["csend", T0 + 2.2, 100, 1],  # sent while the topic was being re-created: may land in either
        ["churn", T0 + 2.0, T0 + 2.1, "delete", CHURN, True, None, None],
        ["churn", T0 + 2.5, T0 + 3.0, "create", CHURN, True, "new", None],
        ["ack", T0 + 3.1, 100, 1, CHURN, 0, 0],
        ["csend", T0 + 3.5, 100, 2], ["ack", T0 + 3.6, 100, 2, CHURN, 0, 1],
    ]
    lines.insert(lines.index(edit(lines, "end")), ["log", CHURN, 0, 0, [[0, 100, 1], [1, 100, 2]]])
    return lines


def verdict(lines: list[list]) -> dict[str, int]:
    v = check(lines)
    return {k: n for k, n in v.counts.items() if n}


def test_a_clean_churned_history_has_no_violation() -> None:
    v = check(churned())
    assert v.ok, v.table()
    assert v.stats[f"churn_{CHURN}"] == {"earlier_incarnations": 1, "in_between": 1, "final_incarnation": 1}


def test_a_record_of_an_earlier_incarnation_served_in_the_new_one() -> None:
    lines = churned()
    edit(lines, "log", 1)[4] = [[0, 100, 0], [1, 100, 1], [2, 100, 2]]  # the old log's record first
    edit(lines, "ack", 4)[6] = 2
    assert verdict(lines) == {"resurrected": 1}


def test_a_record_of_the_new_incarnation_missing() -> None:
    lines = churned()
    edit(lines, "log", 1)[4] = [[0, 100, 1]]
    assert verdict(lines) == {"lost": 1}


def retried_after_later_ones(lines: list[list], producer: int, topic: str) -> list[list]:
    """`producer`'s seq 10 and 11 sent to `topic`-0 in that order, 11 stored and acknowledged first (offset 2), 10 only
    after it (offset 3) — what librdkafka does without idempotence when leadership moved while 10's batch was in flight
    to the old leader: the new leader got 11 at once and 10 when its request to the old one had failed. The final log
    of `topic`-0 gets both at the end (a new one if the history has none)."""
    at = lines.index(edit(lines, "state"))
    lines[at:at] = [["csend", T0 + 3.7, producer, 10], ["csend", T0 + 3.75, producer, 11],
                    ["ack", T0 + 3.8, producer, 11, topic, 0, 2], ["ack", T0 + 4.5, producer, 10, topic, 0, 3]]
    log = next((e for e in lines if e[0] == "log" and e[1:3] == [topic, 0]), None)
    if log is None:
        log = ["log", topic, 0, 0, []]
        lines.insert(lines.index(edit(lines, "end")), log)
    log[4] += [[2, producer, 11], [3, producer, 10]]
    return lines


def test_the_churn_producer_retrying_a_batch_after_later_ones_is_an_anomaly_not_an_order_violation() -> None:
    """The churn producer is not idempotent: librdkafka keeps its order only while no retry crosses a leader change
    (max.in.flight is per connection; only the idempotent producer drains a partition before moving to its new
    leader). Seen in the short run of seed 1 under load: "producer 100 in chaos-churn-1: seq 2771 at offset 1485
    but seq 2776 at 1405"."""
    v = check(retried_after_later_ones(churned(), 100, CHURN))
    assert v.ok, v.table()
    assert any("stored 1 acknowledged record(s) after later ones" in a and "seq 10 at offset 3 but seq 11 at 2" in a
               for a in v.anomalies), v.anomalies


def test_an_idempotent_producer_stored_against_its_order_stays_a_violation() -> None:
    lines = retried_after_later_ones(churned(), 0, "chaos")
    assert verdict(lines) == {"order": 1}
    assert not any("after later ones" in a for a in check(lines).anomalies)


def test_the_incarnation_is_the_one_whose_id_the_final_metadata_has() -> None:
    """A later creation that failed (the topic existed) does not move the incarnation's start."""
    lines = churned()
    lines.insert(lines.index(edit(lines, "state")), ["churn", T0 + 5, T0 + 5.1, "create", CHURN, False, None,
                                                      "HTTP 400: exists"])
    assert verdict(lines) == {}


def auto_created() -> list[list]:
    """chaos-churn deleted at T0+2 and created again (id "auto") by a create whose answer was lost — the admin call
    retried and was refused as existing — or by a client's auto-creation; the fault's creates are refused as
    existing (T0+2.5..T0+3, T0+4): no create answered the final id."""
    lines = churned()
    edit(lines, "meta")  # the same run
    for e in lines:
        if e[0] == "churn" and e[3] == "create":
            e[5], e[6], e[7] = False, None, "HTTP 409: topic 'chaos-churn' already exists"
        if e[0] == "metadata":
            e[3][CHURN] = "auto"
    again = ["churn", T0 + 4.0, T0 + 4.1, "create", CHURN, False, None, "HTTP 409: topic 'chaos-churn' already exists"]
    lines.insert(lines.index(edit(lines, "state")), again)  # the fault tries once more, refused again
    return lines


def test_a_topic_auto_created_after_its_deletion_holds_what_was_acknowledged_after_it() -> None:
    """Found in a 600 s run: the records acknowledged between the deletion and the refused create are the new
    incarnation's, not an earlier one's; only a record acknowledged before the deletion was sent is."""
    lines = auto_created()
    assert verdict(lines) == {}, check(lines).table()
    edit(lines, "log", 1)[4] = [[0, 100, 0], [1, 100, 1], [2, 100, 2]]  # the pre-deletion record served too
    edit(lines, "ack", 4)[6] = 2
    assert verdict(lines) == {"resurrected": 1}


def test_a_creation_answered_success_must_be_in_the_final_metadata() -> None:
    lines = with_metadata(clean(), topics={"chaos-m-1": "other-id"})
    at = lines.index(edit(lines, "state"))
    lines[at:at] = [["mop", T0 + 2, T0 + 2.1, "create", "chaos-m-0", 201, "id0", None],
                    ["mop", T0 + 2, T0 + 2.1, "create", "chaos-m-1", 201, "id1", None],
                    ["mop", T0 + 3, T0 + 3.1, "create", "chaos-m-2", 421, None, "not the controller"],
                    ["mop", T0 + 3, T0 + 3.1, "create", "chaos-m-3", 201, "id3", None],
                    ["mop", T0 + 4, T0 + 4.1, "delete", "chaos-m-3", -1, None, "timed out"]]
    assert verdict(lines) == {"metadata-lost": 2}  # m-0 missing, m-1 another id; m-2 refused, m-3 open


def test_a_deletion_answered_success_must_not_be_undone() -> None:
    lines = with_metadata(clean(), topics={"chaos-m-0": "id0"})
    at = lines.index(edit(lines, "state"))
    lines[at:at] = [["mop", T0 + 2, T0 + 2.1, "create", "chaos-m-0", 201, "id0", None],
                    ["mop", T0 + 3, T0 + 3.1, "delete", "chaos-m-0", 204, None, None]]
    assert verdict(lines) == {"metadata-undead": 1}


def test_brokers_that_end_on_different_metadata() -> None:
    lines = with_metadata(clean(), applied={"0": [9, "aa"], "1": [9, "bb"]})
    assert verdict(lines) == {"metadata-divergent": 1}


def test_compacted_replicas_are_compared_by_what_they_hold() -> None:
    lines = clean()
    at = lines.index(edit(lines, "end"))
    lines[at:at] = [["replica", "__consumer_offsets", 0, 0, {"hw_ref": 5, "source": 0, "leo": 5, "compacted": True,
                                                              "keys": 2, "sha256_below_hw": "k1"}],
                    ["replica", "__consumer_offsets", 0, 1, {"hw_ref": 5, "source": 0, "leo": 4, "compacted": True,
                                                              "keys": 2, "sha256_below_hw": "k1"}]]
    assert verdict(lines) == {"divergent": 1}  # broker 1 ends below the high watermark
    lines[at + 1][4]["leo"] = 5
    assert verdict(lines) == {}
    lines[at + 1][4]["sha256_below_hw"] = "k2"
    assert verdict(lines) == {"divergent": 1}


def _lost_after(kind: str, *, flush_each: bool, topic: str = "chaos") -> dict[str, int]:
    lines = with_metadata(clean())
    if flush_each:
        edit(lines, "meta")[1]["settings"] = {"log.flush.interval.messages": 1}
    lines.insert(lines.index(edit(lines, "state")), ["fault", T0 + 5.5, T0 + 6.5, 1, kind, {}, {"broker": 0}])
    edit(lines, "log")[4] = [[0, 0, 0]]  # seq 1, acknowledged at T0+2, is gone
    edit(lines, "state")[2]["chaos"][0][4:] = [1, 1]
    for r in (edit(lines, "replica", 0), edit(lines, "replica", 1)):
        r[4]["hw_ref"] = r[4]["leo"] = 1
    lines.remove(edit(lines, "dlv", 1))
    edit(lines, "commit")[7] = 1
    return verdict(lines)


def test_what_a_power_loss_may_take() -> None:
    assert _lost_after("power-loss-all", flush_each=False) == {}  # not fsynced by anyone: Kafka's promise too
    assert _lost_after("power-loss-all", flush_each=True) == {"lost": 1}  # fsynced before the answer: kept
    assert _lost_after("power-loss-one", flush_each=False) == {"lost": 1}  # the other in-sync replica had it
    assert _lost_after("kill-all", flush_each=False) == {"lost": 1}  # a process crash loses nothing
