"""Recovery after SIGKILL: exec to serving again with N GB of log on disk — Kelp and Apache Kafka.

Why: a broker that crashes (OOM kill, node failure, a bug) comes back on
the same disk, and until it serves again its partitions are offline. Each
broker here gets a one-partition topic filled with the same number of 1 KiB
records (acks=1, confluent-kafka, two producer processes) and is SIGKILLed as
soon as the last record is acknowledged (no controlled shutdown, no
clean-shutdown marker), then exec'd again on the same data directory, three
times:

- warm: right after the kill, the log still in the page cache (a process
  crash: the container restarts on the same node);
- cold: killed again once serving, then every file of its data directory
  fsynced and dropped from the page cache (POSIX_FADV_DONTNEED, those files
  only) before the exec, so recovery reads the disk as after a machine crash;
- clean: after a controlled shutdown, the floor (nothing to recover).

The figure is from the exec to the first ListOffsets "latest" answer equal
to the record count (the partition led, its log loaded, its high watermark
restored); one Fetch of the last record then checks the data, untimed.

What each broker had to recover is read from its files at each kill: the
recovery point it stored (Kelp: `partition.checkpoint`, advanced once rolled
segments are fsynced in the background, and by flushes; Kafka:
`recovery-point-offset-checkpoint`, written every 60 s,
`log.flush.offset.checkpoint.interval.ms`) and the log bytes from the
segment holding it to the end — the tail both rescan batch by batch (CRC) —
plus what Kafka's log loader reports (`Recovering unflushed segment`,
`Loaded N logs in T ms`). Both keep their default flush policy (no periodic
fsync of the active segment).

`python -m bench.recovery [--gb N]` runs it alone; `make bench` runs it after
the broker cases (`--recovery-gb`, 0 skips).

It must never call a broker serving before it answers with every record, nor
compare logs of different sizes without printing both.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from kelp.errors import ErrorCode

from . import clients, emit, probe
from .broker import BenchBroker

__all__ = ["run", "run_kelp", "run_kafka", "print_report", "main"]

TOPIC = "bench-recovery"
RECORD_BYTES = 1024
PRODUCERS = 2  # fill processes; the broker is the bottleneck beyond two on this machine
CHUNK_RECORDS = 250_000  # records per Producer instance (bounds each client's queue)
SERVE_TIMEOUT_S = 600.0


def records_for(gb: float) -> int:
    """1 KiB records whose values add up to `gb` GB (10^9 bytes)."""
    return int(gb * 1e9) // RECORD_BYTES


# -- filling ----------------------------------------------------------------------------

def _fill_part(bootstrap: str, count: int) -> None:
    left = count
    while left:
        n = min(CHUNK_RECORDS, left)
        clients.produce(bootstrap, TOPIC, count=n, size=RECORD_BYTES, acks=1)
        left -= n


def _fill(bootstrap: str, records: int) -> float:
    """Produce `records` to the topic's partition 0 from PRODUCERS processes; seconds until all acknowledged."""
    ctx = mp.get_context("spawn")
    shares = [records // PRODUCERS + (1 if i < records % PRODUCERS else 0) for i in range(PRODUCERS)]
    start = time.perf_counter()
    procs = [ctx.Process(target=_fill_part, args=(bootstrap, n)) for n in shares]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"a fill process failed (exit codes {[p.exitcode for p in procs]})")
    return time.perf_counter() - start


# -- what is on disk --------------------------------------------------------------------

def _segments(partition_dir: Path) -> list[tuple[int, int]]:
    """(base offset, bytes) of every .log segment, in offset order."""
    return sorted((int(p.name[:-4]), p.stat().st_size) for p in partition_dir.glob("*.log") if p.name[:-4].isdigit())


def _tail_bytes(segments: list[tuple[int, int]], recovery_point: int) -> int:
    """Bytes from the segment holding `recovery_point` to the end: what recovery rescans (Kelp and Kafka alike)."""
    first = 0
    for i, (base, _) in enumerate(segments):
        if base <= recovery_point:
            first = i
    return sum(size for _, size in segments[first:])


def _kelp_recovery_point(partition_dir: Path) -> int:
    for line in (partition_dir / "partition.checkpoint").read_text().splitlines():
        if line.startswith("recovery_point "):
            return int(line.split()[1])
    return 0


