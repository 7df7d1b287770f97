"""Transactions (issue 21): transactional produce, read_committed consume and commit latency, Kelp beside Kafka.

Why: exactly-once pipelines pay for transactions — a round trip to the transaction coordinator per
transaction, markers written on every partition, consumers held back to the last stable offset. A user
choosing Kelp for them wants those costs beside Apache Kafka's, same machine, same client, same run.

Three Kelp brokers and three Kafka KRaft nodes (bench/cluster/sides.py) run together; each run creates on both a
topic of `partitions` partitions (3), replication factor 3, min.insync.replicas=2, and measures, Kelp and
Kafka alternating which goes first, `runs` times (medians printed):

- transactional produce with confluent-kafka (a `transactional.id`, so idempotent with acks=all) of
  `records` records of `size` bytes (1 KiB) in transactions of 100 and of 1,000 records each — begin,
  `produce_batch` of the transaction's records round-robin over the partitions, `commit_transaction()`
  (which flushes: it returns once every record is acknowledged and the commit is complete) — beside the
  same records from an idempotent acks=all producer without transactions (what the transactions cost);
- read_committed consume (assign every partition at offset 0, `isolation.level=read_committed`) of each
  transactional topic: the records counted must be exactly the records committed;
- the end-to-end latency of a committed record: a producer process runs `latency_txn_s` transactions per
  second (20) of `latency_txn_records` records (50), each record's value starting with CLOCK_MONOTONIC in
  ns taken when it is handed to the client; a read_committed consumer in this process, assigned every
  partition of the new, empty topic at offset 0 before the producer starts, takes the clock when it
  receives the record. Latency is produce-to-visible: the rest of the transaction, the commit, the
  markers, the last stable offset advancing and the fetch. The first 2 s are dropped; librdkafka's default
  fetch.wait.max.ms (500) is kept.

- rebalancing (issue 34): consume-transform-produce with Kafka's Java client 4.3.1 (transactions v2,
  `bench/transactions/GroupTransact.java` through `bench.transactions.group_transact`): `rebalance_members` (10)
  consumer-group members,
  each with its own transactional producer, copy a 12-partition input fed at `rebalance_rate` records/s
  (200) to a 4-partition output, committing their consumed offsets in each transaction; every 2 s a member
  leaves (every other time as a crash, its transaction left open for its successor to fence) and comes back
  a second later. Reported: the transactions committed and aborted per second, the rebalances, the errors
  the clients saw by class, the produce answers of CONCURRENT_TRANSACTIONS they retried, how long after the
  last input record the group had committed everything (drain), and the brokers' CPU. A fatal client error,
  an INVALID_TXN_STATE, or output that is not every input exactly once (read_committed) fails the case.
  With `--txn-rebalance-kills N` a broker is also SIGKILLed every `--txn-rebalance-kill-every` s (60), in turn,
  and started again on its storage and ports once its partitions have new leaders; the next kill waits for the
  topics to be fully replicated again (the brokers' CPU is then not reported: a killed process takes its own
  with it). The 10-minute form of issue 34's acceptance, Kelp alone:
  `python -m bench.transactions --no-kafka --runs 1 --txn-records 0 --txn-latency-seconds 0
  --txn-rebalance-records 60000 --txn-rebalance-rate 100 --txn-rebalance-kills 8`.

Broker CPU is utime+stime of the three brokers' processes per GB of values produced.

`python -m bench.transactions` runs this alone; `make bench` runs it (`--txn-records`, 0 skips;
`--txn-latency-seconds`, 0 skips the latency; `--txn-rebalance-records`, 0 skips the rebalancing case, as
does a machine without java).

It must never count a record before the broker acknowledged it, nor a transaction before its commit
returned, nor report a figure without Kafka's from the same run (unless Kafka is skipped, said so).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import struct
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from .. import clients, section_main
from ..cluster.sides import Side, alternating, kill_and_restart, load_average, settle, start_sides

__all__ = ["TXN_SIZES", "transactional_produce", "consume_all", "run", "print_report", "main"]

TXN_SIZES = (100, 1000)
WARMUP_RECORDS = 5_000
_STAMP = struct.Struct(">q")


def _create(bootstrap: str, topic: str, *, partitions: int, replication_factor: int) -> None:
    configs = {"min.insync.replicas": "2"} if replication_factor >= 3 else {}
    clients.create_topic(bootstrap, topic, partitions=partitions, replication_factor=replication_factor,
                         configs=configs)


def _producer(bootstrap: str, tid: str | None, *, count: int) -> Any:
    from confluent_kafka import Producer

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                              "linger.ms": 5, "batch.size": 1_000_000, "batch.num.messages": 100_000,
                              "queue.buffering.max.messages": max(100_000, count),
                              "queue.buffering.max.kbytes": 2_097_151, "compression.type": "none"}
    if tid is not None:
        config.update({"transactional.id": tid, "transaction.timeout.ms": 60_000})
    return Producer(config)


def _queue(producer: Any, topic: str, messages: list[dict[str, object]]) -> None:
    """Hand every message to the client (retrying the ones a full queue refused)."""
    batch = messages
    while batch:
        queued = producer.produce_batch(topic, batch)
        if queued == len(batch):
            return
        batch = [m for m in batch if m.pop("_error", None) is not None]
        producer.poll(0.005)


def transactional_produce(bootstrap: str, topic: str, *, records: int, per_txn: int, size: int,
                          partitions: int) -> dict[str, Any]:
    """`records` records in transactions of `per_txn` (the last may be smaller); seconds and commit times."""
    producer = _producer(bootstrap, f"kelp-bench-txn-{uuid.uuid4().hex[:8]}", count=per_txn)
    producer.init_transactions(60)
    payload = os.urandom(size)
    commits: list[float] = []
    start = time.perf_counter()
    done = 0
    while done < records:
        n = min(per_txn, records - done)
        producer.begin_transaction()
        _queue(producer, topic, [{"value": payload, "partition": (done + i) % partitions} for i in range(n)])
        c0 = time.perf_counter()
        producer.commit_transaction(60)  # flushes first: every record acknowledged, then EndTxn
        commits.append(time.perf_counter() - c0)
        done += n
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "transactions": len(commits),
            "commit_p50_ms": statistics.median(commits) * 1e3,
            "commit_max_ms": max(commits) * 1e3}


def idempotent_produce(bootstrap: str, topic: str, *, records: int, size: int, partitions: int) -> dict[str, Any]:
    """The same records from an idempotent acks=all producer without transactions (flush = all acknowledged)."""
    producer = _producer(bootstrap, None, count=records)
    payload = os.urandom(size)
    start = time.perf_counter()
    for at in range(0, records, 10_000):
        _queue(producer, topic, [{"value": payload, "partition": i % partitions}
                                 for i in range(at, min(records, at + 10_000))])
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"{topic}: {left} records not acknowledged 120 s after the last was queued")
    return {"seconds": time.perf_counter() - start}


def consume_all(bootstrap: str, topic: str, *, partitions: int, count: int,
                isolation: str = "read_committed", timeout_s: float = 300.0) -> float:
    """Seconds from assigning every partition at offset 0 to `count` records received (RuntimeError after
    `timeout_s`, or when more than `count` arrive: the bench's topics hold exactly what it committed)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "kelp-bench-txn", "enable.auto.commit": False,
        "isolation.level": isolation, "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
        "fetch.wait.max.ms": 100, "queued.max.messages.kbytes": 2_097_151, "queued.min.messages": 10_000_000,
        "fetch.queue.backoff.ms": 0, "fetch.error.backoff.ms": 0,
    })
    try:
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = 0
        while got < count:
            msgs = consumer.consume(num_messages=1_000, timeout=1.0)
            for m in msgs:
                if m.error() is not None:
                    raise RuntimeError(f"{topic}: consume error {m.error()}")
            got += len(msgs)
            if time.perf_counter() - start > timeout_s:
                raise RuntimeError(f"{topic}: {isolation} consumer got {got} of {count} records in {timeout_s:.0f} s")
        seconds = time.perf_counter() - start
        extra = consumer.consume(num_messages=1, timeout=0.2)
        if got > count or extra:
            raise RuntimeError(f"{topic}: {isolation} consumer got more than the {count} records committed")
        return seconds
    finally:
        consumer.close()


