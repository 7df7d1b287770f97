"""`KelpDataSource`: the `kelp` format — Spark's Kafka source and sink, as a Python data source.

Why: `spark.dataSource.register(KelpDataSource)` makes `format("kelp")`
read and write Kelp (or any Kafka-protocol broker) with no JVM jars beyond
pyspark's, taking the options and giving the schema of `format("kafka")`.
This class only checks options and picks the reader or writer; the work is
in `reader`, `writer`, `offsets`, `wire` and `codec`.

The schema is fixed, as Spark's Kafka source's is: a query that sets its own
gets an error instead of columns that quietly mean something else.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .options import OptionError, parse_read_options, parse_write_options

__all__ = ["KelpDataSource", "kafka_schema"]


def kafka_schema(include_headers: bool = False) -> StructType:
    """Spark's Kafka source schema (`headers` only with includeHeaders=true)."""
    fields = [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType(), True), StructField("value", BinaryType(), True)]), True), True))
    return StructType(fields)


class KelpDataSource(DataSource):
    """`format("kelp")`: batch and streaming reads and writes of Kafka-protocol topics."""

    @classmethod
    def name(cls) -> str:
        return "kelp"

    def _include_headers(self) -> bool:
        raw = str(dict(self.options).get("includeheaders", "false")).strip().lower()
        if raw not in ("true", "false"):
            raise OptionError(f"option 'includeHeaders' must be true or false, got {raw!r}")
        return raw == "true"

    def schema(self) -> StructType:
        return kafka_schema(self._include_headers())

    def _check_schema(self, schema: StructType) -> None:
        expected = kafka_schema(self._include_headers())
        if schema is not None and schema.simpleString() != expected.simpleString():
            raise OptionError("the kelp source has a fixed schema and cannot be read with a custom one: "
                              f"expected {expected.simpleString()}, got {schema.simpleString()}")

    def reader(self, schema: StructType):  # pyspark's own return type
        from .reader import KelpBatchReader

        self._check_schema(schema)
        return KelpBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType):
        from .reader import KelpStreamReader

        self._check_schema(schema)
        return KelpStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool):
        from .writer import KelpWriter, check_write_schema

        opts = parse_write_options(self.options)
        check_write_schema(schema, opts)
        return KelpWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .writer import KelpStreamWriter, check_write_schema

        opts = parse_write_options(self.options)
        check_write_schema(schema, opts)
        return KelpStreamWriter(opts)
