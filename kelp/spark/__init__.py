"""`kelp.spark`: Kelp topics as a PySpark data source named `kelp`, with the options and schema of Spark's Kafka source.

Why: the user's pipelines run on Spark. `spark.dataSource.register(KelpDataSource)`
and then `spark.read.format("kelp")` / `readStream.format("kelp")` /
`write.format("kelp")` take the same options and give the same columns as
`format("kafka")`, with no JVM jars beyond pyspark's own, so a pipeline
switches between the two by changing one word. `kelp.spark.jars` fetches
the jars `format("kafka")` needs.

Importing this package does not import pyspark; `KelpDataSource` does.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KelpDataSource"]


def __getattr__(name: str) -> Any:
    if name == "KelpDataSource":
        from .source import KelpDataSource

        return KelpDataSource
    raise AttributeError(name)
