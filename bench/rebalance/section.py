"""Group rebalance (issue 36): time-to-stable of the classic and the KIP-848 consumer protocol, Kelp beside Kafka,
with no partition owned twice and no record lost.

Why: KIP-848 (`group.protocol=consumer`) moves assignment into the broker and makes every rebalance incremental;
a user switching protocols wants to know how long a group takes to settle on Kelp under each, beside Apache
Kafka, and that no rebalance ever hands one partition to two members or drops a record.

One Kelp broker and one Kafka KRaft node (bench/cluster/sides.py, both at their defaults: the same
`group.initial.rebalance.delay.ms` 3000, `group.consumer.heartbeat.interval.ms` 5000, session timeouts) run
together. Each run creates, on each in turn (alternating which goes first), for each protocol of `protocols`
(bench/rebalance/members.py's PROTOCOLS: librdkafka's classic with range — eager — by default, classic with
cooperative-sticky on request, and KIP-848's consumer protocol), a topic of `partitions` (100) partitions holding
`prefill` (100) records in each, and a group of confluent-kafka consumers (threads of this process) that
commit what they processed when a partition is revoked; a producer adds `rate` (1000) records/s round-robin
all along. Four phases, each timed from its first action to a *stable* group:

- join: `members` (10) consumers start together;
- leave: `churn` (3) of them close (revoking, committing, leaving);
- join again: `churn` new consumers start;
- swap: `churn` of the first members close while `churn` new ones start (revocations and assignments at once).

Stable: every partition owned by exactly one live member per the members' own callbacks, no partition owned by
a member that left, and the broker's describe (ConsumerGroupDescribe or DescribeGroups, as the client picks)
answering state Stable with exactly the live members, each assigned what its callbacks say it owns. The
figure is the time of the last ownership change (a callback, which follows the broker's decision) minus the
phase's start. Then the producer stops, the members consume every record acknowledged, and close.

Every run is checked (members.verdict): no two members' ownership intervals of a partition overlap, every
acknowledged record is consumed, none twice, none outside its member's ownership. A broken check is printed
with its samples and makes the section's goal line MISSED.

`python -m bench.rebalance` runs this alone; `make bench` runs it (`--rebalance-members`, 0 skips).

It must never report a time-to-stable the broker's describe did not confirm, nor a figure without Kafka's from
the same run (unless Kafka is skipped, said so).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from .. import clients, section_main
from ..cluster.sides import Side, alternating, load_average, settle, start_sides
from .members import PROTOCOLS, Feeder, Ledger, Member, verdict

__all__ = ["PHASES", "run_case", "run", "print_report", "add_arguments", "run_from_args", "main"]

PHASES = ("join", "leave", "rejoin", "swap")
STABLE_TIMEOUT_S = 180.0  # per phase: Kafka's defaults allow a classic rebalance up to max.poll.interval.ms
DRAIN_TIMEOUT_S = 120.0


def _describe(admin: Any, group: str) -> tuple[str, dict[str, set[int]]] | str:
    """(the group's state, client id -> its assigned partitions) per the broker, or why not known."""
    from confluent_kafka import KafkaException

    try:
        d = admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)
    except KafkaException as exc:
        return f"describe: {exc.args[0]}"
    return (d.state.name, {m.client_id: {tp.partition for tp in (m.assignment.topic_partitions or [])}
                           for m in d.members})


def wait_stable(ledger: Ledger, admin: Any, group: str, live: list[Member], *, partitions: int, since: float,
                timeout_s: float = STABLE_TIMEOUT_S) -> float:
    """Seconds from `since` to the ownership change that made the group stable (module docstring), waited for
    up to `timeout_s` (RuntimeError, with what was seen last)."""
    names = {m.member for m in live}
    deadline = time.monotonic() + timeout_s
    seen: object = "no ownership yet"
    while True:
        version, last, owned = ledger.owned()
        held = [p for m, ps in owned.items() if m in names for p in ps]
        strays = {m: sorted(ps) for m, ps in owned.items() if m not in names and ps}
        if len(held) == partitions and set(held) == set(range(partitions)) and not strays:
            broker = _describe(admin, group)
            want = {m: owned.get(m, set()) for m in names}
            if broker == ("STABLE", want) and ledger.owned()[0] == version:
                return max(0.0, last - since)
            seen = broker
        else:
            seen = {"owned": sum(map(len, owned.values())), "distinct": len(set(held)), "strays": strays}
        if time.monotonic() > deadline:
            raise RuntimeError(f"group {group} not stable {timeout_s:.0f} s after the phase began; last seen: {seen}; "
                               f"client errors: {ledger.errors[-5:]}")
        ledger.wait(0.1)


