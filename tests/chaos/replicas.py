"""After the final clean stop: every replica's log read from disk with Kelp's own storage classes, into the history.

Why: "the replicas agree" is only proven by their bytes. For each partition
of the suite's topics, each replica in the final replica set is opened with
`kelp.broker.storage.Log` (recovery runs, as on a broker's start) and read
batch by batch; the bytes of the batches wholly below the reference high
watermark (the leader's, read over the admin API before the stop) are
hashed, and where two replicas differ the first differing batch's offset is
kept. The records of the final leader's replica are decoded
(`kelp.records.record.batch_records`) into `[offset, producer, seq, producer id,
producer epoch, batch base sequence, leader epoch]` for the checker.
Compacted topics (`__consumer_offsets`) compact on each replica on its own,
so their bytes legitimately differ: what must agree is what they hold, the
newest record of each key below the high watermark (its offset and value; a
tombstone and a removed key are the same), hashed in key order.

It must never run while a broker of the run is alive, and never writes a log.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from kelp.broker.storage import Log
from kelp.records.header import iter_headers
from kelp.records.record import batch_records

from .history import History
from .workload import parse_value

__all__ = ["collect"]

READ_BYTES = 1 << 20


def _read_compacted(directory: Path, hw_ref: int) -> dict[str, Any]:
    """The newest (offset, value) of each key below `hw_ref`, hashed in key order; tombstones count as absent."""
    log = Log.open(directory)
    try:
        out: dict[str, Any] = {"log_start": log.log_start_offset, "leo": log.log_end_offset,
                               "hw_checkpoint": log.high_watermark, "offline": log.offline_reason or None,
                               "compacted": True}
        if log.offline_reason:
            return out
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        offset = log.log_start_offset
        while offset < min(log.log_end_offset, hw_ref):
            data = log.read(offset, max_bytes=READ_BYTES)
            before = offset
            if not data:
                break
            for info in iter_headers(data):
                offset = info.next_offset
                if info.is_control or info.last_offset >= hw_ref:
                    continue
                for rec in batch_records(data, info):
                    if rec.key is not None:
                        latest[bytes(rec.key)] = (rec.offset, None if rec.value is None else bytes(rec.value))
            if offset <= before:
                out["error"] = f"reading stalled at offset {offset}"
                break
        digest = hashlib.sha256()
        for key in sorted(latest):
            at, value = latest[key]
            if value is not None:
                digest.update(b"%d|%d|" % (len(key), at) + key + b"|" + value)
        out.update({"keys": sum(1 for v in latest.values() if v[1] is not None), "sha256_below_hw": digest.hexdigest()})
        return out
    finally:
        log.close()


def _read_replica(directory: Path, hw_ref: int, *, records: bool) -> dict[str, Any]:
    log = Log.open(directory)
    try:
        out: dict[str, Any] = {"log_start": log.log_start_offset, "leo": log.log_end_offset,
                               "hw_checkpoint": log.high_watermark, "offline": log.offline_reason or None}
        if log.offline_reason:
            return out
        digest = hashlib.sha256()
        below = 0
        batches: list[tuple[int, int]] = []  # (base offset, crc) of batches below hw_ref, to find a divergence
        recs: list[list[int]] = []
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            data = log.read(offset, max_bytes=READ_BYTES)
            before = offset
            if not data:
                break
            for info in iter_headers(data):
                if info.last_offset < hw_ref:
                    chunk = data[info.position:info.position + info.size]
                    digest.update(chunk)
                    below += info.size
                    batches.append((info.base_offset, info.crc))
                offset = info.next_offset
                if records and not info.is_control:
                    # Who stored it: a record kept twice under the same producer id, epoch and batch sequence
                    # is a batch the broker appended twice; under another epoch, one the client sent again.
                    for rec in batch_records(data, info):
                        producer, seq = parse_value(rec.value)
                        recs.append([rec.offset, producer, seq, info.producer_id, info.producer_epoch,
                                     info.base_sequence, info.partition_leader_epoch])
            if offset <= before:  # a log that does not move forward is reported, never looped over
                out["error"] = f"reading stalled at offset {offset}"
                break
        out.update({"bytes_below_hw": below, "sha256_below_hw": digest.hexdigest(), "batches": batches})
        if records:
            out["records"] = recs
        return out
    finally:
        log.close()


def collect(run_dir: Path, state: dict[str, list], topics: list[str], history: History, *,
            compacted: list[str] = ()) -> None:
    """`state` is the final `{topic: [[p, leader, replicas, isr, hw, leo], ...]}` read before the stop; `compacted`
    topics are compared by what they hold (`_read_compacted`), the others byte for byte."""
    for topic in compacted:
        for p, leader, replicas, isr, hw, _leo in state.get(topic, []):
            source = leader if leader in replicas else (isr[0] if isr else replicas[0])
            hw_ref = hw if isinstance(hw, int) and hw >= 0 else 0
            for b in replicas:
                d = run_dir / f"broker-{b}" / f"{topic}-{p}"
                try:
                    r = _read_compacted(d, hw_ref) if d.is_dir() else {"missing": True}
                except Exception as exc:  # an unreadable replica is a finding, not a crash of the checker
                    r = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                history.add("replica", topic, p, b, {"hw_ref": hw_ref, "source": source, **r})
    for topic in topics:
        for p, leader, replicas, isr, hw, _leo in state.get(topic, []):
            reads: dict[int, dict[str, Any]] = {}
            source = leader if leader in replicas else (isr[0] if isr else replicas[0])
            hw_ref = hw if isinstance(hw, int) and hw >= 0 else 0
            for b in replicas:
                d = run_dir / f"broker-{b}" / f"{topic}-{p}"
                if not d.is_dir():
                    reads[b] = {"missing": True}
                    continue
                try:
                    reads[b] = _read_replica(d, hw_ref, records=(b == source))
                except Exception as exc:  # an unreadable replica is a finding, not a crash of the checker
                    reads[b] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            ref = reads.get(source, {}).get("batches")
            for b, r in reads.items():
                batches = r.pop("batches", None)
                if ref is not None and batches is not None and batches != ref:
                    first = next((x[0] for x, y in zip(batches, ref, strict=False) if x != y), None)
                    if first is None:
                        shorter = batches if len(batches) < len(ref) else ref
                        first = (ref if shorter is batches else batches)[len(shorter)][0]
                    r["first_diff_offset"] = first
                recs = r.pop("records", None)
                if recs is not None:
                    history.add("log", topic, p, b, recs)
                history.add("replica", topic, p, b, {"hw_ref": hw_ref, "source": source, **r})
