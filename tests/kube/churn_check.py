"""The churn suite's verdict: what acknowledged, consumed and stored records must satisfy after a case.

Why this exists: every churn case (rolls, scaling, kills, a stopped kubelet,
a lost volume) ends with the same question — did the cluster keep its
promise to acks=all idempotent producers and to the consumer group? This
module answers it from plain data, so the same checker judges every case
and its own tests can show it catches each kind of violation:

- every acknowledged record is in the log, at the partition and offset its
  acknowledgement named, with its value (else it is *lost*). An
  acknowledgement without an offset (confluent-kafka's delivery report can
  carry none: librdkafka's idempotent producer confirms the messages of a
  request whose answer it never got once a later request of the partition
  succeeds) requires the value in that partition instead;
- no produced value is stored twice (*duplicated*);
- per partition, each producer's records are stored in the order it sent
  them (*reordered*);
- everything the consumer group was served matches the final log at that
  offset — nothing it read was later truncated or rewritten (*divergent*,
  i.e. stale or uncommitted data was served);
- the group eventually consumed every acknowledged record (*unconsumed*);
- every replica of a partition holds byte-identical batches up to the high
  watermark (read from the replicas' segment files on the node's disk).

What it must never do: talk to a broker or to Kubernetes (callers collect
the data), forgive a violation, or pass when it was given nothing to check.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from kelp.records.header import iter_headers

__all__ = ["Acked", "Consumed", "Verdict", "value_for", "parse_value", "check_records", "read_replica_batches",
           "compare_replicas"]


def value_for(producer: str, seq: int) -> bytes:
    """The value a churn producer sends as its `seq`-th record: unique, and says who sent it in which order."""
    return f"{producer}:{seq:09d}".encode()


def parse_value(value: bytes | None) -> tuple[str, int] | None:
    """(producer, seq) of a churn value, or None for anything else."""
    if not value:
        return None
    producer, _, seq = value.decode(errors="replace").rpartition(":")
    return (producer, int(seq)) if producer and seq.isdigit() else None


@dataclass(frozen=True, slots=True)
class Acked:
    """A record the producer's delivery report confirmed (acks=all)."""

    partition: int
    offset: int | None  # None: confirmed without an offset (see the module's docstring)
    value: bytes


@dataclass(frozen=True, slots=True)
class Consumed:
    """A record the consumer group was served."""

    partition: int
    offset: int | None  # None: confirmed without an offset (see the module's docstring)
    value: bytes


@dataclass
class Verdict:
    acked: int = 0
    stored: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)
    divergent: list[str] = field(default_factory=list)
    unconsumed: list[str] = field(default_factory=list)
    replicas: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.acked > 0 and not (self.lost or self.duplicated or self.reordered or self.divergent
                                       or self.unconsumed or self.replicas)

    def failures(self, examples: int = 5) -> str:
        """One paragraph per violated promise, with a few examples each."""
        out = []
        if self.acked == 0:
            out.append("nothing was acknowledged: the case checked nothing")
        for name in ("lost", "duplicated", "reordered", "divergent", "unconsumed", "replicas"):
            items = getattr(self, name)
            if items:
                out.append(f"{name}: {len(items)}, e.g. " + "; ".join(items[:examples]))
        return "\n".join(out)


def check_records(*, acked: Sequence[Acked], log: Mapping[int, Sequence[tuple[int, bytes]]],
                  consumed: Iterable[Consumed]) -> Verdict:
    """Judge acknowledged and consumed records against the final log (`{partition: [(offset, value)]}`)."""
    v = Verdict(acked=len(acked))
    at: dict[tuple[int, int], bytes] = {}
    where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for p, records in log.items():
        for offset, value in records:
            at[(p, offset)] = value
            where[value].append((p, offset))
            v.stored += 1
    for a in acked:
        if a.offset is None:
            kept = any(p == a.partition for p, _ in where.get(a.value, ()))
        else:
            kept = at.get((a.partition, a.offset)) == a.value
        if not kept:
            elsewhere = where.get(a.value)
            found = f"stored at {elsewhere}" if elsewhere else "stored nowhere"
            v.lost.append(f"{a.value.decode(errors='replace')} acked at {a.partition}@{a.offset}, {found}")
    for value, places in where.items():
        if len(places) > 1:
            v.duplicated.append(f"{value.decode(errors='replace')} at {sorted(places)}")
    for p, records in log.items():
        last: dict[str, tuple[int, int]] = {}
        for offset, value in records:
            parsed = parse_value(value)
            if parsed is None:
                continue
            producer, seq = parsed
            before = last.get(producer)
            if before is not None and seq <= before[0]:
                v.reordered.append(f"partition {p}: {producer} seq {seq} at offset {offset} after seq "
                                   f"{before[0]} at offset {before[1]}")
            last[producer] = (seq, offset)
    served: set[bytes] = set()
    for c in consumed:
        served.add(c.value)
        stored = at.get((c.partition, c.offset))
        if stored != c.value:
            now = "nothing" if stored is None else stored.decode(errors="replace")
            v.divergent.append(f"{c.partition}@{c.offset} served {c.value.decode(errors='replace')}, "
                               f"the log now holds {now}")
    for a in acked:
        if a.value not in served:
            v.unconsumed.append(f"{a.value.decode(errors='replace')} ({a.partition}@{a.offset})")
    return v


def _segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"), key=lambda p: int(p.name.split(".", 1)[0]))


def read_replica_batches(directory: Path) -> list[tuple[int, int, bytes]]:
    """Every complete batch of one replica's partition directory, in offset order: (base, next offset, bytes).

    Segments are read whole and concatenated as one stream: replicas may roll
    segments at different offsets, but their batches must be the same bytes.
    """
    out: list[tuple[int, int, bytes]] = []
    for segment in _segments(directory):
        data = segment.read_bytes()
        for info in iter_headers(data):
            out.append((info.base_offset, info.next_offset, data[info.position:info.end]))
    return out


def compare_replicas(topic: str, partition: int, replicas: Mapping[int, Sequence[tuple[int, int, bytes]]],
                     *, high_watermark: int) -> list[str]:
    """What differs between the replicas' batches below the high watermark (empty: byte-identical).

    Each replica must hold batches from the same start up to at least the
    high watermark; every batch starting below it must be the same bytes on
    every replica.
    """
    if not replicas:
        return [f"{topic}-{partition}: no replica to compare"]
    problems = []
    committed = {b: [x for x in batches if x[0] < high_watermark] for b, batches in replicas.items()}
    for broker, batches in sorted(committed.items()):
        end = batches[-1][1] if batches else None
        if high_watermark > 0 and (end is None or end < high_watermark):
            problems.append(f"{topic}-{partition}: broker {broker} holds up to offset {end}, "
                            f"below the high watermark {high_watermark}")
    reference_broker, reference = min(committed.items())
    for broker, batches in sorted(committed.items()):
        if broker == reference_broker:
            continue
        if len(batches) != len(reference):
            problems.append(f"{topic}-{partition}: broker {broker} has {len(batches)} batch(es) below offset "
                            f"{high_watermark}, broker {reference_broker} {len(reference)}")
        for mine, theirs in zip(batches, reference, strict=False):
            if mine != theirs:
                what = ("different base offsets" if mine[0] != theirs[0] else "different bytes")
                problems.append(f"{topic}-{partition}: brokers {broker} and {reference_broker} differ at offset "
                                f"{min(mine[0], theirs[0])} ({what})")
                break
    return problems