def _start(ledger: Ledger, side: Side, topic: str, group: str, names: list[str],
           config: dict[str, str]) -> list[Member]:
    members = [Member(ledger, bootstrap=side.bootstrap, topic=topic, group=group, name=n, config=config) for n in names]
    for m in members:
        m.start()
    return members


def _stop(members: list[Member], timeout_s: float = 60.0) -> None:
    for m in members:
        m.stop.set()
    deadline = time.monotonic() + timeout_s
    for m in members:
        m.join(max(0.1, deadline - time.monotonic()))
        if m.is_alive():
            raise RuntimeError(f"consumer {m.member} did not close within {timeout_s:.0f} s")


def run_case(side: Side, protocol: str, *, members: int, churn: int, partitions: int, prefill: int,
             rate: float) -> dict[str, Any]:
    """One protocol on one side: the phases' time-to-stable and the run's verdict."""
    from confluent_kafka.admin import AdminClient

    tag = uuid.uuid4().hex[:6]
    topic, group = f"rebalance-{protocol}-{tag}", f"rebalance-{protocol}-{tag}"
    clients.create_topic(side.bootstrap, topic, partitions=partitions)
    admin = AdminClient({"bootstrap.servers": side.bootstrap})
    ledger = Ledger()
    feeder = Feeder(side.bootstrap, topic, partitions=partitions, rate=rate)
    feeder.fill(prefill * partitions)
    config = PROTOCOLS[protocol]
    everyone: list[Member] = []
    live: list[Member] = []
    times: dict[str, float] = {}
    names = (f"m{i}" for i in itertools.count())

    def phase(name: str, leave: int, join: int) -> None:
        """The first `leave` live members close as `join` new ones start; timed until the group is stable."""
        nonlocal live
        t0 = time.monotonic()
        leaving, live = live[:leave], live[leave:]
        for m in leaving:
            m.stop.set()
        joining = _start(ledger, side, topic, group, [next(names) for _ in range(join)], config)
        everyone.extend(joining)
        live += joining
        times[name] = wait_stable(ledger, admin, group, live, partitions=partitions, since=t0)
        _stop(leaving)

    try:
        feeder.start()
        phase("join", 0, members)
        phase("leave", churn, 0)
        phase("rejoin", 0, churn)
        phase("swap", churn, churn)
        feeder.stop.set()
        feeder.join(90)
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while not feeder.produced <= ledger.consumed() and time.monotonic() < deadline:
            ledger.wait(0.2)
    finally:
        feeder.stop.set()
        _stop(everyone)
    result = verdict(ledger, feeder.produced)
    result["producer_errors"] = feeder.errors[:5]
    clients.delete_topic(side.bootstrap, topic)
    return {"seconds": times, **result}


def broken(cell: dict[str, Any]) -> bool:
    """Whether a run broke an invariant (the counts `verdict` makes, and the producer's errors)."""
    return bool(cell["overlaps"] or cell["consumed_twice"] or cell["lost"] or cell["not_produced"]
                or cell["outside_ownership"] or cell["producer_errors"])


def run(*, protocols: list[str], members: int, churn: int, partitions: int, prefill: int, rate: float, runs: int,
        work: Path, kafka_version: str | None) -> dict[str, Any]:
    """Every protocol on Kelp (and Kafka unless `kafka_version` is None), `runs` times, alternating the order."""
    load0 = load_average()
    result: dict[str, Any] = {"protocols": protocols, "members": members, "churn": churn, "partitions": partitions,
                              "prefill": prefill, "rate": rate, "runs": runs, "cpus": os.cpu_count(),
                              "kafka": kafka_version is not None, "cells": {}}
    samples: dict[str, list[dict[str, Any]]] = {}
    with ExitStack() as stack:
        sides = start_sides(stack, work, brokers=1, kafka_version=kafka_version, label="rebalance")
        for _, order in alternating(sides, runs):
            for side in order:
                for protocol in protocols:
                    settle(sides)
                    samples.setdefault(f"{side.name} {protocol}", []).append(run_case(
                        side, protocol, members=members, churn=churn, partitions=partitions, prefill=prefill,
                        rate=rate))
    for key, cells in samples.items():
        result["cells"][key] = {
            "seconds": {ph: statistics.median(c["seconds"][ph] for c in cells) for ph in PHASES},
            "runs_seconds": {ph: [round(c["seconds"][ph], 3) for c in cells] for ph in PHASES},
            "runs": [{k: v for k, v in c.items() if k != "seconds"} for c in cells],
        }
    result["load_average"] = [load0, load_average()]
    return result