# -- latency of a committed record ---------------------------------------------------------------------------------


def _offer_transactions(bootstrap: str, topic: str, partitions: int, txn_s: float, per_txn: int, size: int,
                        seconds: float, started: Any, out: Any) -> None:
    """`txn_s` transactions per second of `per_txn` stamped records for `seconds` (a process of its own)."""
    producer = _producer(bootstrap, f"kelp-bench-txn-latency-{uuid.uuid4().hex[:8]}", count=per_txn)
    producer.init_transactions(60)
    pad = os.urandom(size - _STAMP.size)
    started.value = time.monotonic_ns()
    start = time.monotonic()
    sent = txns = 0
    commits: list[float] = []
    while True:
        now = time.monotonic()
        if now - start >= seconds:
            break
        due = start + txns / txn_s
        if due > now:
            time.sleep(due - now)
        producer.begin_transaction()
        for i in range(per_txn):
            producer.produce(topic, _STAMP.pack(time.monotonic_ns()) + pad, partition=(sent + i) % partitions)
        c0 = time.monotonic()
        producer.commit_transaction(60)
        commits.append(time.monotonic() - c0)
        sent += per_txn
        txns += 1
    out.put({"sent": sent, "transactions": txns, "seconds": time.monotonic() - start,
             "commit_p50_ms": statistics.median(commits) * 1e3 if commits else float("nan")})