def _kafka_recovery_point(log_dir: Path, topic: str, partition: int = 0) -> int:
    """Kafka's `recovery-point-offset-checkpoint` (version, count, then `topic partition offset` lines); 0 if absent."""
    try:
        lines = (log_dir / "recovery-point-offset-checkpoint").read_text().splitlines()
    except FileNotFoundError:
        return 0
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic and int(parts[1]) == partition:
            return int(parts[2])
    return 0


def _disk_state(partition_dir: Path, recovery_point: int) -> dict[str, Any]:
    segs = _segments(partition_dir)
    return {"log_bytes": sum(s for _, s in segs), "segments": len(segs), "recovery_point": recovery_point,
            "tail_bytes": _tail_bytes(segs, recovery_point)}


# -- serving again ----------------------------------------------------------------------

def _wait_latest(bootstrap: Callable[[], str], expect: int, alive: Callable[[], bool]) -> float:
    """Poll ListOffsets latest until it answers `expect` without error; the `perf_counter()` at which it did."""
    def check() -> str | None:
        address = bootstrap()
        if not address:
            return "no address yet"
        error, offset = probe.latest_offset(address, TOPIC)
        return None if error == ErrorCode.NONE and offset == expect else f"error {error}, offset {offset} of {expect}"

    return probe.poll_until(check, what=f"{TOPIC} served again after the restart", timeout_s=SERVE_TIMEOUT_S,
                            alive=alive, interval_s=0.01)


def _check_last(bootstrap: str, records: int) -> None:
    """One Fetch of the last record (untimed): it is there, whole."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kelp-bench", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, records - 1)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                raise RuntimeError(f"fetch of the last record: {msg.error()}")
            if msg.offset() != records - 1 or len(msg.value() or b"") != RECORD_BYTES:
                raise RuntimeError(f"fetch of the last record: offset {msg.offset()}, {len(msg.value() or b'')} bytes")
            return
        raise RuntimeError("fetch of the last record: nothing within 30 s")
    finally:
        consumer.close()


# -- the two brokers --------------------------------------------------------------------

def _evict(directory: Path) -> float:
    """fsync every file under `directory`, then drop its pages from the page cache; seconds it took.

    Only these files leave the cache (POSIX_FADV_DONTNEED), so the restart reads the log from the disk as after
    a machine crash, without touching anything else on the machine.
    """
    start = time.perf_counter()
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    return time.perf_counter() - start


class _Subject(Protocol):
    """One broker under test: how to (re)start, kill and stop it, and where its state is."""

    data_dir: Path
    partition_dir: Path

    def start(self) -> float: ...  # exec the broker; the perf_counter() of the exec
    def bootstrap(self) -> str: ...
    def alive(self) -> bool: ...
    def kill(self) -> None: ...
    def stop(self) -> None: ...
    def recovery_point(self) -> int: ...
    def report(self, exec_wall: float) -> dict[str, Any]: ...  # what the restart logged


def _cycle(b: _Subject, records: int) -> dict[str, Any]:
    """Fill, then: SIGKILL + restart (page cache warm); SIGKILL + evict + restart (cold); stop + restart (clean)."""
    b.start()
    clients.create_topic(b.bootstrap(), TOPIC)
    out: dict[str, Any] = {"records": records, "fill_s": _fill(b.bootstrap(), records)}
    for case in ("warm", "cold", "clean"):
        if case == "clean":
            b.stop()
        else:
            b.kill()
            out[case] = _disk_state(b.partition_dir, b.recovery_point())
            if case == "cold":
                out[case]["evict_s"] = _evict(b.data_dir)
        wall0, t0 = time.time(), b.start()
        seconds = _wait_latest(b.bootstrap, records, b.alive) - t0
        if case == "clean":
            out["clean_s"] = seconds
        else:
            out[case].update(serving_s=seconds, **b.report(wall0))
            _check_last(b.bootstrap(), records)
    b.stop()
    return out


class _Kelp(_Subject):
    def __init__(self, work: Path) -> None:
        self.data_dir = work / "recovery-kelp"
        self.partition_dir = self.data_dir / f"{TOPIC}-0"
        self.broker = BenchBroker(self.data_dir)

    def start(self) -> float:
        self.broker = BenchBroker(self.data_dir)
        t0 = time.perf_counter()
        self.broker.start(timeout_s=SERVE_TIMEOUT_S)  # returns once it prints "listening"
        self.listening_s = time.perf_counter() - t0
        return t0

    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def alive(self) -> bool:
        return self.broker.proc is not None and self.broker.proc.poll() is None

    def kill(self) -> None:
        self.broker.kill()

    def stop(self) -> None:
        self.broker.stop()

    def recovery_point(self) -> int:
        return _kelp_recovery_point(self.partition_dir)

    def report(self, exec_wall: float) -> dict[str, Any]:
        repairs = [line.strip() for line in self.broker.stderr_lines() if "truncated" in line or "rebuilding" in line]
        return {"listening_s": self.listening_s, "repairs": repairs[-5:]}


class _Kafka(_Subject):
    def __init__(self, work: Path, version: str) -> None:
        from .kafka_ref import KafkaCluster

        self.cluster = KafkaCluster(work / "recovery-kafka", version=version)
        self.data_dir = self.cluster.log_dirs[0]
        self.partition_dir = self.data_dir / f"{TOPIC}-0"
        self.started = False

    def start(self) -> float:
        if not self.started:
            self.started = True
            self.cluster.start()
            return time.perf_counter()
        return self.cluster.restart(0)

    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def alive(self) -> bool:
        return bool(self.cluster.pids)

    def kill(self) -> None:
        self.cluster.kill(0)

    def stop(self) -> None:
        self.cluster.stop(timeout_s=60)

    def recovery_point(self) -> int:
        return _kafka_recovery_point(self.data_dir, TOPIC)

    def report(self, exec_wall: float) -> dict[str, Any]:
        """What Kafka's log loader logged since the exec at `exec_wall` (epoch s): segments recovered, load time."""
        from datetime import datetime

        lines = self.cluster.stderr_lines(0)
        out: dict[str, Any] = {"unflushed_segments": sum(f"partition={TOPIC}-0," in line and "Recovering unflushed"
                                                         in line for line in lines),
                               "load_ms": None, "loaded_after_exec_s": None}
        for line in lines:
            if m := re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] INFO Loaded \d+ logs in (\d+)ms", line):
                at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()  # the JVM's local time
                out.update(load_ms=int(m.group(2)), loaded_after_exec_s=at - exec_wall)
        return out


