"""Benchmarks that print Kelp's figures beside Apache Kafka's and this machine's limits, all from the same run.

`make bench` (= `python -m bench`) starts a Kelp broker and an Apache Kafka
KRaft node (its jars fetched once with Maven, see `kafka_ref.py`) as
separate processes, produces and consumes with confluent-kafka against each
in turn, and measures in the same run what the machine does without a
broker: sequential file writes (page cache, no fsync) and reading a file
over loopback TCP. `--no-kafka` leaves Kafka out.
"""

from typing import Any, Callable


def emit(section: str, result: Any, *, as_json: bool, report: Callable[[Any], None]) -> None:
    """Print one section's result: `{section: result}` as JSON, or its human report."""
    if as_json:
        import json

        print(json.dumps({section: result}, indent=2))
    else:
        report(result)
