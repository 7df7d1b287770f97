"""`kelp topics create|list|describe|delete|alter-config|delete-records` through the admin HTTP API.

Why: the everyday topic chores without a Kafka admin client; the broker
validates, so this module only shapes requests and prints answers.

It must never validate topic rules itself: the broker is the authority.
"""

from __future__ import annotations

import argparse
from typing import Any

from .client_config import admin_client
from .common import http_options, json_option, parse_pairs
from .http_client import AdminClient, quote
from .output import print_json, print_table

__all__ = ["register"]


def _client(args: argparse.Namespace) -> AdminClient:
    return admin_client(args)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def cmd_create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"name": args.name, "configs": parse_pairs(args.config, option="--config")}
    if args.partitions is not None:
        body["partitions"] = args.partitions
    if args.replication_factor is not None:
        body["replication_factor"] = args.replication_factor
    result = _client(args).post("/admin/v1/topics", body)
    if args.json:
        print_json(result)
    else:
        print(f"created topic {result['name']} with {result['partitions_count']} partition(s), "
              f"replication factor {result['replication_factor']}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    topics = _client(args).get("/admin/v1/topics")["topics"]
    if not args.internal:
        topics = [t for t in topics if not t.get("internal")]
    if args.json:
        print_json(topics)
        return 0
    rows = [
        [t["name"], t["partitions"], t["replication_factor"],
         " ".join(f"{k}={v}" for k, v in sorted(t.get("configs", {}).items())) or "-"]
        for t in topics
    ]
    print_table(rows, ["TOPIC", "PARTITIONS", "RF", "CONFIGS"])
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    d = _client(args).get(f"/admin/v1/topics/{quote(args.name)}")
    if args.json:
        print_json(d)
        return 0
    print(f"Topic: {d['name']}  Partitions: {d['partitions_count']}  "
          f"ReplicationFactor: {d['replication_factor']}  Id: {d['topic_id']}")
    print()
    print_table(
        [[p["partition"], p["leader"], p["replicas"], p["isr"], p["log_start_offset"],
          p["log_end_offset"], p["high_watermark"], p["size_bytes"]] for p in d["partitions"]],
        ["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START", "LOG-END", "HIGH-WATERMARK", "SIZE-BYTES"],
    )
    print()
    configs = d["configs"]
    shown = {k: v for k, v in configs.items() if args.all_configs or v["source"] != "default"}
    if shown:
        print_table([[k, v["value"], v["source"]] for k, v in shown.items()], ["CONFIG", "VALUE", "SOURCE"])
    else:
        print("Configs: all defaults (use --all-configs to list them)")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    result = _client(args).delete(f"/admin/v1/topics/{quote(args.name)}")
    if args.json:
        print_json(result)
    else:
        print(f"deleted topic {args.name}")
    return 0


def cmd_alter_config(args: argparse.Namespace) -> int:
    sets = parse_pairs(args.set, option="--set")
    client = _client(args)
    path = f"/admin/v1/topics/{quote(args.name)}/configs"
    if args.replace:
        result = client.put(path, {"configs": sets})
    else:
        if not sets and not args.delete:
            from .errors import CliError

            raise CliError("alter-config needs at least one --set KEY=VALUE or --delete KEY (or --replace)")
        result = client.patch(path, {"configs": sets, "delete": list(args.delete or [])})
    if args.json:
        print_json(result)
        return 0
    overrides = {k: v["value"] for k, v in result["configs"].items() if v["source"] == "topic"}
    print(f"configs of topic {args.name} now override: "
          + (", ".join(f"{k}={v}" for k, v in sorted(overrides.items())) or "nothing (all defaults)"))
    return 0


def _delete_records_body(args: argparse.Namespace, client: AdminClient) -> list[dict[str, int]]:
    """The partitions and offsets: one `--partition`, `--all-partitions`, or Kafka's offset JSON file."""
    from .errors import CliError

    chosen = [args.partition is not None, args.all_partitions, args.offset_json_file is not None]
    if sum(chosen) != 1:
        raise CliError("delete-records needs exactly one of --partition P, --all-partitions or --offset-json-file FILE")
    if args.offset_json_file is not None:
        import json

        try:
            with open(args.offset_json_file, encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as exc:
            raise CliError(f"cannot read the offset JSON file {args.offset_json_file}: {exc}") from None
        entries = doc.get("partitions") if isinstance(doc, dict) else None
        if not isinstance(entries, list) or not entries:
            raise CliError(f'{args.offset_json_file}: expected {{"partitions": [{{"topic": "{args.name}", '
                           '"partition": 0, "offset": 42}], "version": 1}')
        out = []
        for e in entries:
            if (not isinstance(e, dict) or not isinstance(e.get("partition"), int)
                    or not isinstance(e.get("offset"), int)):
                raise CliError(f"{args.offset_json_file}: each entry needs integer 'partition' and 'offset', got {e!r}")
            if e.get("topic", args.name) != args.name:
                raise CliError(f"{args.offset_json_file}: entry for topic {e.get('topic')!r}, but the topic "
                               f"is {args.name!r}")
            out.append({"partition": e["partition"], "offset": e["offset"]})
        return out
    if args.before_offset is None:
        raise CliError("--before-offset N is required with --partition or --all-partitions (-1: the high watermark)")
    if args.all_partitions:
        count = client.get(f"/admin/v1/topics/{quote(args.name)}")["partitions_count"]
        return [{"partition": p, "offset": args.before_offset} for p in range(count)]
    return [{"partition": args.partition, "offset": args.before_offset}]


def cmd_delete_records(args: argparse.Namespace) -> int:
    client = _client(args)
    body = {"partitions": _delete_records_body(args, client)}
    result = client.post(f"/admin/v1/topics/{quote(args.name)}/delete-records", body)
    if args.json:
        print_json(result)
        return 0
    print_table([[args.name, p["partition"], p["low_watermark"]] for p in result["partitions"]],
                ["TOPIC", "PARTITION", "LOW-WATERMARK"])
    return 0


def cmd_grow(args: argparse.Namespace) -> int:
    result = _client(args).post(f"/admin/v1/topics/{quote(args.name)}/partitions", {"partitions": args.partitions})
    if args.json:
        print_json(result)
    else:
        print(f"topic {args.name} now has {result['partitions_count']} partitions")
    return 0


def register(subparsers: Any) -> None:
    common = [http_options(), json_option()]
    topics = subparsers.add_parser("topics", help="create, list, describe, delete topics and alter their configs")
    sub = topics.add_subparsers(dest="topics_command", metavar="ACTION", required=True)

    p = sub.add_parser("create", parents=common, help="create a topic")
    p.add_argument("name")
    p.add_argument("--partitions", "-p", type=int, help="partition count (broker default: num.partitions)")
    p.add_argument("--replication-factor", "-r", type=int, help="replication factor (broker default)")
    p.add_argument("--config", "-c", action="append", metavar="KEY=VALUE", help="topic config, repeatable")
    p.set_defaults(func=cmd_create)

    p = sub.add_parser("list", parents=common, help="list topics")
    p.add_argument("--internal", action="store_true", help="include internal topics (__consumer_offsets)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("describe", parents=common, help="partitions, offsets, sizes and configs of a topic")
    p.add_argument("name")
    p.add_argument("--all-configs", action="store_true", help="also list configs left at their defaults")
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("delete", parents=common, help="delete a topic and its data")
    p.add_argument("name")
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("alter-config", parents=common, help="set or remove topic config overrides")
    p.add_argument("name")
    p.add_argument("--set", "-s", action="append", metavar="KEY=VALUE", help="set a config, repeatable")
    p.add_argument("--delete", "-d", action="append", metavar="KEY", help="return a config to its default, repeatable")
    p.add_argument("--replace", action="store_true", help="replace all overrides with exactly the --set ones")
    p.set_defaults(func=cmd_alter_config)

    p = sub.add_parser("delete-records", parents=common,
                       help="delete the records before an offset (the log start moves up), like kafka-delete-records")
    p.add_argument("name")
    p.add_argument("--partition", "-p", type=int, help="the partition")
    p.add_argument("--all-partitions", action="store_true", help="every partition of the topic")
    p.add_argument("--before-offset", "-o", type=int, metavar="N",
                   help="delete records below offset N (-1: everything below the high watermark)")
    p.add_argument("--offset-json-file", metavar="FILE",
                   help='Kafka\'s offset JSON: '
                        '{"partitions": [{"topic": T, "partition": P, "offset": N}], "version": 1}')
    p.set_defaults(func=cmd_delete_records)

    p = sub.add_parser("add-partitions", parents=common, help="grow a topic to a new total partition count")
    p.add_argument("name")
    p.add_argument("--partitions", "-p", type=int, required=True, help="the new total partition count")
    p.set_defaults(func=cmd_grow)
