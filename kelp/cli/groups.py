"""`kelp groups list|describe|reset-offsets|delete` through the admin HTTP API.

Why: kafka-consumer-groups' everyday answers (members, assignment, lag) and
its offset reset — which prints the plan and changes nothing unless
`--execute` is given, and is refused while the group has active members.

It must never compute offsets itself: the broker plans and applies resets.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from .client_config import admin_client
from .common import http_options, json_option
from .errors import CliError
from .http_client import AdminClient, quote
from .output import print_json, print_table

__all__ = ["register", "live_brokers", "coordinator_call"]


def _client(args: argparse.Namespace) -> AdminClient:
    return admin_client(args)


def live_brokers(client: AdminClient) -> dict[int, str]:
    """Broker id -> HTTP URL of every live broker (a lone broker without the cluster API: itself)."""
    try:
        view = client.get("/admin/v1/cluster")
    except CliError:
        return {}
    return {b["id"]: f"{b.get('http_scheme') or client.scheme}://{b['http_host']}:{b['http_port']}"
            for b in view["brokers"]}


def coordinator_call(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    """Call the coordinator of a group (or transactional id): the broker at --http, or the one its 421 answer
    names."""
    client = _client(args)
    try:
        return client.request(method, path, body)
    except CliError as exc:
        found = re.search(r"coordinated by broker (\d+)", str(exc))
        if "HTTP 421" not in str(exc) or found is None:
            raise
        url = live_brokers(client).get(int(found.group(1)))
        if url is None:
            raise
        return client.sibling(url).request(method, path, body)


def _dash(v: Any) -> Any:
    return "-" if v is None else v


def cmd_list(args: argparse.Namespace) -> int:
    client = _client(args)
    urls = list(live_brokers(client).values())
    # Each broker lists the groups it coordinates (as Kafka's ListGroups): ask them all.
    groups = client.get("/admin/v1/groups")["groups"] if not urls else [
        g for url in urls for g in client.sibling(url).get("/admin/v1/groups")["groups"]]
    groups = sorted({g["group_id"]: g for g in groups}.values(), key=lambda g: g["group_id"])
    if args.json:
        print_json(groups)
        return 0
    print_table([[g["group_id"], g.get("group_type", "classic"), g["state"], g["members"], g["protocol_type"] or "-"]
                 for g in groups], ["GROUP", "TYPE", "STATE", "MEMBERS", "PROTOCOL-TYPE"])
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    d = coordinator_call(args, "GET", f"/admin/v1/groups/{quote(args.group)}")
    if args.json:
        print_json(d)
        return 0
    print(f"Group: {d['group_id']}  Type: {d.get('group_type', 'classic')}  State: {d['state']}  "
          f"Generation: {d['generation']}  "
          f"Protocol: {d['protocol'] or '-'}  Members: {len(d['members'])}  Total lag: {d['total_lag']}")
    print()
    owners = {m["member_id"]: m for m in d["members"]}
    print_table(
        [[o["topic"], o["partition"], _dash(o["committed_offset"]), _dash(o["log_end_offset"]), _dash(o["lag"]),
          _dash(o["member_id"]),
          _dash(owners.get(o["member_id"], {}).get("client_host")),
          _dash(owners.get(o["member_id"], {}).get("client_id"))]
         for o in d["offsets"]],
        ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"],
    )
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    chosen = [(k, v) for k, v in (
        ("earliest", args.to_earliest or None), ("latest", args.to_latest or None),
        ("datetime", args.to_datetime), ("offset", args.to_offset), ("shift-by", args.shift_by),
    ) if v is not None]
    if len(chosen) != 1:
        raise CliError("reset-offsets needs exactly one of --to-earliest, --to-latest, --to-datetime, "
                       "--to-offset, --shift-by")
    to, value = chosen[0]
    body: dict[str, Any] = {"topic": args.topic, "to": to, "execute": bool(args.execute)}
    if to in ("datetime", "offset", "shift-by"):
        body["value"] = value
    if args.partitions:
        try:
            body["partitions"] = [int(p) for p in args.partitions.split(",") if p.strip()]
        except ValueError:
            raise CliError(f"--partitions must be comma-separated numbers, got {args.partitions!r}") from None
    result = coordinator_call(args, "POST", f"/admin/v1/groups/{quote(args.group)}/reset-offsets", body)
    if args.json:
        print_json(result)
        return 0
    print_table([[e["topic"], e["partition"], _dash(e["current_offset"]), e["new_offset"]] for e in result["plan"]],
                ["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"])
    if result["executed"]:
        print(f"\noffsets of group {args.group} reset")
    else:
        print("\nplan only: nothing changed (add --execute to apply it)")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    result = coordinator_call(args, "DELETE", f"/admin/v1/groups/{quote(args.group)}")
    if args.json:
        print_json(result)
    else:
        print(f"deleted group {args.group}")
    return 0


def register(subparsers: Any) -> None:
    common = [http_options(), json_option()]
    groups = subparsers.add_parser("groups", help="list, describe, reset offsets of and delete consumer groups")
    sub = groups.add_subparsers(dest="groups_command", metavar="ACTION", required=True)

    p = sub.add_parser("list", parents=common, help="list consumer groups and their states")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("describe", parents=common, help="members, assignment, committed offsets and lag")
    p.add_argument("group")
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("reset-offsets", parents=common,
                       help="plan (and with --execute apply) new committed offsets; the group must have no members")
    p.add_argument("group")
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--partitions", help="comma-separated partitions (default: all)")
    p.add_argument("--to-earliest", action="store_true")
    p.add_argument("--to-latest", action="store_true")
    p.add_argument("--to-datetime", metavar="ISO-8601", help="e.g. 2024-01-31T12:00:00Z")
    p.add_argument("--to-offset", type=int)
    p.add_argument("--shift-by", type=int, metavar="N", help="move by N (negative: back)")
    p.add_argument("--execute", action="store_true", help="apply the plan (default: only print it)")
    p.set_defaults(func=cmd_reset)

    p = sub.add_parser("delete", parents=common, help="delete an Empty group and its committed offsets")
    p.add_argument("group")
    p.set_defaults(func=cmd_delete)