def latency(bootstrap: str, topic: str, *, partitions: int, txn_s: float, per_txn: int, size: int,
            seconds: float, warmup_s: float = 2.0, who: str = "") -> dict[str, Any]:
    """Produce-to-visible latency (ms) of committed records, read_committed, on `topic` (new and empty: read
    from offset 0, so no record can land before the consumer's position is fixed)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kelp-bench-txn-latency",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    started = ctx.Value("q", 0)
    latencies: list[int] = []
    received = 0
    info: dict[str, Any] = {}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        consumer.consume(num_messages=1, timeout=0.5)  # connected and fetching before the first record
        producer = ctx.Process(target=_offer_transactions,
                               args=(bootstrap, topic, partitions, txn_s, per_txn, size, seconds + warmup_s, started,
                                     out))
        producer.start()
        deadline = time.monotonic() + seconds + warmup_s + 90
        while time.monotonic() < deadline:
            first = consumer.poll(0.1)
            now = time.monotonic_ns()
            msgs = [] if first is None else [first, *consumer.consume(num_messages=10_000, timeout=0)]
            measure_from = started.value + int(warmup_s * 1e9)  # set before the first record is stamped
            for m in msgs:
                if m.error() is not None:
                    raise RuntimeError(f"transaction latency consumer: {m.error()}")
                stamp = _STAMP.unpack_from(m.value() or b"\0" * 8)[0]
                if stamp >= measure_from:
                    latencies.append(now - stamp)
            received += len(msgs)
            if not info and not out.empty():
                info = out.get()
            if info and received >= info["sent"]:
                break
        producer.join(30)
        if producer.exitcode != 0:
            raise RuntimeError(f"transaction latency producer exited with {producer.exitcode}")
        if not info:
            info = out.get(timeout=5)
    finally:
        consumer.close()
    if received != info["sent"]:
        raise RuntimeError(f"{who} transaction latency: {received} of {info['sent']} committed records seen "
                           f"read_committed on {topic} within 90 s of the last commit")
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] / 1e6 if latencies else float("nan")

    return {"txn_per_s": txn_s, "records_per_txn": per_txn, "seconds": seconds, "warmup_s": warmup_s,
            "achieved_txn_per_s": info["transactions"] / info["seconds"], "records": info["sent"],
            "measured_records": len(latencies), "commit_p50_ms": info["commit_p50_ms"],
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": latencies[-1] / 1e6 if latencies else float("nan")}


# -- consume-transform-produce across rebalances ------------------------------------------------------------------

REBALANCE_INPUT_PARTITIONS, REBALANCE_OUTPUT_PARTITIONS, REBALANCE_CHURN_MS = 12, 4, 2000


def _behind(bootstrap: str, group: str, source: str) -> str:
    """'' once the group's stable committed offsets of `source` are its end offsets; else how they differ, or
    why they could not be read (an offset fetch that timed out is asked again: the group's transactions keep
    pending offsets unstable, and a broker may just have been killed)."""
    from confluent_kafka import KafkaException

    from .group_transact import committed_offsets, end_offsets

    try:
        ends = end_offsets(bootstrap, source, REBALANCE_INPUT_PARTITIONS)
        committed = committed_offsets(bootstrap, group, source, REBALANCE_INPUT_PARTITIONS)
    except KafkaException as exc:
        return f"not read: {exc.args[0]}"
    gaps = {p: (committed.get(p), end) for p, end in ends.items() if committed.get(p) != end}
    return f"partitions (committed, end) behind: {gaps}" if gaps else ""


def rebalancing(side: Side, *, records: int, rate: int, members: int, work: Path, kills: int = 0,
                kill_every_s: float = 60.0) -> dict[str, Any]:
    """`members` Java group transact sessions copying `records` fed at `rate`/s while members leave and join,
    and `kills` times (one every `kill_every_s`) a broker is SIGKILLed and started again (see the module
    docstring); RuntimeError on a fatal client error or output that is not exactly once."""
    from .group_transact import Feeder, JavaRun, committed_values, exactly_once

    tag = uuid.uuid4().hex[:6]
    source, sink, group = f"rebalance-in-{tag}", f"rebalance-out-{tag}", f"rebalance-{tag}"
    work.mkdir(parents=True, exist_ok=True)  # the JVM's log goes there
    _create(side.bootstrap, source, partitions=REBALANCE_INPUT_PARTITIONS, replication_factor=3)
    _create(side.bootstrap, sink, partitions=REBALANCE_OUTPUT_PARTITIONS, replication_factor=3)
    cpu0 = side.cpu_seconds()
    start = time.monotonic()
    feeder = Feeder(side.bootstrap, source, REBALANCE_INPUT_PARTITIONS, records=records, rate=rate)
    run = JavaRun(side.bootstrap, input_topic=source, output_topic=sink, group=group, members=members,
                  churn_ms=REBALANCE_CHURN_MS, assignor="cooperative-sticky", static=False, prefix=group,
                  log_dir=work)
    killed, next_kill = 0, start + kill_every_s
    behind = "not asked yet"  # what the last look at the group's committed offsets saw
    next_note = start + 60
    try:
        deadline = start + records / rate + 300 + 180 * kills
        while True:
            status = run.status()
            if status.broken or run.exited():
                raise RuntimeError(f"{side.name} rebalancing: a client failed: {run.describe()}")
            if killed < kills and time.monotonic() >= next_kill:
                kill_and_restart(side, killed, (source, sink, "__transaction_state", "__consumer_offsets"))
                killed += 1
                next_kill = time.monotonic() + kill_every_s
            if feeder.done() and feeder.finished_at is not None:
                behind = _behind(side.bootstrap, group, source)
                if not behind:
                    break
            if time.monotonic() >= next_note:  # a long run says how it goes (stderr: --json keeps stdout)
                print(f"{side.name} rebalancing {time.monotonic() - start:.0f} s: fed {feeder.sent:,}, committed "
                      f"{status.committed_records:,} records in {status.commits:,} transactions, {killed} broker "
                      f"kills, errors {status.errors}; offsets: {behind}", file=sys.stderr, flush=True)
                next_note += 60
            if time.monotonic() > deadline:
                raise RuntimeError(f"{side.name} rebalancing: input not all committed in time ({behind}): "
                                   f"{run.describe()}")
            time.sleep(0.5)
        drained = time.monotonic()
        finished = feeder.finished_at
        status = run.stop()
        retried = run.retried("CONCURRENT_TRANSACTIONS")
    finally:
        run.kill()
        feeder.stop()
    cpu = side.cpu_seconds() - cpu0 if killed == 0 else float("nan")  # a killed broker's CPU went with it
    if feeder.errors:
        raise RuntimeError(f"{side.name} rebalancing: feeding the input failed: {feeder.errors[:3]}")
    if status.broken:
        raise RuntimeError(f"{side.name} rebalancing: a client failed: {status.errors} {status.samples}")
    problems = exactly_once(committed_values(side.bootstrap, sink, REBALANCE_OUTPUT_PARTITIONS, expect=records),
                            records)
    if problems:
        raise RuntimeError(f"{side.name} rebalancing: the output is not exactly once: {problems}")
    clients.delete_topic(side.bootstrap, source)
    clients.delete_topic(side.bootstrap, sink)
    seconds = drained - start
    return {"seconds": seconds, "drain_s": drained - finished, "records": records, "rate": rate,
            "members": members, "commits": status.commits, "aborts": status.aborts,
            "commits_s": status.commits / seconds, "aborts_s": status.aborts / seconds,
            "rebalances": status.rebalances, "leaves": status.leaves, "crashes": status.crashes,
            "errors": status.errors, "concurrent_transactions_retried": retried, "broker_cpu_s": cpu,
            "broker_kills": killed, "kill_every_s": kill_every_s}


# -- the section ---------------------------------------------------------------------------------------------------


def _case_names() -> list[str]:
    return [*(f"txn of {n:,}" for n in TXN_SIZES), "idempotent, no txn",
            *(f"consume read_committed (txn of {n:,})" for n in TXN_SIZES)]


def _warm_up(side: Side, *, records: int, partitions: int, size: int) -> None:
    """The transaction coordinator's topic created and loaded, JIT and connections: out of the timed runs."""
    topic = f"txn-warm-{uuid.uuid4().hex[:6]}"
    _create(side.bootstrap, topic, partitions=partitions, replication_factor=3)
    transactional_produce(side.bootstrap, topic, records=records, per_txn=100, size=size, partitions=partitions)
    consume_all(side.bootstrap, topic, partitions=partitions, count=records)


