"""Spark's own Kafka connector jars: fetched once with Maven into `~/.cache/kelp/spark-jars`.

Why: `spark.readStream.format("kafka")` is not part of pyspark; its connector
and the Java Kafka client come from Maven Central. `make test` and
`make spark-demo` run `python -m kelp.spark.jars` before anything starts
Spark, so tests never download; `connector_jars()` hands the cached paths to
`spark.jars` (or `spark-submit --jars`).

The versions: the connector for pyspark 4.3.0 is not published yet, and 4.2.0
with the token provider 4.0.0 runs on it unchanged (the connector's classes
did not change shape between them). Each jar is fetched non-transitively:
pyspark already ships the rest (slf4j, lz4, snappy, zstd, Apache Avro).

`avro_jars()`: Spark's Avro module (`spark-avro`, 4.2.0 for the same reason),
which `from_avro` / `to_avro` need: with it, Confluent-framed Avro values
(a topic written by a Schema Registry serializer) decode in Spark
(docs/spark-avro.md). `fetch` gets it too.

What it must never do: download at import time or from any repository but
the one Maven is configured with (its default).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kelp.maven import DEPENDENCY_PLUGIN, mvn_binary

__all__ = ["CONNECTOR_ARTIFACTS", "AVRO_ARTIFACTS", "jar_dir", "connector_jars", "avro_jars", "fetch", "main"]

CONNECTOR_ARTIFACTS = (
    "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0",
    "org.apache.spark:spark-token-provider-kafka-0-10_2.13:4.0.0",
    "org.apache.kafka:kafka-clients:3.9.2",
    "org.apache.commons:commons-pool2:2.13.1",
)
AVRO_ARTIFACTS = ("org.apache.spark:spark-avro_2.13:4.2.0",)


def jar_dir() -> Path:
    """Where the jars live: `$KELP_CACHE_DIR/spark-jars` (default `~/.cache/kelp/spark-jars`)."""
    base = os.environ.get("KELP_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kelp")
    return Path(base) / "spark-jars"


def _file_name(coordinate: str) -> str:
    _group, artifact, version = coordinate.split(":")
    return f"{artifact}-{version}.jar"


def _cached(coordinates: tuple[str, ...], what: str) -> list[Path]:
    directory = jar_dir()
    paths = [directory / _file_name(c) for c in coordinates]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{what} jars are missing from {directory}: {', '.join(missing)}; "
            "fetch them with `python -m kelp.spark.jars` (`make spark-jars`)")
    return paths


def connector_jars() -> list[Path]:
    """The four jars' paths; FileNotFoundError naming the fetch command when any is missing."""
    return _cached(CONNECTOR_ARTIFACTS, "Spark's Kafka connector")


def avro_jars() -> list[Path]:
    """spark-avro's path (`from_avro`, `to_avro`); FileNotFoundError naming the fetch command when missing."""
    return _cached(AVRO_ARTIFACTS, "Spark's Avro module (spark-avro)")


def fetch(*, quiet: bool = True) -> list[Path]:
    """Fetch whatever is missing with `mvn dependency:copy` (idempotent), then return the paths."""
    directory = jar_dir()
    directory.mkdir(parents=True, exist_ok=True)
    for coordinate in (*CONNECTOR_ARTIFACTS, *AVRO_ARTIFACTS):
        if (directory / _file_name(coordinate)).is_file():
            continue
        mvn = mvn_binary("Spark's Kafka connector jars")
        command = [mvn, "-B", *(["-q"] if quiet else []), f"{DEPENDENCY_PLUGIN}:copy",
                   f"-Dartifact={coordinate}", f"-DoutputDirectory={directory}", "-Dmdep.overWriteIfNewer=false"]
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"fetching {coordinate} with Maven failed (exit {done.returncode}):\n"
                               f"{done.stdout[-2000:]}")
    return [*connector_jars(), *avro_jars()]


def main() -> int:
    try:
        paths = fetch()
    except (FileNotFoundError, RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"kelp.spark.jars: {exc}", file=sys.stderr)
        return 1
    print(",".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
