"""Spark finds Python data sources in top-level modules named `pyspark_*` that define `DefaultSource`.

Why this file sits at the top of the distribution: with Kelp installed,
`spark.read.format("kelp")` works without `spark.dataSource.register(...)`,
as a built-in format would; `kelp.spark` is where the source lives.
"""

from kelp.spark.source import KelpDataSource as DefaultSource

__all__ = ["DefaultSource"]