def measure(sides: list[Side], *, records: int, size: int, partitions: int, runs: int) -> dict[str, Any]:
    samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for side in sides:
        _warm_up(side, records=min(records, WARMUP_RECORDS), partitions=partitions, size=size)
    for run, order in alternating(sides, runs):
        for side in order:
            settle(sides)  # the other side's last run caught up: it must not share this one's CPU
            for per_txn in TXN_SIZES:
                topic = f"txn{per_txn}-{run}-{uuid.uuid4().hex[:6]}"
                _create(side.bootstrap, topic, partitions=partitions, replication_factor=3)
                cpu0 = side.cpu_seconds()
                got = transactional_produce(side.bootstrap, topic, records=records, per_txn=per_txn, size=size,
                                            partitions=partitions)
                got["broker_cpu_s"] = side.cpu_seconds() - cpu0
                samples.setdefault((f"txn of {per_txn:,}", side.name), []).append(got)
                cpu0 = side.cpu_seconds()
                seconds = consume_all(side.bootstrap, topic, partitions=partitions, count=records)
                samples.setdefault((f"consume read_committed (txn of {per_txn:,})", side.name), []).append(
                    {"seconds": seconds, "broker_cpu_s": side.cpu_seconds() - cpu0})
                clients.delete_topic(side.bootstrap, topic)
            topic = f"idem-{run}-{uuid.uuid4().hex[:6]}"
            _create(side.bootstrap, topic, partitions=partitions, replication_factor=3)
            cpu0 = side.cpu_seconds()
            got = idempotent_produce(side.bootstrap, topic, records=records, size=size, partitions=partitions)
            got["broker_cpu_s"] = side.cpu_seconds() - cpu0
            ends = sum(clients.end_offset(side.bootstrap, topic, p) for p in range(partitions))
            if ends != records:
                raise RuntimeError(f"{side.name} {topic}: high watermarks sum to {ends} after producing {records}")
            samples.setdefault(("idempotent, no txn", side.name), []).append(got)
            clients.delete_topic(side.bootstrap, topic)
    rows = []
    gb = records * size / 1e9
    for case in _case_names():
        row: dict[str, Any] = {"case": case}
        for side in sides:
            cells = samples[(case, side.name)]
            seconds = statistics.median(g["seconds"] for g in cells)
            cell = {"seconds": seconds, "records_s": records / seconds, "mb_s": records * size / 1e6 / seconds,
                    "broker_cpu_s_per_gb": statistics.median(g["broker_cpu_s"] for g in cells) / gb,
                    "runs_records_s": [round(records / g["seconds"]) for g in cells]}
            if "transactions" in cells[0]:
                cell.update({"transactions": cells[0]["transactions"],
                             "txn_s": cells[0]["transactions"] / seconds,
                             "commit_p50_ms": statistics.median(g["commit_p50_ms"] for g in cells),
                             "commit_max_ms": max(g["commit_max_ms"] for g in cells)})
            row[side.name] = cell
        rows.append(row)
    return {"rows": rows}


