"""`kelp partitions describe|reassign|cancel|elect-leaders` and `kelp cluster`: replication, seen and steered.

Why: the everyday replication chores of `kafka-reassign-partitions`,
`kafka-leader-election` and `kafka-topics --describe` through the admin HTTP
API: where each partition's replicas are, which are in sync, what is
moving and how far it has come. The controller validates; this module only
shapes requests and prints answers.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kelp.errors import ErrorCode

from .client_config import admin_client
from .common import http_options, json_option
from .errors import CliError
from .http_client import AdminClient, quote
from .output import print_json, print_table

__all__ = ["register"]


def _client(args: argparse.Namespace) -> AdminClient:
    return admin_client(args)


def _ids(text: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CliError(f"--replicas takes comma-separated broker ids such as 0,1,3, got {text!r}") from None
    if not ids:
        raise CliError("--replicas needs at least one broker id")
    return ids


def cmd_describe(args: argparse.Namespace) -> int:
    client = _client(args)
    names = [args.topic] if args.topic else [t["name"] for t in client.get("/admin/v1/topics")["topics"]
                                              if args.internal or not t.get("internal")]
    moving = {(r["topic"], r["partition"]): r
              for r in client.get("/admin/v1/partitions/reassignments")["reassignments"]}
    rows: list[list[Any]] = []
    out = []
    for name in names:
        d = client.get(f"/admin/v1/topics/{quote(name)}")
        for p in d["partitions"]:
            if args.under_replicated and len(p["isr"]) >= len(p["replicas"]) and p["leader"] >= 0:
                continue
            move = moving.get((name, p["partition"]))
            entry = {"topic": name, **p}
            if move is not None:
                entry["reassignment"] = move
            out.append(entry)
            status = "OFFLINE" if p["leader"] < 0 else ("under-replicated" if len(p["isr"]) < len(p["replicas"])
                                                        else "ok")
            progress = "-"
            if move is not None:
                leos = move.get("log_end_offsets", {})
                lead = leos.get(str(move["leader"]))
                progress = "adding " + ",".join(
                    f"{r}@{leos.get(str(r), '?')}/{lead if lead is not None else '?'}" for r in move["adding"])
                if move["removing"]:
                    progress += " removing " + ",".join(str(r) for r in move["removing"])
            rows.append([name, p["partition"], p["leader"], p.get("leader_epoch", "-"),
                         ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])), status, progress])
    if args.json:
        print_json(out)
    else:
        print_table(rows, ["TOPIC", "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "STATUS", "REASSIGNMENT"])
    return 0


def _plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.plan:
        try:
            with open(args.plan) as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            raise CliError(f"cannot read the reassignment plan {args.plan}: {exc}") from None
        items = data.get("partitions") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise CliError(f"{args.plan}: expected {{\"partitions\": [{{\"topic\", \"partition\", \"replicas\"}}]}} "
                           "(the format of kafka-reassign-partitions)")
        return items
    if not (args.topic and args.partition is not None and args.replicas):
        raise CliError("give --topic, --partition and --replicas, or --plan FILE")
    return [{"topic": args.topic, "partition": args.partition, "replicas": _ids(args.replicas)}]


def cmd_reassign(args: argparse.Namespace) -> int:
    result = _client(args).post("/admin/v1/partitions/reassign", {"partitions": _plan(args)})
    if args.json:
        print_json(result)
    else:
        for p in result["partitions"]:
            if p.get("adding") or p.get("removing"):
                print(f"{p['topic']}-{p['partition']}: moving to "
                      f"{','.join(str(r) for r in p['replicas'] if r not in p.get('removing', []))} "
                      f"(adding {p.get('adding', [])}, removing {p.get('removing', [])}); "
                      f"follow it with `kelp partitions describe --topic {p['topic']}`")
            else:
                print(f"{p['topic']}-{p['partition']}: replicas {p['replicas']}, leader {p['leader']} (done)")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    body = {"partitions": [{"topic": args.topic, "partition": args.partition, "replicas": None}]}
    result = _client(args).post("/admin/v1/partitions/reassign", body)
    print_json(result) if args.json else print(f"{args.topic}-{args.partition}: reassignment cancelled")
    return 0


def cmd_elect(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {}
    if args.topic:
        body["topic"] = args.topic
    if args.partition is not None:
        body["partitions"] = [args.partition]
    result = _client(args).post("/admin/v1/partitions/elect-leaders", body)["results"]
    if args.json:
        print_json(result)
        return 0
    names = {ErrorCode.NONE: "elected", ErrorCode.ELECTION_NOT_NEEDED: "already preferred",
             ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "preferred replica not in sync"}
    print_table([[k, names.get(v, f"error {v}")] for k, v in sorted(result.items())], ["PARTITION", "RESULT"])
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    view = _client(args).get("/admin/v1/cluster")
    if args.json:
        print_json(view)
        return 0
    print(f"cluster {view['cluster']}: controller broker {view['controller']} (epoch {view['controller_epoch']})")
    print_table([[b["id"], f"{b['host']}:{b['port']}", f"{b['http_host']}:{b['http_port']}", b.get("rack") or "-",
                  "yes" if b["id"] == view["controller"] else ""] for b in view["brokers"]],
                ["BROKER", "KAFKA", "HTTP", "RACK", "CONTROLLER"])
    return 0


def cmd_shutdown(args: argparse.Namespace) -> int:
    result = _client(args).post("/admin/v1/controlled-shutdown", {})
    left = result.get("remaining_leaderships", [])
    if args.json:
        print_json(result)
    elif left:
        print(f"broker {result['broker_id']} still leads {len(left)} partition(s) with no other in-sync replica")
    else:
        print(f"broker {result['broker_id']} leads nothing now; it can stop")
    return 0


def register(subparsers: Any) -> None:
    common = [http_options(), json_option()]
    parts = subparsers.add_parser("partitions", help="describe, reassign and elect leaders of partitions")
    sub = parts.add_subparsers(dest="partitions_command", metavar="ACTION", required=True)

    p = sub.add_parser("describe", parents=common, help="leader, epoch, replicas, ISR and reassignment progress")
    p.add_argument("--topic", "-t")
    p.add_argument("--internal", action="store_true", help="include internal topics")
    p.add_argument("--under-replicated", action="store_true",
                   help="only partitions with an ISR smaller than the replicas")
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("reassign", parents=common, help="move a partition's replicas (or several, with --plan)")
    p.add_argument("--topic", "-t")
    p.add_argument("--partition", "-p", type=int)
    p.add_argument("--replicas", "-r", metavar="IDS", help="the new replica list, preferred leader first: 0,1,3")
    p.add_argument("--plan", metavar="FILE", help="JSON {\"partitions\": [{\"topic\", \"partition\", \"replicas\"}]}")
    p.set_defaults(func=cmd_reassign)

    p = sub.add_parser("cancel", parents=common, help="cancel a running reassignment")
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--partition", "-p", type=int, required=True)
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("elect-leaders", parents=common, help="move leadership back to preferred replicas")
    p.add_argument("--topic", "-t")
    p.add_argument("--partition", "-p", type=int)
    p.set_defaults(func=cmd_elect)

    p = subparsers.add_parser("cluster", parents=common, help="brokers of the cluster and its controller")
    p.set_defaults(func=cmd_cluster)

    ctl = subparsers.add_parser("broker-ctl", help="operate on one running broker")
    ctl_sub = ctl.add_subparsers(dest="ctl_command", metavar="ACTION", required=True)
    p = ctl_sub.add_parser("controlled-shutdown", parents=common,
                           help="move leadership off the broker at --http (the pod's preStop hook)")
    p.set_defaults(func=cmd_shutdown)
