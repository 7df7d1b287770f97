"""`kelp produce TOPIC`: lines from stdin (or `--file`) to a topic over the Kafka protocol.

Why: the quickest way to put test data in a topic, through the same path a
real producer uses (kafka-python's `KafkaProducer`), so partitioning by key,
compression and headers behave exactly as in an application.

It must never bypass the Kafka protocol (no writes through HTTP or to disk).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Iterator, TextIO

from .client_config import kafka_client_options
from .common import bootstrap_options, check_bootstrap, json_option, parse_pairs
from .errors import CliError
from .output import print_json

__all__ = ["register", "split_line"]

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


def split_line(line: str, separator: str | None, *, line_no: int) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line; with a separator every line must carry one."""
    if separator is None:
        return None, line.encode()
    key, sep, value = line.partition(separator)
    if not sep:
        raise CliError(f"line {line_no} has no key separator {separator!r}: {line[:80]!r}")
    return key.encode(), value.encode()


def _lines(stream: TextIO) -> Iterator[str]:
    for line in stream:
        yield line[:-1] if line.endswith("\n") else line


def cmd_produce(args: argparse.Namespace) -> int:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    headers = [(k, v.encode()) for k, v in parse_pairs(args.header, option="--header").items()]
    bootstrap = check_bootstrap(args)
    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap.split(","),
        "acks": "all" if args.acks == "all" else int(args.acks),
        "max_block_ms": int(args.timeout * 1000),
        "request_timeout_ms": int(args.timeout * 1000),
        "linger_ms": 5,
        "client_id": "kelp-cli",
        **kafka_client_options(args, bootstrap),
    }
    if args.compression != "none":
        options["compression_type"] = args.compression
    try:
        producer = KafkaProducer(**options)
    except KafkaError as exc:
        raise CliError(f"cannot connect to Kafka at {bootstrap}: {exc}") from None
    stream: TextIO
    try:
        stream = open(args.file, encoding="utf-8") if args.file else sys.stdin
    except OSError as exc:
        producer.close(0)
        raise CliError(f"cannot read {args.file}: {exc.strerror}") from None
    futures = []
    try:
        for line_no, line in enumerate(_lines(stream), start=1):
            if not line and args.skip_empty:
                continue
            key, value = split_line(line, args.key_separator, line_no=line_no)
            futures.append(
                producer.send(args.topic, value=value, key=key, headers=headers or None, partition=args.partition)
            )
        producer.flush(timeout=args.timeout)
        metas = [f.get(timeout=args.timeout) for f in futures]
    except KafkaError as exc:
        raise CliError(f"producing to topic '{args.topic}' at {bootstrap} failed: {exc}") from None
    finally:
        if stream is not sys.stdin:
            stream.close()
        producer.close(timeout=5)
    if args.json:
        print_json([{"partition": m.partition, "offset": m.offset} for m in metas])
    else:
        parts = sorted({m.partition for m in metas})
        print(f"produced {len(metas)} record(s) to topic {args.topic} (partitions {','.join(map(str, parts)) or '-'})",
              file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "produce", parents=[bootstrap_options(), json_option()],
        help="produce lines from stdin or a file, one record per line",
    )
    p.add_argument("topic")
    p.add_argument("--file", "-f", help="read lines from this file instead of stdin")
    p.add_argument("--key-separator", "-K", metavar="SEP",
                   help="split each line at the first SEP into key and value")
    p.add_argument("--partition", "-p", type=int, help="produce every record to this partition")
    p.add_argument("--header", "-H", action="append", metavar="KEY=VALUE",
                   help="header added to every record, repeatable")
    p.add_argument("--compression", "-z", choices=COMPRESSIONS, default="none", help="batch compression (none)")
    p.add_argument("--acks", choices=("0", "1", "all"), default="all", help="acknowledgements to wait for (all)")
    p.add_argument("--skip-empty", action="store_true", help="ignore empty lines instead of producing empty values")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for metadata and acks (30)")
    p.set_defaults(func=cmd_produce)
