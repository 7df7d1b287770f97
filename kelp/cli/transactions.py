"""`kelp transactions list|describe|producers` through the admin HTTP API.

Why: kafka-transactions' everyday answers without a JVM — which transactions run and in which state, what
one transaction holds (producer id and epoch, timeout, start, partitions), and which producers of a
partition have a transaction open, the one holding its last stable offset back (a hanging transaction is
an open one whose producer id no coordinator lists). `list` asks every broker (each lists the ids it
coordinates, as Kafka's ListTransactions); `describe` follows the 421 answer to the id's coordinator;
`producers` asks the partition's leader, or the broker `--broker-id` names.

It must never end or change a transaction: aborting a hanging one is `kafka-transactions abort`.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from .client_config import admin_client
from .common import http_options, json_option
from .errors import CliError
from .groups import coordinator_call, live_brokers
from .http_client import quote
from .output import print_json, print_table

__all__ = ["register"]


def _age(start_ms: Any) -> Any:
    return None if start_ms is None else max(int(time.time() * 1000) - int(start_ms), 0)


def cmd_list(args: argparse.Namespace) -> int:
    client = admin_client(args)
    query = "&".join([*(f"state={quote(s)}" for s in args.state or []),
                      *([f"min_duration_ms={args.min_duration_ms}"] if args.min_duration_ms is not None else [])])
    path = "/admin/v1/transactions" + (f"?{query}" if query else "")
    urls = list(live_brokers(client).values())
    answers = [client.get(path)] if not urls else [client.sibling(url).get(path) for url in urls]
    rows = sorted(({**t, "coordinator": a["coordinator"]} for a in answers for t in a["transactions"]),
                  key=lambda t: t["transactional_id"])
    if args.json:
        print_json(rows)
        return 0
    print_table([[t["transactional_id"], t["coordinator"], t["producer_id"], t["producer_epoch"], t["state"],
                  t["partitions"], _age(t["start_ms"])] for t in rows],
                ["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "EPOCH", "STATE", "PARTITIONS", "DURATION-MS"])
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    d = coordinator_call(args, "GET", f"/admin/v1/transactions/{quote(args.transactional_id)}")
    if args.json:
        print_json(d)
        return 0
    print_table([[d["coordinator"], d["transactional_id"], d["producer_id"], d["producer_epoch"], d["state"],
                  d["timeout_ms"], d["start_ms"], _age(d["start_ms"]),
                  [f"{p['topic']}-{p['partition']}" for p in d["partitions"]]]],
                ["COORDINATOR", "TRANSACTIONAL-ID", "PRODUCER-ID", "EPOCH", "STATE", "TIMEOUT-MS", "START-MS",
                 "DURATION-MS", "PARTITIONS"])
    return 0


def cmd_producers(args: argparse.Namespace) -> int:
    client = admin_client(args)
    urls = live_brokers(client)
    target = args.broker_id
    if target is None and urls:
        topic = client.get(f"/admin/v1/topics/{quote(args.topic)}")
        found = [p for p in topic["partitions"] if p["partition"] == args.partition]
        if not found:
            raise CliError(f"topic '{args.topic}' has no partition {args.partition}")
        target = found[0]["leader"]
    if target is not None and target not in urls and urls:
        raise CliError(f"broker {target} is not a live broker (live: {', '.join(map(str, sorted(urls)))})")
    on = client.sibling(urls[target]) if target is not None and urls else client
    d = on.get(f"/admin/v1/topics/{quote(args.topic)}/partitions/{args.partition}/producers")
    if args.json:
        print_json(d)
        return 0
    print(f"Topic: {d['topic']}  Partition: {d['partition']}  Broker: {d['broker']}  "
          f"Last stable offset: {d['last_stable_offset']}  High watermark: {d['high_watermark']}")
    print()
    print_table([[p["producer_id"], p["producer_epoch"], p["coordinator_epoch"], p["last_sequence"],
                  p["last_timestamp"], p["current_txn_start_offset"]] for p in d["producers"]],
                ["PRODUCER-ID", "EPOCH", "COORDINATOR-EPOCH", "LAST-SEQUENCE", "LAST-TIMESTAMP",
                 "TXN-START-OFFSET"])
    return 0


def register(subparsers: Any) -> None:
    common = [http_options(), json_option()]
    txns = subparsers.add_parser("transactions", help="list and describe transactions and partitions' producers")
    sub = txns.add_subparsers(dest="transactions_command", metavar="ACTION", required=True)

    p = sub.add_parser("list", parents=common, help="the transactional ids of every coordinator and their states")
    p.add_argument("--state", action="append", metavar="STATE",
                   help="only these states (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, "
                        "CompleteAbort, PrepareEpochFence); repeatable or comma-separated")
    p.add_argument("--min-duration-ms", type=int, metavar="MS", help="only transactions open longer than MS")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("describe", parents=common,
                       help="state, producer id and epoch, timeout, start and partitions of one transactional id")
    p.add_argument("transactional_id")
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("producers", parents=common,
                       help="a partition's producers and their open transactions (from its leader)")
    p.add_argument("topic")
    p.add_argument("partition", type=int)
    p.add_argument("--broker-id", type=int, help="ask this replica instead of the leader")
    p.set_defaults(func=cmd_producers)