def run_kelp(*, records: int, work: Path) -> dict[str, Any]:
    b = _Kelp(work)
    try:
        return _cycle(b, records)
    finally:
        b.stop()


def run_kafka(*, records: int, work: Path, version: str) -> dict[str, Any]:
    b = _Kafka(work, version)
    try:
        return _cycle(b, records)
    finally:
        b.cluster.stop(timeout_s=10)


def run(*, gb: float, work: Path, kafka_version: str | None) -> dict[str, Any]:
    """Kelp's figures, then Kafka's (None with `kafka_version=None`)."""
    records = records_for(gb)
    with tempfile.TemporaryDirectory(prefix="recovery-", dir=work) as tmp:  # GBs: gone once measured
        kelp = run_kelp(records=records, work=Path(tmp))
    with tempfile.TemporaryDirectory(prefix="recovery-", dir=work) as tmp:
        kafka = run_kafka(records=records, work=Path(tmp), version=kafka_version) if kafka_version else None
    return {"gb": gb, "records": records, "kelp": kelp, "kafka": kafka, "load_average": os.getloadavg()[0]}


def _did(name: str, r: dict[str, Any], case: dict[str, Any]) -> str:
    """What the broker did on that restart, from its own files and log."""
    if name == "kelp":
        repairs = "; ".join(case["repairs"]) or "no repair"
        return f"listening at {case['listening_s']:.2f} s (recovery runs before the port opens); {repairs}"
    if case["loaded_after_exec_s"] is None:
        return "no 'Loaded N logs' line seen"
    return (f"recovered {case['unflushed_segments']} unflushed segment(s) in {case['load_ms']} ms, "
            f"logs loaded at {case['loaded_after_exec_s']:.1f} s")