def print_report(res: dict[str, Any]) -> None:
    from kelp.cli.output import print_table

    m, k = res["members"], res["churn"]
    beside = "alternating which broker goes first" if res["kafka"] else "Apache Kafka reference skipped (--no-kafka)"
    print(f"\ngroup rebalance: {m} confluent-kafka consumers over a topic of {res['partitions']} partitions "
          f"({res['prefill']} records each before, {res['rate']:,.0f} records/s produced during); "
          f"{k} leave, then {k} join, then {k} leave as {k} others join; medians of {res['runs']} run(s); {beside}")
    table = []
    for key, cell in res["cells"].items():
        side, protocol = key.split(" ", 1)
        runs = cell["runs"]
        s = cell["seconds"]
        table.append([side, protocol, *(f"{s[ph]:.2f}" for ph in PHASES),
                      f"{sum(r['records_consumed'] for r in runs):,}",
                      *(str(sum(r[c] for r in runs)) for c in ("overlaps", "consumed_twice", "lost",
                                                                "outside_ownership", "client_errors"))])
    print_table(table, ["BROKER", "PROTOCOL", f"JOIN {m} s", f"{k} LEAVE s", f"{k} JOIN s", f"{k} SWAP s", "RECORDS",
                        "OVERLAPS", "TWICE", "LOST", "OUTSIDE", "CLIENT ERRORS"])
    print("time-to-stable: from the phase's first action to the last ownership change (a member's callback) of a "
          "group the broker describes as Stable with exactly the live members, each assigned what it owns; "
          "classic = librdkafka's range (eager), classic-cooperative = cooperative-sticky, consumer = KIP-848 "
          "(the broker's uniform assignor); brokers at their defaults (initial rebalance delay 3000 ms, "
          "KIP-848 heartbeat 5000 ms); OVERLAPS: two members owning a partition at once; TWICE: a record "
          "consumed twice (members commit on revocation); OUTSIDE: a record received while not owning its "
          "partition")
    bad = [(key, r) for key, cell in res["cells"].items() for r in cell["runs"] if broken(r)]
    for key, r in bad:
        print(f"INVARIANT BROKEN ({key}): {r['samples']} producer errors {r['producer_errors']}")
    errs = [(key, r["samples"]["client_errors"]) for key, cell in res["cells"].items() for r in cell["runs"]
            if r["client_errors"]]
    for key, sample in errs:
        print(f"client errors ({key}): {sample}")
    print(f"goal no partition owned twice, no record lost or consumed twice in a rebalance: "
          f"{'MISSED' if bad else 'met'}")
    load = res["load_average"]
    print(f"machine: {res['cpus']} CPUs, load average {load[0]:.1f} at the start, {load[1]:.1f} at the end")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options `python -m bench.rebalance` and `python -m bench` share."""
    p.add_argument("--rebalance-members", type=int, default=10, help="consumers in the group (10; 0 skips)")
    p.add_argument("--rebalance-partitions", type=int, default=100, help="partitions of the topic (100)")
    p.add_argument("--rebalance-churn", type=int, default=3, help="consumers that leave, then join, then swap (3)")
    p.add_argument("--rebalance-prefill", type=int, default=100, help="records per partition before (100)")
    p.add_argument("--rebalance-rate", type=float, default=1000.0, help="records/s produced during the run (1000)")
    p.add_argument("--rebalance-protocols", default="classic,consumer",
                   help=f"client configurations compared, of {', '.join(PROTOCOLS)} (classic,consumer)")


def run_from_args(args: argparse.Namespace, *, work: Path, kafka_version: str | None) -> dict[str, Any] | None:
    if args.rebalance_members <= 0:
        return None
    protocols = [p.strip() for p in args.rebalance_protocols.split(",") if p.strip()]
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown or not protocols:
        raise ValueError(f"--rebalance-protocols: {unknown or 'none'} not among {', '.join(PROTOCOLS)}")
    if not 0 < args.rebalance_churn < args.rebalance_members:
        raise ValueError(f"--rebalance-churn must be between 1 and {args.rebalance_members - 1}")
    if args.rebalance_partitions < args.rebalance_members or args.rebalance_prefill < 0 or args.rebalance_rate <= 0:
        raise ValueError("--rebalance-partitions must be at least the members, the prefill at least 0 and the "
                         "rate above 0")
    return run(protocols=protocols, members=args.rebalance_members, churn=args.rebalance_churn,
               partitions=args.rebalance_partitions, prefill=args.rebalance_prefill, rate=args.rebalance_rate,
               runs=max(1, args.runs), work=work, kafka_version=kafka_version)


def main(argv: list[str] | None = None) -> int:
    return section_main("rebalance", __doc__ or "", argv, add_arguments=add_arguments, run_from_args=run_from_args,
                        report=print_report)


if __name__ == "__main__":
    sys.exit(main())
