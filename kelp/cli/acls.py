"""`kelp acls list|add|remove` through the admin HTTP API (`/admin/v1/acls`), with kafka-acls' options.

Why: the everyday ACL chores without Kafka's Java tools: grant a principal an operation on topics, groups,
transactional ids or the cluster, list what applies, take it back. The options are kafka-acls' (`--topic`,
`--group`, `--transactional-id`, `--cluster`, `--allow-principal`, `--deny-principal`, `--operation`,
`--allow-host`, `--deny-host`, `--resource-pattern-type`); each repeatable one multiplies, as in kafka-acls
(two principals and two operations on one topic are four ACLs). Operation and type names are Kafka's, in any
of its spellings (`Read`, `READ`, `IdempotentWrite`, `IDEMPOTENT_WRITE`).

It must never decide what an ACL means: the broker checks each binding and answers Kafka's messages.
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from .client_config import admin_client
from .common import http_options, json_option
from .errors import CliError
from .http_client import AdminClient
from .output import print_json, print_table

__all__ = ["register"]

COLUMNS = ["RESOURCE-TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]
CLUSTER = "kafka-cluster"


def _client(args: argparse.Namespace) -> AdminClient:
    return admin_client(args)


def _resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    out = [("TOPIC", t) for t in args.topic or []] + [("GROUP", g) for g in args.group or []]
    out += [("TRANSACTIONAL_ID", t) for t in args.transactional_id or []]
    if args.cluster:
        out.append(("CLUSTER", CLUSTER))
    return out


def _rows(bindings: list[dict[str, Any]]) -> list[list[Any]]:
    return [[b["resourceType"], b["resourceName"], b["patternType"], b["principal"], b["host"], b["operation"],
             b["permission"]] for b in bindings]


def cmd_list(args: argparse.Namespace) -> int:
    query: dict[str, str] = {}
    resources = _resources(args)
    if len(resources) > 1:
        raise CliError("list takes at most one of --topic, --group, --transactional-id, --cluster")
    if resources:
        query["resourceType"], query["resourceName"] = resources[0]
    for key, value in (("patternType", args.resource_pattern_type), ("principal", args.principal),
                       ("host", args.host), ("operation", args.operation), ("permission", args.permission)):
        if value:
            query[key] = value
    from urllib.parse import urlencode

    answer = _client(args).get("/admin/v1/acls" + (f"?{urlencode(query)}" if query else ""))
    bindings = answer["acls"]
    if args.json:
        print_json(bindings)
    else:
        print_table(_rows(bindings), COLUMNS)
    return 0


def _entries(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """(principal, host, permission) of add's --allow-/--deny- options."""
    allow_hosts = args.allow_host or ["*"]
    deny_hosts = args.deny_host or ["*"]
    return ([(p, h, "ALLOW") for p in args.allow_principal or [] for h in allow_hosts]
            + [(p, h, "DENY") for p in args.deny_principal or [] for h in deny_hosts])