def print_report(res: dict[str, Any]) -> None:
    from kelp.cli.output import print_table

    print(f"\nrecovery after SIGKILL: {res['records']:,} records of 1 KiB ({res['gb']:g} GB of values) in one "
          "partition, broker killed at the last acknowledgement, exec'd again on the same data")
    rows = []
    for name in ("kelp", "kafka"):
        r = res.get(name)
        if not r:
            continue
        for case, label in (("warm", "SIGKILL, page cache warm"), ("cold", "SIGKILL, log evicted (cold)")):
            c = r[case]
            rows.append([name, label, f"{c['log_bytes'] / 1e9:.2f}", f"{c['recovery_point']:,}",
                         f"{c['tail_bytes'] / 1e9:.2f}", f"{c['serving_s']:.2f}", _did(name, r, c)])
        rows.append([name, "controlled shutdown (floor)", f"{r['warm']['log_bytes'] / 1e9:.2f}", "-", "-",
                     f"{r['clean_s']:.2f}", f"filled at {r['records'] * RECORD_BYTES / 1e6 / r['fill_s']:,.0f} MB/s"])
    print_table(rows, ["BROKER", "RESTART AFTER", "LOG GB", "RECOVERY POINT", "TAIL TO SCAN GB", "EXEC -> SERVING s",
                       "WHAT IT DID"])
    kelp, kafka = res["kelp"], res.get("kafka")
    if kelp["warm"]["recovery_point"] == 0 and kelp["warm"]["segments"] > 1:
        print(f"Kelp rescanned its whole log ({kelp['warm']['segments']} segments): no rolled segment had been "
              "fsynced yet (the periodic task does it within about a second of a roll)")
    if kafka and not kafka["warm"]["recovery_point"]:
        print("Kafka rescanned its whole log: it stores its recovery point every 60 s and this fill took less")
    print("recovery point: the stored offset below which the log is known flushed (Kelp: partition.checkpoint, "
          "advanced when rolled segments are fsynced, about a second after each roll, and by flushes; Kafka: "
          "recovery-point-offset-checkpoint, written every 60 s); both rescan "
          "from the segment holding it (CRC of every batch). Cold: the data dir fsynced and dropped from the page "
          "cache (POSIX_FADV_DONTNEED) before the exec, as after a machine crash")
    if kafka:
        print("Kafka: exec to serving includes the JVM start, the KRaft controller's activation and the broker's "
              "registration (after a kill, the controller waits for the previous incarnation's session to expire, "
              "broker.session.timeout.ms 9000)")
        for case, label in (("warm", "page cache warm"), ("cold", "cold")):
            k, f = kelp[case], kafka[case]
            ratio = k["serving_s"] / f["serving_s"]
            same = abs(k["log_bytes"] - f["log_bytes"]) <= 0.02 * f["log_bytes"]
            print(f"goal recovery after SIGKILL ({label}) no slower than Kafka's for the same log size: "
                  f"{'met' if ratio <= 1.0 else 'MISSED'} ({k['serving_s']:.2f} s vs {f['serving_s']:.2f} s, "
                  f"{ratio:.2f}x" + ("" if same else f"; logs differ: {k['log_bytes'] / 1e9:.2f} vs "
                                                     f"{f['log_bytes'] / 1e9:.2f} GB") + ")")
    else:
        print("Apache Kafka reference skipped (--no-kafka)")
    print(f"machine: {os.cpu_count()} CPUs, load average {res['load_average']:.1f} at the end of the case; "
          "serving = ListOffsets latest answers the record count, then one Fetch of the last record (untimed)")


def main(argv: list[str] | None = None) -> int:
    from .kafka_ref import KAFKA_VERSION

    p = argparse.ArgumentParser(prog="python -m bench.recovery", description=__doc__.splitlines()[0])
    p.add_argument("--gb", type=float, default=5.0, help="GB of 1 KiB record values per broker (5)")
    p.add_argument("--no-kafka", action="store_true", help="skip Apache Kafka")
    p.add_argument("--kafka-version", default=KAFKA_VERSION)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kelp-bench-recovery-") as tmp:
        res = run(gb=args.gb, work=Path(tmp), kafka_version=None if args.no_kafka else args.kafka_version)
    emit("recovery", res, as_json=args.json, report=print_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
