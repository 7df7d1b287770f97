"""`kelp consume TOPIC`: print records from chosen offsets, without a consumer group.

Why: look at what is in a topic without committing offsets or joining a
group — kafka-python's `KafkaConsumer` with `assign` and `seek`, so it reads
exactly what a real consumer reads. Follows new records until interrupted,
`--max-messages` are printed, or `--idle-timeout` passes without a record.

It must never commit offsets or join a group.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from typing import Any

from .common import bootstrap_options, default_bootstrap, json_option
from .errors import CliError

__all__ = ["register", "format_record"]


def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", "replace")


def format_record(rec: Any, *, as_json: bool, print_key: bool, separator: str, print_headers: bool) -> str:
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
    text = _text(rec.value)
    if print_key:
        text = _text(rec.key) + separator + text
    if print_headers:
        hs = ",".join(f"{k}={_text(v)}" for k, v in (rec.headers or []))
        text = hs + separator + text
    return text


def cmd_consume(args: argparse.Namespace) -> int:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    bootstrap = args.bootstrap or default_bootstrap()
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap.split(","), group_id=None, enable_auto_commit=False,
            client_id="kelp-cli", request_timeout_ms=int(args.timeout * 1000) + 1000,
        )
    except KafkaError as exc:
        raise CliError(f"cannot connect to Kafka at {bootstrap}: {exc}") from None
    printed = 0
    try:
        partitions = consumer.partitions_for_topic(args.topic)
        if not partitions:
            raise CliError(f"topic '{args.topic}' does not exist at {bootstrap}")
        if args.partition is not None:
            if args.partition not in partitions:
                raise CliError(f"partition {args.partition} of topic '{args.topic}' does not exist "
                               f"(it has {len(partitions)})")
            chosen = [args.partition]
        else:
            chosen = sorted(partitions)
        tps = [TopicPartition(args.topic, p) for p in chosen]
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
        last_record = time.monotonic()
        out = sys.stdout
        while args.max_messages is None or printed < args.max_messages:
            batch = consumer.poll(timeout_ms=200)
            if not batch:
                if args.idle_timeout is not None and time.monotonic() - last_record > args.idle_timeout:
                    break
                continue
            last_record = time.monotonic()
            for tp in sorted(batch, key=lambda t: t.partition):
                for rec in batch[tp]:
                    out.write(format_record(rec, as_json=args.json, print_key=args.print_key,
                                            separator=args.key_separator, print_headers=args.print_headers) + "\n")
                    printed += 1
                    if args.max_messages is not None and printed >= args.max_messages:
                        break
                if args.max_messages is not None and printed >= args.max_messages:
                    break
            out.flush()
    except KeyboardInterrupt:
        pass
    except KafkaError as exc:
        raise CliError(f"consuming topic '{args.topic}' at {bootstrap} failed: {exc}") from None
    finally:
        consumer.close()
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "consume", parents=[bootstrap_options(), json_option()],
        help="print records of a topic (no consumer group, nothing committed)",
    )
    p.add_argument("topic")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the log start offset")
    start.add_argument("--offset", "-o", type=int,
                       help="start at this offset (negative: that many records before the end)")
    p.add_argument("--partition", "-p", type=int, help="read only this partition (default: all)")
    p.add_argument("--max-messages", "-n", type=int, help="exit after printing this many records")
    p.add_argument("--idle-timeout", type=float, help="exit after this many seconds without a record")
    p.add_argument("--print-key", action="store_true", help="print key<SEP>value")
    p.add_argument("--print-headers", action="store_true", help="print headers<SEP> before each record")
    p.add_argument("--key-separator", default="\t", metavar="SEP", help="separator for --print-key (tab)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the broker (30)")
    p.set_defaults(func=cmd_consume)
