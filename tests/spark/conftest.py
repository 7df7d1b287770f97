"""Tier 5, Spark: one local[2] SparkSession for the whole tier, with Spark's own Kafka connector on it.

Why one session: starting the JVM costs seconds; every test reads and writes
through the same session, each against its own broker process and topics.
The connector's jars and spark-avro come from the cache `make test` filled
(`python -m kelp.spark.jars`); without them the tier fails with the command
to run, it never downloads.

The driver JVM (in local mode the executors too) runs with C1 only and the
serial collector, as the Kafka tools' JVMs do (`kelp.kafka_tools`): the
tests' queries are small, and C2's compiler threads and G1's parallel ones
had doubled its CPU — a session start 12-13 CPU-s against 6, a few small
queries 10 against 5.5 (on the 2-core `make test` machine, CPU the other
worker wanted).

Workers run the venv's interpreter (`PYSPARK_PYTHON`), Spark binds to
loopback only (`SPARK_LOCAL_IP`), and the `kelp` data source is registered
on the session, as a pipeline registers it.
"""

from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest

# Not what any test measures: the JVM's own start-up and compile work (see the module docstring).
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


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
               .config("spark.driver.extraJavaOptions", DRIVER_JAVA_OPTIONS)
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
