"""The `kelp` sink: a DataFrame's rows produced to Kelp topics, per Arrow batch, as Spark's Kafka sink does.

Why: `df.write.format("kelp")` and `writeStream.format("kelp")` take the
columns Spark's Kafka sink takes — `value` (required), `key`, `topic` (or
the `topic` option, which wins), `partition`, `headers` — as string or
binary. Each Spark task holds one connection set and, per Arrow batch,
groups rows by partition (the row's `partition`, else Kafka's murmur2 of the
key, else one partition per batch as Kafka's sticky partitioner does) and
produces one RecordBatch per partition and ~`kafka.batch.size` bytes.
Delivery is at-least-once (acks=all by default, retried on leadership
changes), as with Spark's own sink.

What it must never do: acknowledge a task whose records the broker did not
acknowledge.
"""

from __future__ import annotations

import random
import time
from typing import Any, Iterator, TypedDict

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from kelp.partitioner import partition_for_key

from .codec import encode_batch
from .options import OptionError, WriteOptions
from .wire import KafkaWire, WireError

__all__ = ["KelpWriter", "KelpStreamWriter", "check_write_schema", "write_batches", "WriteCommit"]


class WriteCommit(WriterCommitMessage):
    def __init__(self, records: int) -> None:
        self.records = records


def check_write_schema(schema: StructType, opts: WriteOptions) -> None:
    """Spark's Kafka sink rules, checked on the driver before any task starts."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("the DataFrame written to kelp needs a 'value' column (string or binary)")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise OptionError(f"column {name!r} must be string or binary, not {fields[name].simpleString()}")
    if opts.topic is None:
        if "topic" not in fields:
            raise OptionError("the DataFrame written to kelp needs a 'topic' column or the 'topic' option")
        if not isinstance(fields["topic"], StringType):
            raise OptionError(f"column 'topic' must be a string, not {fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError(f"column 'partition' must be an int, not {fields['partition'].simpleString()}")
    if "headers" in fields:
        h = fields["headers"]
        ok = (isinstance(h, ArrayType) and isinstance(h.elementType, StructType)
              and [f.name for f in h.elementType.fields] == ["key", "value"]
              and isinstance(h.elementType.fields[0].dataType, StringType)
              and isinstance(h.elementType.fields[1].dataType, BinaryType))
        if not ok:
            raise OptionError("column 'headers' must be array<struct<key:string,value:binary>>, "
                              f"not {h.simpleString()}")


class _ArrowHeader(TypedDict):
    """One element of the `headers` column (array<struct<key:string,value:binary>>) as Arrow's to_pylist gives it."""

    key: str
    value: bytes | None


def _as_bytes(values: list[str | bytes | None]) -> list[bytes | None]:
    return [v.encode("utf-8") if isinstance(v, str) else v for v in values]


def write_batches(opts: WriteOptions, batches: Iterator[Any]) -> int:
    """Produce every row of the Arrow `batches`; returns how many records the broker acknowledged."""
    written = 0
    sticky: dict[str, int] = {}
    with KafkaWire(opts.bootstrap, timeout=opts.timeout_s,
                   client_id=opts.client.get("client.id", "kelp-spark"), properties=opts.client) as wire:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            names = {n.lower(): i for i, n in enumerate(batch.schema.names)}
            values = _as_bytes(batch.column(names["value"]).to_pylist())
            n = len(values)
            keys: list[bytes | None] = (
                _as_bytes(batch.column(names["key"]).to_pylist()) if "key" in names else [None] * n
            )
            headers = batch.column(names["headers"]).to_pylist() if "headers" in names else None
            if opts.topic is not None:
                topics = [opts.topic] * n
            else:
                topics = batch.column(names["topic"]).to_pylist()
            parts = batch.column(names["partition"]).to_pylist() if "partition" in names else [None] * n
            groups: dict[tuple[str, int], list[int]] = {}
            for i in range(n):
                topic = topics[i]
                if topic is None:
                    raise OptionError(f"row {i} of a batch has a null topic and no 'topic' option is set")
                count = _partition_count(wire, topic)
                p = parts[i]
                if p is None:
                    key = keys[i]
                    if key is not None:
                        p = partition_for_key(key, count)
                    else:
                        p = sticky.get(topic)
                        if p is None or p >= count:
                            p = sticky[topic] = random.randrange(count)
                elif not 0 <= p < count:
                    raise OptionError(f"row {i} asks for partition {p} of {topic!r}, which has {count}")
                groups.setdefault((topic, p), []).append(i)
            for topic in list(sticky):  # the next batch of keyless rows goes to the next partition
                sticky[topic] = (sticky[topic] + 1) % _partition_count(wire, topic)
            now = int(time.time() * 1000)
            for (topic, p), rows in groups.items():
                chunk: list[int] = []
                size = 0
                for i in rows:
                    chunk.append(i)
                    size += len(values[i] or b"") + len(keys[i] or b"") + 16
                    if size >= opts.batch_bytes:
                        written += _send(wire, opts, topic, p, chunk, keys, values, headers, now)
                        chunk, size = [], 0
                if chunk:
                    written += _send(wire, opts, topic, p, chunk, keys, values, headers, now)
    return written


def _partition_count(wire: KafkaWire, topic: str, *, wait_s: float = 10.0) -> int:
    """The topic's partition count; a missing topic is created if the broker auto-creates topics (as
    for Kafka's producer), waiting (bounded) until its partitions have leaders."""
    parts = wire.partitions.get(topic)
    if parts is not None:
        return len(parts)
    deadline = time.monotonic() + wait_s
    while True:
        wire.refresh([topic], auto_create=True)
        parts = wire.partitions.get(topic)
        if parts and all(p.leader >= 0 for p in parts.values()):
            return len(parts)
        if time.monotonic() > deadline:
            raise WireError(f"topic {topic!r} does not exist on {wire.bootstrap[0][0]}:{wire.bootstrap[0][1]} "
                            "and the broker did not create it (create it first, or enable auto.create.topics.enable)")
        time.sleep(0.1)


def _send(wire: KafkaWire, opts: WriteOptions, topic: str, partition: int, rows: list[int],
          keys: list[bytes | None], values: list[bytes | None], headers: list[list[_ArrowHeader] | None] | None,
          now: int) -> int:
    batch = encode_batch([keys[i] for i in rows], [values[i] for i in rows],
                         None if headers is None
                         else [[(h["key"], h["value"]) for h in (headers[i] or ())] for i in rows],
                         compression=opts.compression, timestamp_ms=now)
    wire.produce(topic, partition, batch, acks=opts.acks, timeout_ms=int(opts.timeout_s * 1000))
    return len(rows)


class KelpWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> WriteCommit:
        return WriteCommit(write_batches(self.opts, iterator))


class KelpStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> WriteCommit:
        return WriteCommit(write_batches(self.opts, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task produced with acks before it returned: nothing is left to commit."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records already produced stay (at-least-once, as Spark's Kafka sink)."""
