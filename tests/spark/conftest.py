"""Tier 5, Spark: one local[2] SparkSession for the whole tier, with Spark's own Kafka connector on it.

Why one session: starting the JVM costs seconds; every test reads and writes
through the same session, each against its own broker process and topics.
The connector's jars and spark-avro come from the cache `make test` filled
(`python -m kelp.spark.jars`); without them the tier fails with the command
to run, it never downloads.

Workers run the venv's interpreter (`PYSPARK_PYTHON`), Spark binds to
loopback only (`SPARK_LOCAL_IP`), and the `kelp` data source is registered
on the session, as a pipeline registers it.
"""

from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator["object"]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from kelp.spark import KelpDataSource
    from kelp.spark.jars import avro_jars, connector_jars

    jars = ",".join(str(p) for p in [*connector_jars(), *avro_jars()])  # spark-avro: test_confluent_avro.py
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (SparkSession.builder.master("local[2]").appName("kelp-tests")
               .config("spark.jars", jars)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.warehouse.dir", str(warehouse))
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("WARN")
    session.dataSource.register(KelpDataSource)
    try:
        yield session
    finally:
        session.stop()
