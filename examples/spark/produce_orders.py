"""Produce `orders` events, JSON, keyed by customer, to a Kafka-protocol topic (Kelp or Kafka).

Each event is `{"order_id": "o-000042", "customer": "acme", "amount": 12.5,
"ts": "2026-01-01T12:03:41.250+00:00"}`. Event times are spread evenly over
`--minutes` minutes ending at `--end` (default: now) with a little jitter
and, with `--late`, some events arriving out of order (up to 20 s late).
Amounts are random but seeded, so one seed gives the same orders every run;
the per-customer totals printed at the end are what the pipeline's windows
add up to.

    python examples/spark/produce_orders.py --bootstrap localhost:9092 --count 600

It creates the topic, and the pipeline's results topic `orders-revenue`
(`--create`), when they are missing (`--partitions`, `--replication-factor`).
A secured cluster: `--command-config client.properties` (or env
`KELP_COMMAND_CONFIG`), the Kafka client properties file a Java client uses
(`security.protocol`, `sasl.mechanism`, `sasl.jaas.config`, a PEM
`ssl.truststore.location`, ...), read by Kelp's client core.
Needs only kafka-python and Kelp.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections import defaultdict
from datetime import datetime, timedelta, timezone

CUSTOMERS = ["acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "wonka", "tyrell", "cyberdyne"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", default="localhost:9092", help="bootstrap servers (localhost:9092)")
    p.add_argument("--topic", default="orders", help="topic (orders)")
    p.add_argument("--count", type=int, default=600, help="number of orders (600)")
    p.add_argument("--customers", type=int, default=6, help=f"distinct customers, at most {len(CUSTOMERS)} (6)")
    p.add_argument("--minutes", type=float, default=5.0, help="event-time span in minutes (5)")
    p.add_argument("--end", help="event time of the last order, ISO 8601 (default: now)")
    p.add_argument("--late", type=float, default=0.05, help="share of events up to 20 s late, out of order (0.05)")
    p.add_argument("--seed", type=int, default=7, help="random seed (7)")
    p.add_argument("--create", default="orders-revenue",
                   help="more topics to create when missing, comma-separated (orders-revenue; '' for none)")
    p.add_argument("--partitions", type=int, default=3, help="partitions of the topics created (3)")
    p.add_argument("--replication-factor", type=int, default=-1,
                   help="replication factor when the topic is created (-1: the broker's default)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for every acknowledgement (30)")
    p.add_argument("--command-config", default=os.environ.get("KELP_COMMAND_CONFIG"), metavar="FILE",
                   help="Kafka client properties for a secured cluster (env KELP_COMMAND_CONFIG)")
    args = p.parse_args(argv)
    if not 1 <= args.customers <= len(CUSTOMERS):
        p.error(f"--customers must be between 1 and {len(CUSTOMERS)}")
    return args


def make_orders(args: argparse.Namespace) -> list[dict]:
    rng = random.Random(args.seed)
    end = datetime.fromisoformat(args.end) if args.end else datetime.now(timezone.utc)
    if end.tzinfo is None:
        end = end.replace(tzinfo=timezone.utc)
    span = timedelta(minutes=args.minutes)
    start = end - span
    customers = CUSTOMERS[:args.customers]
    orders = []
    for i in range(args.count):
        ts = start + span * ((i + 1) / args.count) - timedelta(milliseconds=rng.randint(0, 500))
        if rng.random() < args.late:
            ts -= timedelta(seconds=rng.uniform(1, 20))
        orders.append({"order_id": f"o-{i:06d}", "customer": rng.choice(customers),
                       "amount": round(rng.uniform(5, 250), 2), "ts": ts.isoformat(timespec="milliseconds")})
    return orders


def security_options(args: argparse.Namespace) -> dict:
    """kafka-python's security options from the client properties file (nothing without one), once a broker
    accepted them: a wrong CA or password ends the script with the broker's reason, not a bootstrap timeout."""
    if not args.command_config:
        return {}
    from kelp.cli.client_config import check_kafka_security
    from kelp.cli.endpoints import split_address
    from kelp.cli.errors import CliError
    from kelp.kafka_client.security import connection_security, read_client_properties

    try:
        security = connection_security(read_client_properties(args.command_config))
    except ValueError as exc:
        sys.exit(f"--command-config: {exc}")
    addresses = [split_address(a, default_port=9092) for a in args.bootstrap.split(",") if a.strip()]
    try:
        check_kafka_security(addresses, security, timeout_s=args.timeout)
    except CliError as exc:
        sys.exit(f"produce_orders: {exc}")
    return security.kafka_python_options()


def ensure_topics(args: argparse.Namespace, security: dict) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    wanted = [args.topic] + [t.strip() for t in args.create.split(",") if t.strip()]
    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap, request_timeout_ms=int(args.timeout * 1000),
                             **security)
    try:
        existing = set(admin.list_topics())
        for topic in wanted:
            if topic in existing:
                continue
            try:
                admin.create_topics([NewTopic(topic, args.partitions, args.replication_factor)])
                print(f"created topic {topic}: {args.partitions} partition(s)", file=sys.stderr)
            except TopicAlreadyExistsError:
                pass
    finally:
        admin.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from kafka import KafkaProducer

    security = security_options(args)
    ensure_topics(args, security)
    orders = make_orders(args)
    producer = KafkaProducer(bootstrap_servers=args.bootstrap, acks="all", linger_ms=10, **security)
    try:
        futures = [producer.send(args.topic, key=o["customer"].encode(), value=json.dumps(o).encode())
                   for o in orders]
        producer.flush(args.timeout)
        for f in futures:
            f.get(timeout=args.timeout)
    finally:
        producer.close(timeout=args.timeout)

    totals: dict[str, float] = defaultdict(float)
    for o in orders:
        totals[o["customer"]] += o["amount"]
    print(f"produced {len(orders)} orders to {args.topic} ({orders[0]['ts']} .. {orders[-1]['ts']})")
    for customer in sorted(totals):
        print(f"  {customer:<10} {totals[customer]:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
