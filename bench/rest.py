"""REST Proxy v2 (issue 22): produce and consume through Kelp's HTTP port beside the Kafka protocol on Kelp.

Why: applications that cannot link a Kafka client talk to Kelp over HTTP (Confluent's REST Proxy v2 API,
served by every broker). What does that cost against the Kafka protocol, on the same broker, same run?
Apache Kafka has no REST proxy (Confluent's is a separate JVM service), so there is no Kafka column: the
comparison is REST against the Kafka protocol, both on one Kelp broker.

On one Kelp broker, `runs` times, alternating which goes first (medians printed):

- REST produce: `records` records of `size` bytes (1 KiB) posted to `POST /topics/{t}` (a topic of one
  partition) in requests of `batch` records each, `concurrency` requests in flight (aiohttp, keep-alive),
  in the binary embedded format (`application/vnd.kafka.binary.v2+json`, values base64) and the JSON one
  (`application/vnd.kafka.json.v2+json`, each value a JSON object whose compact text, what the broker
  stores, is `size` bytes). Every answer must be 200 with one offset and no error per record; the
  partition's high watermark must then be `records`. The request bodies are built once, before the clock.
  REST produce appends with acks=1, so the Kafka-protocol side is confluent-kafka with acks=1 (bench/clients.py).
- REST consume: a v2 consumer instance (`POST /consumers/{group}`, `format` binary or json, assigned the
  partition with `POST .../assignments`, so no group join is timed) reading `GET .../records?max_bytes=`
  until it has every record of the topic that format produced; beside it confluent-kafka reading the
  binary topic from offset 0 (assign, no group).

Printed: records/s and MB/s (10^6 B of record values per second) of each, REST over the Kafka protocol,
the broker's CPU-seconds (utime+stime) and this process's (the client's) per GB of values.

`python -m bench.rest` runs this alone; `make bench` runs it (`--rest-records`, 0 skips).

It must never count a record the broker did not acknowledge (an offset without error) or deliver.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import resource
import statistics
import string
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from . import clients, probe, section_main
from .broker import BenchBroker

__all__ = ["FORMATS", "rest_produce", "rest_consume", "run", "print_report", "main"]

FORMATS = ("binary", "json")
CONTENT_TYPES = {"binary": "application/vnd.kafka.binary.v2+json", "json": "application/vnd.kafka.json.v2+json"}
V2 = "application/vnd.kafka.v2+json"
WARMUP_RECORDS = 20_000


def _client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _value(fmt: str, size: int) -> Any:
    """One record's value in the request: base64 of `size` random bytes, or a JSON object of `size` B compact."""
    if fmt == "binary":
        return base64.b64encode(os.urandom(size)).decode()
    pad = size - len('{"payload":""}')
    return {"payload": "".join(random.choices(string.ascii_letters, k=pad))}


def _body(fmt: str, size: int, count: int) -> bytes:
    value = _value(fmt, size)
    return json.dumps({"records": [{"value": value} for _ in range(count)]}, separators=(",", ":")).encode()


async def _produce_requests(url: str, bodies: list[tuple[bytes, int]], *, content_type: str,
                            concurrency: int) -> int:
    import aiohttp

    acked = 0
    next_request = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal acked, next_request
        while next_request < len(bodies):
            body, count = bodies[next_request]
            next_request += 1
            async with session.post(url, data=body, headers={"Content-Type": content_type,
                                                             "Accept": V2}) as resp:
                text = await resp.text()
                if resp.status != 200:
                    raise RuntimeError(f"POST {url}: {resp.status} {text[:500]}")
            offsets = json.loads(text)["offsets"]
            bad = [o for o in offsets if o.get("error_code") is not None or o.get("offset") is None]
            if len(offsets) != count or bad:
                raise RuntimeError(f"POST {url}: {len(offsets)} offsets for {count} records, errors {bad[:3]}")
            acked += count

    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency), timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return acked


def rest_produce(http_url: str, topic: str, *, fmt: str, records: int, batch: int, size: int,
                 concurrency: int) -> tuple[float, float]:
    """(seconds, client CPU-seconds) to have `records` records acknowledged through `POST /topics/{topic}`."""
    full, rest = divmod(records, batch)
    body = _body(fmt, size, batch)
    bodies = [(body, batch)] * full + ([(_body(fmt, size, rest), rest)] if rest else [])
    cpu0 = _client_cpu()
    start = time.perf_counter()
    acked = asyncio.run(_produce_requests(f"{http_url}/topics/{topic}", bodies, content_type=CONTENT_TYPES[fmt],
                                          concurrency=concurrency))
    seconds = time.perf_counter() - start
    if acked != records:
        raise RuntimeError(f"{topic}: {acked} of {records} records acknowledged")
    return seconds, _client_cpu() - cpu0


