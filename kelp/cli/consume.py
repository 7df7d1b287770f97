"""`kelp consume TOPIC`: print records from chosen offsets, alone or as a member of a consumer group.

Why: look at what is in a topic through the path a real consumer takes —
kafka-python's `KafkaConsumer`. Without `--group` it assigns partitions and
seeks (nothing joined, nothing committed); with `--group G` it joins G, starts
at G's committed offsets (`--from-beginning` only where G has none, as Kafka's
auto.offset.reset) and commits each printed record's offset, like Kafka's
console consumer. Plain output is one line per record,
`Partition:P<SEP>Offset:O<SEP>KEY<SEP>VALUE` (Kafka's console-consumer print
format; `null` for a missing key); `--values-only` prints bare values,
`--json` one object per line for scripts. Follows new records until
interrupted, `--max-messages` are printed, or `--idle-timeout` passes.

It must never commit an offset it has not printed, nor commit without `--group`.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from typing import Any

from .client_config import kafka_client_options
from .common import bootstrap_options, check_bootstrap, json_option
from .errors import CliError

__all__ = ["register", "format_record"]


def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", "replace")


def format_record(rec: Any, *, as_json: bool, print_key: bool, separator: str, print_headers: bool,
                  values_only: bool = False) -> str:
    if as_json:
        def enc(b: bytes | None) -> str | None:
            if b is None:
                return None
            try:
                return b.decode("utf-8")
            except UnicodeDecodeError:
                return "base64:" + base64.b64encode(b).decode()

        return json.dumps({
            "topic": rec.topic, "partition": rec.partition, "offset": rec.offset, "timestamp": rec.timestamp,
            "key": enc(rec.key), "value": enc(rec.value),
            "headers": [[k, enc(v)] for k, v in (rec.headers or [])],
        })
    fields = []
    if not values_only:
        fields += [f"Partition:{rec.partition}", f"Offset:{rec.offset}"]
    if print_headers:
        fields.append(",".join(f"{k}={_text(v)}" for k, v in (rec.headers or [])))
    if not values_only or print_key:
        fields.append("null" if rec.key is None and not values_only else _text(rec.key))
    fields.append(_text(rec.value))
    return separator.join(fields)


def _consumer(args: argparse.Namespace, bootstrap: str) -> Any:
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap.split(","), "client_id": "kelp-cli", "enable_auto_commit": False,
        "request_timeout_ms": int(args.timeout * 1000) + 1000, "group_id": args.group,
        **kafka_client_options(args, bootstrap),
    }
    if args.group:
        options["auto_offset_reset"] = "earliest" if args.from_beginning else "latest"
    try:
        return KafkaConsumer(**options)
    except KafkaError as exc:
        raise CliError(f"cannot connect to Kafka at {bootstrap}: {exc}") from None


def _position(consumer: Any, args: argparse.Namespace, topic: str, partitions: set[int]) -> None:
    """Without a group: assign the chosen partitions and seek where the flags say."""
    from kafka import TopicPartition

    if args.partition is not None:
        if args.partition not in partitions:
            raise CliError(f"partition {args.partition} of topic '{topic}' does not exist (it has {len(partitions)})")
        chosen = [args.partition]
    else:
        chosen = sorted(partitions)
    tps = [TopicPartition(topic, p) for p in chosen]
    consumer.assign(tps)
    if args.offset is not None:
        if args.offset < 0:
            ends = consumer.end_offsets(tps)
            for tp in tps:
                consumer.seek(tp, max(ends[tp] + args.offset, 0))
        else:
            for tp in tps:
                consumer.seek(tp, args.offset)
    elif args.from_beginning:
        consumer.seek_to_beginning(*tps)
    else:
        consumer.seek_to_end(*tps)


def _commit(consumer: Any, offsets: dict[Any, Any]) -> dict[Any, Any]:
    """Commit `offsets`; those a rebalance in progress refused are returned, to commit after the next poll."""
    from kafka.errors import CommitFailedError, RebalanceInProgressError

    try:
        consumer.commit(offsets)
    except (CommitFailedError, RebalanceInProgressError):
        return offsets
    return {}


def _finish_commit(consumer: Any, offsets: dict[Any, Any], *, timeout_s: float) -> None:
    """Let the rebalance complete (polls whose records are not printed, so not committed) and commit, bounded."""
    deadline = time.monotonic() + timeout_s
    while offsets and time.monotonic() < deadline:
        consumer.poll(timeout_ms=100, max_records=1)
        offsets = _commit(consumer, {tp: o for tp, o in offsets.items() if tp in consumer.assignment()})
    if offsets:
        raise CliError(f"the group kept rebalancing: the offsets of the printed records were not committed within "
                       f"{timeout_s:g} s")


def cmd_consume(args: argparse.Namespace) -> int:
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    if args.group and (args.partition is not None or args.offset is not None):
        raise CliError("--group takes the group's committed offsets and assignment: "
                       "it cannot be combined with --partition or --offset")
    bootstrap = check_bootstrap(args)
    consumer = _consumer(args, bootstrap)
    printed = 0
    try:
        partitions = consumer.partitions_for_topic(args.topic)
        if not partitions:
            raise CliError(f"topic '{args.topic}' does not exist at {bootstrap}")
        if args.group:
            consumer.subscribe([args.topic])
        else:
            _position(consumer, args, args.topic, partitions)
        last_record = time.monotonic()
        out = sys.stdout
        pending: dict[Any, OffsetAndMetadata] = {}  # printed, not committed yet (a rebalance refused the commit)
        while args.max_messages is None or printed < args.max_messages:
            batch = consumer.poll(timeout_ms=200)
            if not batch:
                if args.idle_timeout is not None and time.monotonic() - last_record > args.idle_timeout:
                    break
                continue
            last_record = time.monotonic()
            done: dict[Any, OffsetAndMetadata] = {}
            for tp in sorted(batch, key=lambda t: t.partition):
                for rec in batch[tp]:
                    out.write(format_record(rec, as_json=args.json, print_key=args.print_key,
                                            separator=args.key_separator, print_headers=args.print_headers,
                                            values_only=args.values_only) + "\n")
                    printed += 1
                    done[tp] = OffsetAndMetadata(rec.offset + 1, "", -1)
                    if args.max_messages is not None and printed >= args.max_messages:
                        break
                if args.max_messages is not None and printed >= args.max_messages:
                    break
            out.flush()
            if args.group and done:
                # exactly what was printed: a record cut off by -n is read again next time
                pending = _commit(consumer, {**pending, **done})
        if pending:
            _finish_commit(consumer, pending, timeout_s=min(args.timeout, 10.0))
    except KeyboardInterrupt:
        pass
    except KafkaError as exc:
        raise CliError(f"consuming topic '{args.topic}' at {bootstrap} failed: {exc}") from None
    finally:
        consumer.close(autocommit=False)
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "consume", parents=[bootstrap_options(), json_option()],
        help="print records of a topic (alone, or in a consumer group with --group)",
    )
    p.add_argument("topic")
    p.add_argument("--group", "-g", metavar="GROUP",
                   help="join this consumer group: start at its committed offsets, commit what is printed")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the log start offset (with --group: where the group has no offset)")
    start.add_argument("--offset", "-o", type=int,
                       help="start at this offset (negative: that many records before the end)")
    p.add_argument("--partition", "-p", type=int, help="read only this partition (default: all)")
    p.add_argument("--max-messages", "-n", type=int, help="exit after printing this many records")
    p.add_argument("--idle-timeout", type=float, help="exit after this many seconds without a record")
    p.add_argument("--values-only", action="store_true",
                   help="print only each value (no partition, offset or key)")
    p.add_argument("--print-key", action="store_true", help="with --values-only: print key<SEP>value")
    p.add_argument("--print-headers", action="store_true", help="print headers<SEP> before the key")
    p.add_argument("--key-separator", default="\t", metavar="SEP", help="separator between the fields (tab)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a broker's answer (30)")
    p.set_defaults(func=cmd_consume)
