"""The attack bench (bench/attacks/section.py) in a tiny mode against Kelp alone, so its code path cannot rot (`make
test-long`).

`make bench` runs every attack of issue 33 for 10 s each beside Apache Kafka; here three cheap ones for 1.5 s
each, no Kafka. Checked by what it returns: the honest clients' records all acknowledged and received, each
phase's figures, and what the attacker got back — the refusals the fixes give (INVALID_RECORD for a smuggled
second batch, a fresh producer id instead of the one named, 403 for another topic's committed offsets).
"""

from __future__ import annotations

import json

import pytest

import bench.attacks.section as attacks

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]


@pytest.mark.long  # half a minute for a section whose refusals the security tests hold already: `make test-long`
def test_three_attacks_against_kelp(capsys: pytest.CaptureFixture[str]) -> None:
    assert attacks.main(["--no-kafka", "--attacks", "two-batches,init-producer-id,rest-offsets",
                         "--attack-seconds", "1.5", "--attack-gap-seconds", "0.5", "--attack-rate", "200",
                         "--attack-txn-ids", "0", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)["attacks"]
    assert res["kafka"] is False and list(res["brokers"]) == ["kelp"]
    kelp = res["brokers"]["kelp"]
    assert kelp["acked"] == kelp["sent"] > 0 and kelp["lost"] == 0 and kelp["received"] == kelp["acked"]
    phases = {p["attack"]: p for p in kelp["phases"]}
    # the order (the regex last), between the two unattacked phases
    assert list(phases) == ["unattacked", "rest-offsets", "two-batches", "init-producer-id", "unattacked, again"]
    for p in phases.values():
        assert p["produce"]["records"] > 0 and p["end_to_end"]["records"] > 0 and p["lost"] == 0
        assert 0 < p["produce"]["p50_ms"] <= p["produce"]["p99_ms"] and p["produce"]["vs_unattacked"] > 0
        assert "error" not in p
    assert set(phases["two-batches"]["got"]) == {"error 87"}  # INVALID_RECORD, every time
    assert set(phases["init-producer-id"]["got"]) == {"a fresh id"}  # never the id named at the next epoch
    assert set(phases["rest-offsets"]["got"]) == {"HTTP 403"}

    attacks.print_report(res)
    report = capsys.readouterr().out
    assert "Apache Kafka reference skipped" in report
    assert "kelp: goal nothing acknowledged lost: met" in report


def test_an_unknown_attack_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert attacks.main(["--no-kafka", "--attacks", "regex,nope"]) == 2
    assert "unknown attack(s) nope" in capsys.readouterr().err
