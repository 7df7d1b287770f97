"""The group-rebalance section of `make bench` (issue 36) at a small scale against Kelp alone, and its checker.

`make bench` runs it with 10 consumers over 100 partitions beside Apache Kafka; here 4 consumers over 20
partitions, one leaving and one joining, once per protocol (KIP-848's consumer protocol, classic eager, classic
cooperative). What is asserted is the invariant, never a time: no partition owned by two members at once (the
members' own assign/revoke callbacks), every acknowledged record consumed, none twice, none by a member that
did not own its partition then — and each phase reached a group the broker describes as Stable with the live
members assigned what they own (the section raises otherwise). The checker itself is tested on ledgers that
break each invariant.
"""

from __future__ import annotations

import json

import pytest

import bench.rebalance.section as rebalance
from bench.rebalance.members import Ledger, verdict

pytestmark = [pytest.mark.clients]


@pytest.mark.timeout(300)
def test_rebalances_of_every_protocol_keep_ownership_exclusive_and_lose_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert rebalance.main(["--no-kafka", "--runs", "1", "--rebalance-members", "4", "--rebalance-partitions", "20",
                           "--rebalance-churn", "1", "--rebalance-prefill", "20", "--rebalance-rate", "200",
                           "--rebalance-protocols", "consumer,classic,classic-cooperative", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)["rebalance"]
    assert res["kafka"] is False and list(res["cells"]) == ["kelp consumer", "kelp classic", "kelp classic-cooperative"]
    for key, cell in res["cells"].items():
        assert set(cell["seconds"]) == set(rebalance.PHASES)
        (run,) = cell["runs"]
        assert run["records_produced"] >= 20 * 20, key
        assert (run["overlaps"], run["consumed_twice"], run["lost"], run["not_produced"],
                run["outside_ownership"]) == (0, 0, 0, 0, 0), (key, run["samples"])
        assert run["records_consumed"] == run["records_produced"], key
        assert run["closed_without_revocation"] == 0 and run["lost_callbacks"] == 0, key  # every end is a callback
        assert run["client_errors"] == 0 and run["producer_errors"] == [], (key, run["samples"])
    rebalance.print_report(res)
    report = capsys.readouterr().out
    assert "Apache Kafka reference skipped" in report
    assert "goal no partition owned twice, no record lost or consumed twice in a rebalance: met" in report


def test_the_checker_finds_each_broken_invariant() -> None:
    ledger = Ledger()
    ledger.assign("a", [0, 1], 1.0)
    ledger.record("a", 0, 0, 1.5)
    ledger.release("a", [0], 2.0, "revoked")
    ledger.assign("b", [0], 2.0)  # from the instant a's revocation returned: not an overlap
    ledger.record("b", 0, 1, 2.5)
    ledger.assign("b", [1], 2.8)  # a still owns partition 1 until 3.0
    ledger.release("a", [1], 3.0, "revoked")
    ledger.record("b", 1, 0, 3.1)
    ledger.record("b", 1, 0, 3.2)  # twice
    ledger.record("a", 0, 2, 3.3)  # a no longer owns partition 0
    got = verdict(ledger, {(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)})
    assert got["overlaps"] == 1 and "partition 1: a owned it until 3.000 (revoked), b from 2.800" in \
        got["samples"]["overlaps"][0]
    assert got["consumed_twice"] == 1 and got["samples"]["consumed_twice"] == [(1, 0)]
    assert got["lost"] == 1 and got["samples"]["lost"] == [(1, 1)]
    assert got["outside_ownership"] == 1 and got["samples"]["outside_ownership"] == [(0, 2, "a")]
    assert rebalance.broken({**got, "producer_errors": []})


def test_an_interval_still_open_overlaps_a_later_owner() -> None:
    ledger = Ledger()
    ledger.assign("a", [3], 1.0)
    ledger.assign("b", [3], 5.0)  # a never gave it up
    assert verdict(ledger, set())["overlaps"] == 1
    assert ledger.closed("a", 6.0) == 1 and ledger.spans[0].how == "closed"


@pytest.mark.parametrize("flag, value", [("--rebalance-churn", "4"), ("--rebalance-churn", "0"),
                                         ("--rebalance-protocols", "eager"), ("--rebalance-partitions", "3")])
def test_the_section_refuses_bad_options(capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    assert rebalance.main(["--no-kafka", "--rebalance-members", "4", flag, value]) == 2
    assert "--rebalance-" in capsys.readouterr().err