def cmd_add(args: argparse.Namespace) -> int:
    resources = _resources(args)
    entries = _entries(args)
    if not resources:
        raise CliError("add needs a resource: --topic, --group, --transactional-id or --cluster")
    if not entries:
        raise CliError("add needs --allow-principal or --deny-principal (e.g. User:alice)")
    if not args.operation:
        raise CliError("add needs --operation (e.g. Read, Write, Describe, All)")
    bindings = [{"resourceType": rt, "resourceName": name, "patternType": args.resource_pattern_type or "LITERAL",
                 "principal": principal, "host": host, "operation": op, "permission": permission}
                for (rt, name), (principal, host, permission), op in itertools.product(resources, entries,
                                                                                        args.operation)]
    answer = _client(args).post("/admin/v1/acls", {"acls": bindings})
    failed = [(b, r["error"]) for b, r in zip(bindings, answer["results"], strict=True) if r["error"]]
    if args.json:
        print_json([{**b, "error": r["error"]} for b, r in zip(bindings, answer["results"], strict=True)])
    else:
        print_table(_rows(bindings), COLUMNS)
        print(f"\n{len(bindings) - len(failed)} ACL(s) in place")
    if failed:
        raise CliError("; ".join(f"{b['resourceType']} '{b['resourceName']}' {b['principal']} {b['operation']}: {e}"
                                 for b, e in failed))
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    resources: list[tuple[str | None, str | None]] = list(_resources(args)) or [(None, None)]
    principals = [(p, "ALLOW") for p in args.allow_principal or []] + [(p, "DENY") for p in args.deny_principal or []]
    entries: list[tuple[str | None, str | None]] = list(principals) or [(None, None)]
    operations: list[str | None] = list(args.operation or []) or [None]
    if resources == [(None, None)] and entries == [(None, None)] and operations == [None]:
        raise CliError("remove needs what to remove: a resource (--topic, --group, --transactional-id, --cluster), "
                       "a principal (--allow-principal, --deny-principal) or --operation")
    filters = []
    for (rt, name), (principal, permission), op in itertools.product(resources, entries, operations):
        f: dict[str, str] = {"patternType": args.resource_pattern_type or ("LITERAL" if rt else "ANY")}
        for key, value in (("resourceType", rt), ("resourceName", name), ("principal", principal),
                           ("permission", permission), ("operation", op)):
            if value is not None:
                f[key] = value
        filters.append(f)
    answer = _client(args).post("/admin/v1/acls/delete", {"filters": filters})
    errors = [r["error"] for r in answer["results"] if r["error"]]
    deleted = {tuple(sorted(b.items())): b for r in answer["results"] for b in r["deleted"]}
    if args.json:
        print_json(list(deleted.values()))
    else:
        print_table(_rows(list(deleted.values())), COLUMNS)
        print(f"\n{len(deleted)} ACL(s) removed")
    if errors:
        raise CliError("; ".join(errors))
    return 0


def _resource_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", action="append", metavar="NAME", help="a topic (repeatable)")
    p.add_argument("--group", action="append", metavar="NAME", help="a consumer group (repeatable)")
    p.add_argument("--transactional-id", action="append", metavar="ID", help="a transactional id (repeatable)")
    p.add_argument("--cluster", action="store_true", help="the cluster (kafka-cluster)")
    p.add_argument("--resource-pattern-type", metavar="TYPE",
                   help="LITERAL (default for add) or PREFIXED; for list and remove also ANY or MATCH")


def register(subparsers: Any) -> None:
    common = [http_options(), json_option()]
    acls = subparsers.add_parser("acls", help="list, add and remove ACLs (kafka-acls' options)")
    sub = acls.add_subparsers(dest="acls_command", metavar="ACTION", required=True)

    p = sub.add_parser("list", parents=common, help="the ACLs matching a filter (all by default)")
    _resource_options(p)
    p.add_argument("--principal", metavar="TYPE:NAME")
    p.add_argument("--host")
    p.add_argument("--operation")
    p.add_argument("--permission", metavar="ALLOW|DENY")
    p.set_defaults(func=cmd_list)

    for action, helptext, func in (("add", "create ACLs (every resource x principal x operation given)", cmd_add),
                                   ("remove", "delete the ACLs matching the options", cmd_remove)):
        p = sub.add_parser(action, parents=common, help=helptext)
        _resource_options(p)
        p.add_argument("--allow-principal", action="append", metavar="TYPE:NAME", help="e.g. User:alice (repeatable)")
        p.add_argument("--deny-principal", action="append", metavar="TYPE:NAME", help="repeatable")
        p.add_argument("--operation", action="append", metavar="OP", help="Read, Write, Describe, All, ...")
        if action == "add":
            p.add_argument("--allow-host", action="append", metavar="IP", help="default *")
            p.add_argument("--deny-host", action="append", metavar="IP", help="default *")
        p.set_defaults(func=func)
