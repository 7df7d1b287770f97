"""What a new user meets first: an unreachable broker, global flags before the subcommand, `consume --group`.

- Every command fails within its connect timeout, naming the address, when nothing listens there
  (it used to sit silent for 30 s in `kelp consume`).
- `kelp --http URL topics list` works as `kelp topics list --http URL` does; a flag after the subcommand wins.
- `kelp consume --group G` joins G, starts at its committed offsets and commits what it printed.
"""

from __future__ import annotations

import socket
import time

import pytest

from kelp.cli.main import build_parser


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("argv", [
    ("consume", "t", "--bootstrap", "{addr}"),
    ("produce", "t", "--bootstrap", "{addr}"),
    ("--bootstrap", "{addr}", "consume", "t", "--group", "g"),
    ("topics", "list", "--http", "http://{addr}"),
    ("--http", "{addr}", "groups", "list"),
    ("topics", "describe", "x", "--http", "{addr}"),
])
def test_an_unreachable_broker_fails_fast_naming_the_address(cli, argv) -> None:
    addr = f"127.0.0.1:{_dead_port()}"
    started = time.monotonic()
    r = cli("--connect-timeout", "1", *[a.format(addr=addr) for a in argv], stdin="x\n")
    elapsed = time.monotonic() - started
    assert r.code == 1, r
    assert "cannot reach" in r.err and addr in r.err and r.err.count("\n") == 1, r.err
    needs_bootstrap = argv[0] in ("consume", "produce") or "--bootstrap" in argv
    assert ("--bootstrap" in r.err) if needs_bootstrap else ("--http" in r.err)
    assert elapsed < 8, elapsed  # the 1 s connect timeout, not a client library's 30 s


def test_the_default_connect_timeout_is_a_few_seconds(cli) -> None:
    addr = f"127.0.0.1:{_dead_port()}"
    started = time.monotonic()
    r = cli("consume", "t", "--bootstrap", addr)
    assert r.code == 1 and addr in r.err
    assert 4 <= time.monotonic() - started < 15  # retried for the default 5 s, then gave up


def test_global_flags_go_before_or_after_the_subcommand(cli, kelp) -> None:
    assert cli("topics", "create", "globals").code == 0
    before = cli("--http", kelp.http_url, "--json", "topics", "list")
    after = cli("topics", "list", "--http", kelp.http_url, "--json")
    assert before.code == after.code == 0, (before, after)
    assert '"globals"' in before.out and before.out == after.out
    # after the subcommand wins over before it
    dead = f"http://127.0.0.1:{_dead_port()}"
    assert cli("--http", dead, "topics", "list", "--http", kelp.http_url).code == 0
    r = cli("--http", kelp.http_url, "--connect-timeout", "1", "topics", "list", "--http", dead)
    assert r.code == 1 and dead.removeprefix("http://") in r.err
    args = build_parser().parse_args(["-b", "h:1", "consume", "t"])
    assert args.bootstrap == "h:1" and args.http is None and args.json is False


def test_consume_with_a_group_starts_at_its_committed_offsets_and_commits_what_it_printed(cli, kelp) -> None:
    from kafka import KafkaConsumer, TopicPartition

    assert cli("topics", "create", "grouped", "--partitions", "1").code == 0
    assert cli("produce", "grouped", "-K", ":", stdin="a:1\nb:2\nc:3\n").code == 0
    r = cli("consume", "grouped", "--group", "readers", "--from-beginning", "-n", "2")
    assert r.code == 0, r
    assert r.out.splitlines() == ["Partition:0\tOffset:0\ta\t1", "Partition:0\tOffset:1\tb\t2"]
    consumer = KafkaConsumer(bootstrap_servers=kelp.bootstrap, group_id="readers", enable_auto_commit=False)
    assert consumer.committed(TopicPartition("grouped", 0)) == 2  # exactly the printed records
    consumer.close(autocommit=False)
    r = cli("consume", "grouped", "--group", "readers", "--from-beginning", "-n", "1")
    assert r.out.splitlines() == ["Partition:0\tOffset:2\tc\t3"]  # the group's position, not the beginning
    r = cli("groups", "describe", "readers", "--json")
    assert r.code == 0 and '"committed_offset": 3' in r.out, r.out
    r = cli("consume", "grouped", "--group", "readers", "--partition", "0")
    assert r.code == 1 and "--group" in r.err and "--partition" in r.err