async def _consume_requests(http_url: str, topic: str, *, fmt: str, records: int, max_bytes: int,
                            timeout_s: float) -> float:
    import aiohttp

    group = f"kelp-bench-rest-{uuid.uuid4().hex[:8]}"
    headers = {"Content-Type": V2, "Accept": V2}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        async with session.post(f"{http_url}/consumers/{group}", headers=headers,
                                data=json.dumps({"format": fmt, "auto.offset.reset": "earliest",
                                                 "auto.commit.enable": "false"})) as resp:
            if resp.status != 200:
                raise RuntimeError(f"create consumer: {resp.status} {await resp.text()}")
            base = (await resp.json(content_type=None))["base_uri"]
        try:
            async with session.post(f"{base}/assignments", headers=headers,
                                    data=json.dumps({"partitions": [{"topic": topic, "partition": 0}]})) as resp:
                if resp.status not in (200, 204):
                    raise RuntimeError(f"assign: {resp.status} {await resp.text()}")
            accept = {"Accept": f"application/vnd.kafka.{fmt}.v2+json"}
            got = 0
            start = time.perf_counter()
            while got < records:
                async with session.get(f"{base}/records", params={"timeout": "1000", "max_bytes": str(max_bytes)},
                                       headers=accept) as resp:
                    text = await resp.text()
                    if resp.status != 200:
                        raise RuntimeError(f"GET {base}/records: {resp.status} {text[:500]}")
                got += len(json.loads(text))
                if time.perf_counter() - start > timeout_s:
                    raise RuntimeError(f"REST consumer got {got} of {records} records in {timeout_s:.0f} s")
            seconds = time.perf_counter() - start
            if got != records:
                raise RuntimeError(f"REST consumer got {got} records, the topic holds {records}")
            return seconds
        finally:
            async with session.delete(base, headers=headers) as resp:
                await resp.read()


def rest_consume(http_url: str, topic: str, *, fmt: str, records: int, max_bytes: int,
                 timeout_s: float = 300.0) -> tuple[float, float]:
    """(seconds, client CPU-seconds) for a v2 consumer instance to read every record of `topic` (partition 0)."""
    cpu0 = _client_cpu()
    seconds = asyncio.run(_consume_requests(http_url, topic, fmt=fmt, records=records, max_bytes=max_bytes,
                                            timeout_s=timeout_s))
    return seconds, _client_cpu() - cpu0


def _kafka_produce(bootstrap: str, topic: str, *, records: int, size: int) -> tuple[float, float]:
    cpu0 = _client_cpu()
    seconds = clients.produce(bootstrap, topic, count=records, size=size, acks=1)
    return seconds, _client_cpu() - cpu0


