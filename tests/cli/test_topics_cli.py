"""`kelp topics ...` against a broker: tables for people, --json for scripts, one-line errors."""

from __future__ import annotations

import json

from tests.cli.conftest import run_kelp_process


def test_topics_create_list_describe_alter_delete(cli) -> None:
    r = cli("topics", "create", "events", "--partitions", "3", "--config", "retention.ms=120000")
    assert r.code == 0, r
    assert "created topic events with 3 partition(s)" in r.out

    r = cli("topics", "list")
    assert r.code == 0
    lines = r.out.splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITIONS", "RF", "CONFIGS"]
    row = next(line for line in lines if line.startswith("events "))
    assert row.split() == ["events", "3", "1", "retention.ms=120000"]
    # Columns are aligned: every row's second column starts where the header's does.
    assert row.index("3") == lines[0].index("PARTITIONS")

    listed = json.loads(cli("topics", "list", "--json").out)
    events = [t for t in listed if t["name"] == "events"]
    assert len(events) == 1 and len(events[0].pop("topic_id")) == 32  # the topic's id (KIP-516)
    assert events[0] == {"name": "events", "partitions": 3, "replication_factor": 1, "internal": False,
                         "configs": {"retention.ms": "120000"}}

    r = cli("topics", "describe", "events")
    assert r.code == 0
    assert "Topic: events  Partitions: 3  ReplicationFactor: 1" in r.out
    table = [line.split() for line in r.out.splitlines()]
    assert ["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START", "LOG-END", "HIGH-WATERMARK", "SIZE-BYTES"] in table
    assert ["2", "0", "0", "0", "0", "0", "0", "0"] in table
    assert ["retention.ms", "120000", "topic"] in table
    described = json.loads(cli("topics", "describe", "events", "--json").out)
    assert described["partitions_count"] == 3 and described["configs"]["retention.ms"]["source"] == "topic"

    r = cli("topics", "alter-config", "events", "--set", "segment.bytes=1048576", "--delete", "retention.ms")
    assert r.code == 0, r
    assert "segment.bytes=1048576" in r.out and "retention.ms" not in r.out
    cfg = json.loads(cli("topics", "describe", "events", "--json").out)["configs"]
    assert cfg["segment.bytes"] == {"value": "1048576", "source": "topic"}
    assert cfg["retention.ms"]["source"] == "default"

    r = cli("topics", "add-partitions", "events", "--partitions", "4")
    assert r.code == 0 and "now has 4 partitions" in r.out

    r = cli("topics", "delete", "events", "--json")
    assert r.code == 0 and json.loads(r.out) == {"name": "events", "deleted": True}
    assert "events" not in [t["name"] for t in json.loads(cli("topics", "list", "--json").out)]


def test_errors_are_one_line_and_exit_1(cli) -> None:
    r = cli("topics", "describe", "no-such-topic")
    assert r.code == 1 and r.out == ""
    assert r.err.count("\n") == 1
    assert r.err.startswith("kelp: error: ") and "no-such-topic" in r.err and "does not exist" in r.err

    cli("topics", "create", "twice")
    r = cli("topics", "create", "twice")
    assert r.code == 1 and "already exists" in r.err and r.err.count("\n") == 1

    r = cli("topics", "create", "badcfg", "--config", "retention.ms=later")
    assert r.code == 1 and "retention.ms" in r.err

    r = cli("topics", "create", "badpair", "--config", "novalue")
    assert r.code == 1 and "KEY=VALUE" in r.err

    r = cli("topics", "alter-config", "twice")
    assert r.code == 1 and "--set" in r.err


def test_unreachable_broker_as_a_real_process(kelp) -> None:
    p = run_kelp_process("topics", "list", env={"KELP_HTTP": "http://127.0.0.1:1"})
    assert p.returncode == 1
    assert p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1
    assert "cannot reach the Kelp HTTP API at http://127.0.0.1:1" in p.stderr

    p = run_kelp_process("topics", "list", "--http", kelp.http_url, "--json", env={})
    assert p.returncode == 0 and isinstance(json.loads(p.stdout), list)