def run(*, records: int, size: int = 1024, partitions: int = 3, runs: int, work: Path, kafka_version: str | None,
        latency_s: float = 10.0, latency_txn_s: float = 20.0, latency_txn_records: int = 50,
        rebalance_records: int = 0, rebalance_rate: int = 200, rebalance_members: int = 10,
        rebalance_kills: int = 0, rebalance_kill_every_s: float = 60.0) -> dict[str, Any]:
    """Kelp's three brokers (and Kafka's three nodes unless `kafka_version` is None): the figures above."""
    load0 = load_average()
    result: dict[str, Any] = {"records": records, "size": size, "partitions": partitions, "runs": runs,
                              "replication_factor": 3, "brokers": 3, "cpus": os.cpu_count(),
                              "kafka": kafka_version is not None, "latency": {}, "rebalancing": {}}
    if rebalance_records > 0 and shutil.which("java") is None:
        result["rebalancing_skipped"] = "java is not installed"
        rebalance_records = 0
    with ExitStack() as stack:
        sides = start_sides(stack, work, brokers=3, kafka_version=kafka_version, label="txn")
        if records > 0:
            result.update(measure(sides, records=records, size=size, partitions=partitions, runs=runs))
        if latency_s > 0:
            for side in sides:  # one after the other, each alone on the machine's CPUs
                topic = f"txn-latency-{uuid.uuid4().hex[:6]}"
                _create(side.bootstrap, topic, partitions=partitions, replication_factor=3)
                result["latency"][side.name] = latency(side.bootstrap, topic, partitions=partitions,
                                                       txn_s=latency_txn_s, per_txn=latency_txn_records, size=size,
                                                       seconds=latency_s, who=side.name)
        if rebalance_records > 0:
            from kelp import kafka_tools

            kafka_tools.fetch()
            cells: dict[str, list[dict[str, Any]]] = {}
            for _, order in alternating(sides, runs):
                for side in order:
                    settle(sides)
                    cells.setdefault(side.name, []).append(rebalancing(
                        side, records=rebalance_records, rate=rebalance_rate, members=rebalance_members, work=work,
                        kills=rebalance_kills, kill_every_s=rebalance_kill_every_s))
            for name, got in cells.items():  # the run with the median duration, whole
                result["rebalancing"][name] = sorted(got, key=lambda g: g["seconds"])[len(got) // 2]
    result["load_average"] = [load0, load_average()]
    return result


def print_report(res: dict[str, Any]) -> None:
    from kelp.cli.output import print_table

    names = ["kelp", "kafka"] if res["kafka"] else ["kelp"]
    print(f"\ntransactions: three brokers of each, a topic of {res['partitions']} partitions, RF 3, "
          f"min.insync.replicas=2, acks=all; {res['records']:,} records of {res['size']:,} B per case and run, "
          f"confluent-kafka; medians of {res['runs']} run(s), alternating which broker goes first")
    if not res["kafka"]:
        print("Apache Kafka reference skipped (--no-kafka)")
    rows = res.get("rows") or []
    if rows:
        header = ["CASE"]
        for n in names:
            header += [f"{n.upper()} rec/s", f"{n.upper()} MB/s"]
        if res["kafka"]:
            header.append("KELP/KAFKA")
        header += [f"{n.upper()} COMMIT p50 ms" for n in names]
        header += [f"{n.upper()} CPU s/GB" for n in names]
        table = []
        for r in rows:
            line = [r["case"]]
            for n in names:
                line += [f"{r[n]['records_s']:,.0f}", f"{r[n]['mb_s']:,.1f}"]
            if res["kafka"]:
                line.append(f"{r['kafka']['seconds'] / r['kelp']['seconds']:.2f}x")
            line += [f"{r[n]['commit_p50_ms']:.1f}" if "commit_p50_ms" in r[n] else "-" for n in names]
            line += [f"{r[n]['broker_cpu_s_per_gb']:.2f}" for n in names]
            table.append(line)
        print_table(table, header)
        print("txn of N: begin, N records round-robin over the partitions, commit_transaction() (flush + EndTxn; "
              "COMMIT p50: its median time); consume: every record of that case's topic from offset 0, "
              "read_committed, counted exactly; CPU s/GB: the three brokers' utime+stime per 10^9 B of values")
    lat = res.get("latency") or {}
    if lat:
        table = [[n, f"{la['txn_per_s']:.0f} x {la['records_per_txn']} / {la['achieved_txn_per_s']:.1f}",
                  f"{la['measured_records']:,}", f"{la['commit_p50_ms']:.1f}", f"{la['p50_ms']:.1f}",
                  f"{la['p99_ms']:.1f}", f"{la['max_ms']:.1f}"] for n, la in lat.items()]
        print_table(table, ["COMMITTED-RECORD LATENCY", "TXN/s x RECORDS OFFERED / TXN/s ACHIEVED", "RECORDS",
                            "COMMIT p50 ms", "p50 ms", "p99 ms", "max ms"])
        la0 = next(iter(lat.values()))
        print(f"latency: produce() to a read_committed consumer receiving the record (the transaction's end, commit, "
              f"markers, last stable offset, fetch); {la0['seconds']:.0f} s per broker after {la0['warmup_s']:.0f} s "
              "dropped, one broker at a time; librdkafka's default fetch.wait.max.ms=500")
    reb = res.get("rebalancing") or {}
    if reb:
        r0 = next(iter(reb.values()))
        table = [[n, f"{r['commits_s']:.1f}", f"{r['aborts_s']:.1f}", f"{r['rebalances']}",
                  f"{r['concurrent_transactions_retried']:,}", f"{r['drain_s']:.1f}", f"{r['broker_cpu_s']:.1f}",
                  ", ".join(f"{k} {v}" for k, v in sorted(r["errors"].items())) or "-"] for n, r in reb.items()]
        print_table(table, ["REBALANCING", "COMMITS/s", "ABORTS/s", "REBALANCES", "CONCURRENT_TXNS RETRIED",
                            "DRAIN s", "BROKER CPU s", "CLIENT ERRORS"])
        print(f"rebalancing: {r0['members']} Java (transactions v2) group members, each with its own transactional "
              f"producer, copy {r0['records']:,} records fed at {r0['rate']}/s from 12 to 4 partitions, committing "
              f"their offsets in each transaction; every {REBALANCE_CHURN_MS / 1000:.0f} s a member leaves (every "
              "other time as a crash) and comes back; output checked exactly once (read_committed); DRAIN: from "
              "the last input record to the group having committed everything; the run of median length"
              + (f"; {r0['broker_kills']} broker SIGKILLs in it, one every {r0['kill_every_s']:.0f} s"
                 if r0.get("broker_kills") else ""))
    elif res.get("rebalancing_skipped"):
        print(f"rebalancing case skipped: {res['rebalancing_skipped']}")
    load = res["load_average"]
    print(f"machine: {res['cpus']} CPUs, load average {load[0]:.1f} at the start, {load[1]:.1f} at the end "
          "(client and six brokers share them)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options `python -m bench.transactions` and `python -m bench` share."""
    p.add_argument("--txn-records", type=int, default=50_000,
                   help="1 KiB records per transactional case and run, three brokers of each (50000; 0 skips)")
    p.add_argument("--txn-partitions", type=int, default=3, help="partitions of the transactional topics (3)")
    p.add_argument("--txn-latency-seconds", type=float, default=10.0,
                   help="seconds of committed-record latency per broker after 2 s dropped (10; 0 skips)")
    p.add_argument("--txn-latency-rate", type=float, default=20.0,
                   help="transactions per second offered in the latency run (20, of 50 records each)")
    p.add_argument("--txn-rebalance-records", type=int, default=4_000,
                   help="records the rebalancing case copies per broker and run (4000, fed at 200/s; 0 skips)")
    p.add_argument("--txn-rebalance-members", type=int, default=10,
                   help="consumer-group members, each with a transactional producer, in the rebalancing case (10)")
    p.add_argument("--txn-rebalance-rate", type=int, default=200,
                   help="input records per second fed in the rebalancing case (200)")
    p.add_argument("--txn-rebalance-kills", type=int, default=0,
                   help="brokers SIGKILLed (in turn, each started again) during each rebalancing run (0)")
    p.add_argument("--txn-rebalance-kill-every", type=float, default=60.0,
                   help="seconds between those kills, the first this long after the start (60)")


def run_from_args(args: argparse.Namespace, *, work: Path, kafka_version: str | None) -> dict[str, Any] | None:
    if args.txn_records <= 0 and args.txn_latency_seconds <= 0 and args.txn_rebalance_records <= 0:
        return None
    if args.txn_rebalance_records > 0:
        for flag, value, low in (("members", args.txn_rebalance_members, 1), ("rate", args.txn_rebalance_rate, 1),
                                 ("kills", args.txn_rebalance_kills, 0),
                                 ("kill-every", args.txn_rebalance_kill_every, 1)):
            if value < low:
                raise ValueError(f"--txn-rebalance-{flag} must be at least {low}, got {value}")
    return run(records=max(0, args.txn_records), partitions=args.txn_partitions, runs=max(1, args.runs), work=work,
               kafka_version=kafka_version, latency_s=args.txn_latency_seconds, latency_txn_s=args.txn_latency_rate,
               rebalance_records=max(0, args.txn_rebalance_records), rebalance_members=args.txn_rebalance_members,
               rebalance_rate=args.txn_rebalance_rate, rebalance_kills=args.txn_rebalance_kills,
               rebalance_kill_every_s=args.txn_rebalance_kill_every)


def main(argv: list[str] | None = None) -> int:
    return section_main("transactions", __doc__ or "", argv, add_arguments=add_arguments, run_from_args=run_from_args,
                        report=print_report)


if __name__ == "__main__":
    sys.exit(main())
