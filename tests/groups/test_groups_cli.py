"""`kelp groups` and `/admin/v1/groups`: list, describe with lag, reset-offsets (plan, --execute,
refused while the group has members), delete."""

from __future__ import annotations

import json
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer

from kelp.cli.main import main

from .test_clients_share_partitions import create_topic


def produce(bs: str, n: int, start: int = 0) -> None:
    p = KafkaProducer(bootstrap_servers=bs)
    for i in range(start, start + n):
        p.send("cli", f"r{i}".encode(), partition=i % 2)
    p.flush(30)
    p.close()


def kelp(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.timeout(60)
def test_groups_cli_describe_lag_reset_and_delete(group_broker, capsys) -> None:
    bs, url = group_broker.bootstrap, group_broker.http_url
    create_topic(bs, "cli", 2)
    produce(bs, 10)
    c = KafkaConsumer("cli", bootstrap_servers=bs, group_id="cli-group", auto_offset_reset="earliest",
                      enable_auto_commit=False, session_timeout_ms=3000, heartbeat_interval_ms=300)
    got = 0
    deadline = time.monotonic() + 20
    while got < 10 and time.monotonic() < deadline:
        got += sum(len(rs) for rs in c.poll(timeout_ms=200).values())
    assert got == 10
    c.commit()
    produce(bs, 4, start=10)

    code, out, _ = kelp(capsys, "groups", "list", "--http", url, "--json")
    assert code == 0 and {"group_id": "cli-group", "state": "Stable"}.items() <= json.loads(out)[0].items()
    code, out, _ = kelp(capsys, "groups", "describe", "cli-group", "--http", url, "--json")
    d = json.loads(out)
    assert code == 0 and d["total_lag"] == 4 and len(d["members"]) == 1
    assert [(o["partition"], o["committed_offset"], o["log_end_offset"], o["lag"]) for o in d["offsets"]] == [
        (0, 5, 7, 2), (1, 5, 7, 2)]
    assert d["members"][0]["assignment"] == [{"topic": "cli", "partitions": [0, 1]}]
    code, out, _ = kelp(capsys, "groups", "describe", "cli-group", "--http", url)
    assert "Total lag: 4" in out and "CURRENT-OFFSET" in out and "LOG-END-OFFSET" in out

    code, _, err = kelp(capsys, "groups", "reset-offsets", "cli-group", "--http", url, "--topic", "cli",
                        "--to-earliest", "--execute")
    assert code == 1 and "active member" in err, err
    c.close(autocommit=False)

    code, out, _ = kelp(capsys, "groups", "reset-offsets", "cli-group", "--http", url, "--topic", "cli",
                        "--to-earliest")
    assert code == 0 and "plan only" in out
    committed = lambda: {o["partition"]: o["committed_offset"] for o in json.loads(  # noqa: E731
        kelp(capsys, "groups", "describe", "cli-group", "--http", url, "--json")[1])["offsets"]}
    assert committed() == {0: 5, 1: 5}, "without --execute nothing changes"
    assert kelp(capsys, "groups", "reset-offsets", "cli-group", "--http", url, "--topic", "cli",
                "--to-earliest", "--execute")[0] == 0
    assert committed() == {0: 0, 1: 0}
    assert kelp(capsys, "groups", "reset-offsets", "cli-group", "--http", url, "--topic", "cli",
                "--shift-by", "3", "--execute", "--partitions", "1")[0] == 0
    assert committed() == {0: 0, 1: 3}
    assert kelp(capsys, "groups", "reset-offsets", "cli-group", "--http", url, "--topic", "cli",
                "--to-offset", "100", "--execute")[0] == 0
    assert committed() == {0: 7, 1: 7}, "offsets are clamped to the log end, as Kafka does"
    assert kelp(capsys, "groups", "reset-offsets", "cli-group", "--http", url, "--topic", "cli",
                "--to-datetime", "2000-01-01T00:00:00Z", "--execute")[0] == 0
    assert committed() == {0: 0, 1: 0}
    code, _, err = kelp(capsys, "groups", "reset-offsets", "cli-group", "--http", url, "--topic", "cli")
    assert code == 1 and "exactly one of" in err

    # A new consumer resumes from the reset offsets: everything again.
    c2 = KafkaConsumer("cli", bootstrap_servers=bs, group_id="cli-group", enable_auto_commit=False,
                       session_timeout_ms=3000, heartbeat_interval_ms=300)
    again = 0
    deadline = time.monotonic() + 20
    while again < 14 and time.monotonic() < deadline:
        again += sum(len(rs) for rs in c2.poll(timeout_ms=200).values())
    assert again == 14
    c2.close(autocommit=False)

    code, out, _ = kelp(capsys, "groups", "delete", "cli-group", "--http", url)
    assert code == 0 and "deleted group cli-group" in out
    code, _, err = kelp(capsys, "groups", "describe", "cli-group", "--http", url)
    assert code == 1 and "does not exist" in err
