"""The `kelp` source's batch and streaming readers: plan on the driver, read offset ranges into Arrow on executors.

Why: Spark calls `partitions()` on the driver and `read()` in Python workers;
each task reads one `OffsetRange` of one partition through `KafkaWire` and
yields one Arrow record batch per fetch (never a Python object per row), in
the output schema of Spark's Kafka source. The streaming reader's offsets
are Spark's Kafka offsets JSON, so the checkpoint holds exactly what the
next micro-batch starts from; `maxOffsetsPerTrigger`, `minOffsetsPerTrigger`
with `maxTriggerDelay`, `Trigger.AvailableNow` and partitions that appear
mid-query behave as in Spark's Kafka source; so does
`kafka.isolation.level=read_committed`: "latest" is the last stable offset,
so ranges end below open transactions, and aborted records are left out.

What it must never do: read past the range it was given, or skip offsets it
was asked for without failOnDataLoss=false.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Iterator

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from .codec import AbortedFilter, Columns, decode_columns
from .offsets import (
    TP,
    DataLossError,
    OffsetRange,
    OffsetsJson,
    from_json,
    plan_ranges,
    rate_limit,
    resolve,
    subscribed_partitions,
    to_json,
)
from .options import LATEST, ReadOptions
from .wire import KafkaWire, OffsetOutOfRange

__all__ = ["KelpBatchReader", "KelpStreamReader", "RangePartition", "read_range", "arrow_schema"]

log = logging.getLogger("kelp.spark")


class RangePartition(InputPartition):
    """One Spark task: records [start, end) of one Kafka partition.

    Only `value` travels to the executor (Spark may hand `read` a plain
    InputPartition holding it), so the range is rebuilt from it there.
    """

    def __init__(self, r: OffsetRange) -> None:
        super().__init__((r.topic, r.partition, r.start, r.end))


def _range(partition: InputPartition) -> OffsetRange | None:
    """The range a task reads; None for the one empty partition Spark plans when `partitions()` gave none."""
    return None if partition.value is None else OffsetRange(*partition.value)


def arrow_schema(include_headers: bool) -> Any:
    import pyarrow as pa

    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
              pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
              pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.struct([pa.field("key", pa.string()),
                                                             pa.field("value", pa.binary())]))))
    return pa.schema(fields)


def _to_arrow(cols: Columns, r: OffsetRange, schema: Any) -> Any:
    import pyarrow as pa

    n = len(cols)
    arrays = [
        pa.array(cols.keys, pa.binary()),
        pa.array(cols.values, pa.binary()),
        pa.array([r.topic] * n, pa.string()),
        pa.array([r.partition] * n, pa.int32()),
        pa.array(cols.offsets, pa.int64()),
        pa.array([t * 1000 for t in cols.timestamps], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array(cols.timestamp_types, pa.int32()),
    ]
    if cols.headers is not None:
        # no headers is null, not an empty list, as in Spark's Kafka source
        arrays.append(pa.array([[{"key": k, "value": v} for k, v in h] if h else None for h in cols.headers],
                               schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_range(opts: ReadOptions, r: OffsetRange | None) -> Iterator[Any]:
    """Arrow record batches holding every record of `r` (checked against data loss)."""
    if r is None:
        return
    schema = arrow_schema(opts.include_headers)
    offset = r.start
    with _wire(opts) as wire:
        while offset < r.end:
            try:
                fetched = wire.fetch(r.topic, r.partition, offset, max_bytes=opts.fetch_max_bytes)
            except OffsetOutOfRange:
                (first, _ts), = wire.list_offsets({(r.topic, r.partition): -2}).values()
                if offset >= first:  # out of range above the log end: the log was truncated below r.end
                    if opts.fail_on_data_loss:
                        raise DataLossError(f"{r.topic}-{r.partition} no longer holds offset {offset} "
                                            f"(it was planned up to {r.end}); set failOnDataLoss=false "
                                            "to carry on") from None
                    return
                if opts.fail_on_data_loss:
                    raise DataLossError(f"offsets {offset}..{first - 1} of {r.topic}-{r.partition} were deleted "
                                        "(retention) before the query read them; set failOnDataLoss=false to "
                                        "skip them") from None
                log.warning("skipping offsets %d..%d of %s-%d: deleted before they were read",
                            offset, first - 1, r.topic, r.partition)
                offset = first
                continue
            cols, next_offset = decode_columns(fetched.records, offset, r.end, include_headers=opts.include_headers,
                                               aborted=AbortedFilter(fetched.aborted) if opts.read_committed
                                               else None)
            if next_offset <= offset:
                if (fetched.last_stable_offset if opts.read_committed else fetched.high_watermark) <= offset:
                    if opts.fail_on_data_loss:
                        raise DataLossError(f"{r.topic}-{r.partition} ends at {fetched.high_watermark}, below "
                                            f"offset {offset} the query planned to read up to {r.end}")
                    return
                raise RuntimeError(f"fetching {r.topic}-{r.partition} at {offset} returned no complete batch "
                                   f"within {opts.fetch_max_bytes} bytes (raise kafka.max.partition.fetch.bytes)")
            if len(cols):
                yield _to_arrow(cols, r, schema)
            offset = next_offset


def _wire(opts: ReadOptions) -> KafkaWire:
    return KafkaWire(opts.bootstrap, timeout=opts.timeout_s, client_id=opts.client.get("client.id", "kelp-spark"),
                     properties=opts.client, read_committed=opts.read_committed)


class KelpBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[RangePartition]:
        with _wire(self.opts) as wire:
            tps = subscribed_partitions(wire, self.opts)
            start = resolve(wire, self.opts, self.opts.starting, tps, name="startingOffsets", start=True)
            end = resolve(wire, self.opts, self.opts.ending, tps, name="endingOffsets", start=False)
            for tp in tps:
                if start[tp] > end[tp]:
                    raise ValueError(f"{tp[0]}-{tp[1]}: the starting offset {start[tp]} is after the ending "
                                     f"offset {end[tp]}")
            ranges = plan_ranges(wire, self.opts, start, end)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_range(self.opts, _range(partition))


class KelpStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._target: dict[TP, int] | None = None  # Trigger.AvailableNow: never read past this
        self._latest: dict[TP, int] | None = None
        self._last_trigger = time.monotonic()

    def initialOffset(self) -> OffsetsJson:
        with _wire(self.opts) as wire:
            tps = subscribed_partitions(wire, self.opts)
            return to_json(resolve(wire, self.opts, self.opts.starting, tps, name="startingOffsets", start=True))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with _wire(self.opts) as wire:
            self._target = self._latest_offsets(wire)

    def _latest_offsets(self, wire: KafkaWire) -> dict[TP, int]:
        tps = subscribed_partitions(wire, self.opts)
        return {tp: off for tp, (off, _ts) in wire.list_offsets({tp: LATEST for tp in tps}).items()} if tps else {}

    def latestOffset(self, start: OffsetsJson, limit: ReadLimit) -> OffsetsJson:
        begin = from_json(start)
        with _wire(self.opts) as wire:
            latest = self._latest_offsets(wire) if self._target is None else dict(self._target)
            self._latest = latest
            new = [tp for tp in latest if tp not in begin]
            if new:  # partitions that appeared mid-query are read from their earliest offset
                begin.update({tp: off for tp, (off, _ts) in wire.list_offsets({tp: -2 for tp in new}).items()})
        backlog = sum(max(0, off - begin.get(tp, off)) for tp, off in latest.items())
        minimum = (limit.min_rows if isinstance(limit, ReadMinRows)
                   else None if isinstance(limit, ReadAllAvailable) else self.opts.min_offsets_per_trigger)
        if minimum is not None:
            waited_ms = (time.monotonic() - self._last_trigger) * 1000
            if backlog < minimum and waited_ms < self.opts.max_trigger_delay_ms and self._target is None:
                return start
        end = latest
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, latest, limit.max_rows)
        if backlog:
            self._last_trigger = time.monotonic()
        return to_json(end)

    def reportLatestOffset(self) -> OffsetsJson | None:
        return None if self._latest is None else to_json(self._latest)

    def partitions(self, start: OffsetsJson, end: OffsetsJson) -> list[RangePartition]:
        with _wire(self.opts) as wire:
            ranges = plan_ranges(wire, self.opts, from_json(start), from_json(end))
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_range(self.opts, _range(partition))

    def commit(self, end: OffsetsJson) -> None:
        """Offsets live in Spark's checkpoint; nothing is committed to the broker (as Spark's Kafka source)."""
