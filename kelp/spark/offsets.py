"""Planning reads on the driver: which partitions, from which offset to which, in how many Spark tasks.

Why: everything a query decides about offsets happens here, once, on the
driver, and is written into Spark's checkpoint as Spark's Kafka source
writes it (`{"topic": {"0": 42}}`), so a restarted query resumes exactly
where the last committed micro-batch ended. Executors only read the ranges
they are given (`reader.read_range`).

Rules are Spark's: "earliest"/"latest"/per-partition JSON (-2/-1) or a
timestamp per query or per partition (the first offset whose timestamp is at
or after it); per-partition JSON must cover every partition the query reads;
partitions that appear mid-query start at their earliest offset;
`maxOffsetsPerTrigger` is shared between partitions in proportion to their
backlog; `minPartitions` splits large ranges.

What it must never do: read records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from .options import EARLIEST, LATEST, OffsetSpec, OptionError, ReadOptions
from .wire import KafkaWire, WireError

__all__ = ["TP", "OffsetsJson", "OffsetRange", "DataLossError", "subscribed_partitions", "resolve", "to_json",
           "from_json", "rate_limit", "plan_ranges"]

TP = tuple[str, int]
# Spark's Kafka offset form in the checkpoint: {"topic": {"0": 42}}.
OffsetsJson = dict[str, dict[str, int]]


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, deleted topic); raised only with failOnDataLoss=true."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def subscribed_partitions(wire: KafkaWire, opts: ReadOptions) -> list[TP]:
    """The partitions the query reads now (topics made later are picked up on a later call)."""
    if opts.subscribe is not None:
        wire.refresh(list(opts.subscribe))
        topics = {t: wire.partitions[t] for t in opts.subscribe if t in wire.partitions}
    elif opts.pattern is not None:
        wire.refresh(None)
        topics = {t: parts for t, parts in wire.partitions.items() if opts.topic_matches(t)}
    else:
        assert opts.assign is not None
        wire.refresh(list(opts.assign))
        missing = [f"{t}-{p}" for t, parts in opts.assign.items() for p in parts
                   if p not in wire.partitions.get(t, {})]
        if missing:
            raise OptionError(f"option 'assign' names partitions that do not exist: {', '.join(missing)}")
        return sorted((t, p) for t, parts in opts.assign.items() for p in parts)
    return sorted((t, p) for t, parts in topics.items() for p in parts)


def resolve(wire: KafkaWire, opts: ReadOptions, spec: OffsetSpec, tps: list[TP], *, name: str,
            start: bool) -> dict[TP, int]:
    """Concrete offsets for `spec` on `tps` (`name` is the option, for errors)."""
    if not tps:
        return {}
    if spec.kind in ("earliest", "latest"):
        value = EARLIEST if spec.kind == "earliest" else LATEST
        return {tp: off for tp, (off, _ts) in wire.list_offsets({tp: value for tp in tps}).items()}
    if spec.kind == "offsets":
        given = {(t, p): v for t, parts in spec.offsets.items() for p, v in parts.items()}
        _cover(name, given, tps)
        resolved = {tp: v for tp, v in given.items() if v >= 0}
        symbolic = {tp: v for tp, v in given.items() if v < 0}
        if symbolic:
            resolved.update({tp: off for tp, (off, _ts) in wire.list_offsets(symbolic).items()})
        return resolved
    if spec.kind == "timestamp":
        timestamp = spec.timestamp
        assert timestamp is not None, "an OffsetSpec of kind 'timestamp' carries its timestamp"
        stamps = {tp: timestamp for tp in tps}
    else:
        stamps = {(t, p): v for t, parts in spec.offsets.items() for p, v in parts.items()}
    if spec.kind == "timestamps":
        _cover(name, stamps, tps)
    found = wire.list_offsets({tp: int(v) for tp, v in stamps.items()})
    none_found = [tp for tp, (off, _ts) in found.items() if off < 0]
    if none_found:
        if start and opts.timestamp_strategy == "error":
            shown = ", ".join(f"{t}-{p}" for t, p in none_found[:5])
            raise OptionError(f"option {name!r}: no record of {shown} has a timestamp at or after the one given; "
                              "set startingOffsetsByTimestampStrategy=latest to start at the end instead")
        latest = wire.list_offsets({tp: LATEST for tp in none_found})
        found.update(latest)
    return {tp: off for tp, (off, _ts) in found.items()}


def _cover(name: str, given: Mapping[TP, int], tps: list[TP]) -> None:
    missing = sorted(set(tps) - set(given))
    extra = sorted(set(given) - set(tps))
    if missing or extra:
        parts = []
        if missing:
            parts.append("it does not give " + ", ".join(f"{t}-{p}" for t, p in missing[:10]))
        if extra:
            parts.append("it names partitions the query does not read: " + ", ".join(f"{t}-{p}" for t, p in extra[:10]))
        raise OptionError(f"option {name!r} must give every partition the query reads: {'; '.join(parts)}")


def to_json(offsets: Mapping[TP, int]) -> OffsetsJson:
    """Spark's Kafka offset form: {"topic": {"0": 42}} (what goes into the checkpoint)."""
    out: OffsetsJson = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(value: Mapping[str, Mapping[str, int]] | None) -> dict[TP, int]:
    return {(topic, int(p)): int(off) for topic, parts in (value or {}).items() for p, off in parts.items()}


