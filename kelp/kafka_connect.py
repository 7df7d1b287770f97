"""Apache Kafka Connect 4.3.1 — the distributed worker, the FileStream connectors and MirrorMaker 2 — fetched
once with Maven.

Why: Kelp promises that Kafka's ecosystem runs against it, Kafka Connect's exactly-once source support
(KIP-618: every source task's batch in a transaction, its offsets in the same one) and MirrorMaker 2
(KIP-382: records, checkpoints, offset syncs, translated group offsets) included; `tests/transactions`
runs them as `java -cp <jars> <main class> <properties file>`. The jars land in
`$KELP_CACHE_DIR/kafka-connect-4.3.1` (default `~/.cache/kelp`), beside `kelp.kafka_tools`' and the same
way (`kelp.kafka_tools.fetch_bundle`: a throwaway pom, a stamp once complete, offline after that);
`make test` runs `python -m kelp.kafka_connect` first, so tests never download. The artifacts:
`connect-runtime` (the worker, `ConnectDistributed`), `connect-file` (`FileStreamSourceConnector`),
`connect-mirror` and `connect-mirror-client` (`MirrorMaker`, the dedicated MirrorMaker 2 driver, and its
connectors), with log4j2 behind slf4j at WARN on stderr.

What it must never do: download at import time or from any repository but the one Maven is configured with.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from kelp.kafka_tools import bundle_classpath, cache_home, fetch_bundle, fetch_main

__all__ = ["CONNECT_VERSION", "CONNECT_DISTRIBUTED", "MIRROR_MAKER", "connect_home", "classpath", "java_command",
           "fetch", "main"]

CONNECT_VERSION = "4.3.1"
ARTIFACTS = ("connect-runtime", "connect-file", "connect-mirror", "connect-mirror-client")
CONNECT_DISTRIBUTED = "org.apache.kafka.connect.cli.ConnectDistributed"
MIRROR_MAKER = "org.apache.kafka.connect.mirror.MirrorMaker"


def connect_home(version: str = CONNECT_VERSION) -> Path:
    """`$KELP_CACHE_DIR/kafka-connect-<version>` (default `~/.cache/kelp/...`); jars under `libs/`."""
    return cache_home(f"kafka-connect-{version}")


def classpath(version: str = CONNECT_VERSION) -> str:
    """The jars as a `-cp` value; FileNotFoundError naming the fetch command when not fetched."""
    return bundle_classpath(connect_home(version), what=f"Kafka Connect {version} is",
                            fetch_hint="`python -m kelp.kafka_connect` (`make kafka-connect`)")


def java_command(main_class: str, *args: str, version: str = CONNECT_VERSION, heap_mb: int = 384) -> list[str]:
    """`java -cp <jars> <main class> args...` for a worker: a bounded heap, the serial collector, quiet logging."""
    config = connect_home(version) / "log4j2.properties"
    java = shutil.which("java") or "java"
    return [java, "-Xms64m", f"-Xmx{heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
            "-Xlog:disable", "-Xlog:all=warning:stderr", f"-Dlog4j2.configurationFile={config}",
            "-cp", classpath(version), main_class, *args]


def fetch(version: str = CONNECT_VERSION, *, quiet: bool = True) -> Path:
    """The libs directory, fetched with Maven unless a previous fetch completed (idempotent)."""
    return fetch_bundle(connect_home(version), ARTIFACTS, version, marker_jar=f"connect-mirror-{version}.jar",
                        what=f"Kafka Connect {version}", quiet=quiet)


def main() -> int:
    return fetch_main(fetch, "kelp.kafka_connect")


if __name__ == "__main__":
    sys.exit(main())