def run(*, records: int, size: int = 1024, batches: list[int], concurrency: int = 4, max_bytes: int = 4 << 20,
        runs: int, work: Path) -> dict[str, Any]:
    """The REST and Kafka-protocol cases on one Kelp broker, alternating; medians over `runs`."""
    load0 = os.getloadavg()[0]
    samples: dict[str, list[tuple[float, float, float]]] = {}  # case -> (seconds, broker CPU, client CPU)
    with BenchBroker(work / "rest-kelp") as kelp:
        assert kelp.proc is not None
        pid = kelp.proc.pid

        def timed(case: str, action: Callable[[], tuple[float, float]]) -> None:
            cpu0 = probe.cpu_seconds([pid])
            seconds, client = action()
            samples.setdefault(case, []).append((seconds, probe.cpu_seconds([pid]) - cpu0, client))

        def fresh(label: str) -> str:
            topic = f"rest-{label}-{uuid.uuid4().hex[:6]}"
            clients.create_topic(kelp.bootstrap, topic)
            return topic

        def check(topic: str) -> None:
            end = clients.end_offset(kelp.bootstrap, topic)
            if end != records:
                raise RuntimeError(f"{topic}: high watermark {end} after {records} records were acknowledged")

        warm = min(records, WARMUP_RECORDS)
        for fmt in FORMATS:
            topic = fresh(f"warm-{fmt}")
            rest_produce(kelp.http_url, topic, fmt=fmt, records=warm, batch=batches[0], size=size,
                         concurrency=concurrency)
            rest_consume(kelp.http_url, topic, fmt=fmt, records=warm, max_bytes=max_bytes)
        topic = fresh("warm-kafka")
        _kafka_produce(kelp.bootstrap, topic, records=warm, size=size)
        clients.consume(kelp.bootstrap, topic, count=warm)
        for run_ in range(runs):
            order = ["rest", "kafka"] if run_ % 2 == 0 else ["kafka", "rest"]
            for side in order:
                if side == "kafka":
                    topic = fresh("kafka")
                    timed("kafka produce", lambda: _kafka_produce(kelp.bootstrap, topic,  # noqa: B023
                                                                  records=records, size=size))
                    check(topic)
                    timed("kafka consume", lambda: (clients.consume_with_cpu(
                        kelp.bootstrap, topic, count=records)))  # noqa: B023
                    clients.delete_topic(kelp.bootstrap, topic)
                    continue
                for fmt in FORMATS:
                    for batch in batches:
                        topic = fresh(f"{fmt}-{batch}")
                        timed(f"rest produce {fmt} {batch}", lambda: rest_produce(
                            kelp.http_url, topic, fmt=fmt, records=records, batch=batch,  # noqa: B023
                            size=size, concurrency=concurrency))
                        check(topic)
                        if batch == batches[-1]:
                            timed(f"rest consume {fmt}", lambda: rest_consume(
                                kelp.http_url, topic, fmt=fmt, records=records, max_bytes=max_bytes))  # noqa: B023
                        clients.delete_topic(kelp.bootstrap, topic)
    gb = records * size / 1e9

    def summary(case: str) -> dict[str, Any]:
        got = samples[case]
        seconds = statistics.median(s for s, _, _ in got)
        return {"seconds": seconds, "records_s": records / seconds, "mb_s": records * size / 1e6 / seconds,
                "broker_cpu_s_per_gb": statistics.median(c for _, c, _ in got) / gb,
                "client_cpu_s_per_gb": statistics.median(c for _, _, c in got) / gb,
                "runs_records_s": [round(records / s) for s, _, _ in got]}

    rows = []
    for fmt in FORMATS:
        for batch in batches:
            rows.append({"case": f"produce {fmt}, {batch:,} records/request",
                         "rest": summary(f"rest produce {fmt} {batch}"), "kafka_protocol": summary("kafka produce")})
    for fmt in FORMATS:
        rows.append({"case": f"consume {fmt}, max_bytes={max_bytes:,}", "rest": summary(f"rest consume {fmt}"),
                     "kafka_protocol": summary("kafka consume")})
    return {"records": records, "size": size, "batches": batches, "concurrency": concurrency,
            "max_bytes": max_bytes, "runs": runs, "rows": rows, "cpus": os.cpu_count(),
            "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def print_report(res: dict[str, Any]) -> None:
    from kelp.cli.output import print_table

    print(f"\nREST Proxy v2 on one Kelp broker: {res['records']:,} records of {res['size']:,} B per case and run, "
          f"{res['concurrency']} produce requests in flight; medians of {res['runs']} run(s), alternating REST and "
          "the Kafka protocol")
    print("Apache Kafka has no REST proxy (Confluent's REST Proxy is a separate service): this compares REST "
          "against the Kafka protocol (confluent-kafka), both on Kelp")
    table = []
    for r in res["rows"]:
        rest, kp = r["rest"], r["kafka_protocol"]
        table.append([r["case"], f"{rest['records_s']:,.0f}", f"{rest['mb_s']:,.1f}", f"{kp['records_s']:,.0f}",
                      f"{kp['mb_s']:,.1f}", f"{rest['mb_s'] / kp['mb_s']:.2f}x",
                      f"{rest['broker_cpu_s_per_gb']:.2f} | {kp['broker_cpu_s_per_gb']:.2f}",
                      f"{rest['client_cpu_s_per_gb']:.2f} | {kp['client_cpu_s_per_gb']:.2f}"])
    print_table(table, ["CASE", "REST rec/s", "REST MB/s", "KAFKA PROTOCOL rec/s", "KAFKA PROTOCOL MB/s",
                        "REST/KAFKA PROTOCOL", "BROKER CPU s/GB (rest | kafka)", "CLIENT CPU s/GB (rest | kafka)"])
    print("produce: POST /topics/{t} (acks=1 inside the broker) beside confluent-kafka acks=1; consume: a v2 "
          "consumer instance (assigned, GET .../records) beside confluent-kafka from offset 0 (binary topic); "
          "MB/s: 10^6 B of record values per second")
    load = res["load_average"]
    print(f"machine: {res['cpus']} CPUs, load average {load[0]:.1f} at the start, {load[1]:.1f} at the end "
          "(client and broker share them)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options `python -m bench.rest` and `python -m bench` share."""
    p.add_argument("--rest-records", type=int, default=100_000,
                   help="1 KiB records per REST case and run (100000; 0 skips the REST section)")
    p.add_argument("--rest-batch", default="100,1000",
                   help="records per REST produce request, a comma-separated list (100,1000)")
    p.add_argument("--rest-concurrency", type=int, default=4, help="REST produce requests in flight (4)")
    p.add_argument("--rest-max-bytes", type=int, default=4 << 20,
                   help="max_bytes of each REST consumer read (4194304)")


def run_from_args(args: argparse.Namespace, *, work: Path) -> dict[str, Any] | None:
    if args.rest_records <= 0:
        return None
    batches = [int(b) for b in args.rest_batch.split(",") if b.strip()]
    if not batches or min(batches) < 1:
        raise ValueError(f"--rest-batch {args.rest_batch!r}: expected positive record counts")
    return run(records=args.rest_records, batches=batches, concurrency=max(1, args.rest_concurrency),
               max_bytes=args.rest_max_bytes, runs=max(1, args.runs), work=work)


def main(argv: list[str] | None = None) -> int:
    return section_main("rest", __doc__ or "", argv, add_arguments=add_arguments, run_from_args=run_from_args,
                        report=print_report, kafka=False)


if __name__ == "__main__":
    sys.exit(main())