def rate_limit(start: Mapping[TP, int], latest: Mapping[TP, int], limit: int) -> dict[TP, int]:
    """At most `limit` records over all partitions, shared in proportion to each one's backlog (Spark's rule)."""
    sizes = {tp: latest[tp] - start.get(tp, latest[tp]) for tp in latest}
    total = sum(s for s in sizes.values() if s > 0)
    if total <= limit:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        size = sizes[tp]
        if size <= 0:
            out[tp] = end
            continue
        share = limit * (size / total)
        out[tp] = min(end, begin + (math.ceil(share) if share < 1 else math.floor(share)))
    return out


def plan_ranges(wire: KafkaWire, opts: ReadOptions,
                start: Mapping[TP, int], end: Mapping[TP, int]) -> list[OffsetRange]:
    """The ranges to read between two offsets, checking for data lost meanwhile (failOnDataLoss)."""
    new = [tp for tp in end if tp not in start]
    lost = sorted(tp for tp in start if tp not in end)
    if lost and opts.fail_on_data_loss:
        raise DataLossError(f"partitions {', '.join(f'{t}-{p}' for t, p in lost)} are gone (topic deleted?); "
                            "set failOnDataLoss=false to carry on without them")
    earliest: dict[TP, int] = {}
    if end:
        try:
            earliest = {tp: off for tp, (off, _ts) in wire.list_offsets({tp: EARLIEST for tp in end}).items()}
        except WireError:
            if new:
                raise
    ranges = []
    for tp in sorted(end):
        begin = start.get(tp, earliest.get(tp, 0))
        stop = end[tp]
        first = earliest.get(tp, begin)
        if begin < first:
            if opts.fail_on_data_loss:
                raise DataLossError(f"offsets {begin}..{first - 1} of {tp[0]}-{tp[1]} were deleted (retention) "
                                    "before the query read them; set failOnDataLoss=false to skip them")
            begin = min(first, stop)
        if stop < begin:
            if opts.fail_on_data_loss:
                raise DataLossError(f"{tp[0]}-{tp[1]} ends at {stop}, before offset {begin} the query already "
                                    "read (the log was truncated); set failOnDataLoss=false to carry on")
            continue
        if stop > begin:
            ranges.append(OffsetRange(tp[0], tp[1], begin, stop))
    return _split(ranges, opts.min_partitions)


def _split(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Split the biggest ranges so that there are at least `min_partitions` Spark tasks."""
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        pieces = max(1, min(r.size, round(min_partitions * r.size / total)))
        step = r.size / pieces
        bounds = [r.start + round(i * step) for i in range(pieces)] + [r.end]
        out.extend(OffsetRange(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a)
    return out
