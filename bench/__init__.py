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


def section_main(section: str, doc: str, argv: list[str] | None, *, add_arguments: Callable[[Any], None],
                 run_from_args: Callable[..., Any], report: Callable[[Any], None], kafka: bool = True,
                 workdir: bool = True, module: str | None = None) -> int:
    """`python -m bench.<section>` (or `python -m <module>`): the section's own options plus `--runs`, `--json`
    (and, with `kafka`, `--no-kafka`, `--kafka-version`); runs it in a temporary directory (with `workdir`) and
    prints it. A ValueError from the section (a bad option value) is its message and exit code 2."""
    import argparse
    import sys
    import tempfile
    from pathlib import Path

    module = module or f"bench.{section}"
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.splitlines()[0])
    add_arguments(p)
    p.add_argument("--runs", type=int, default=3, help="runs of every case per broker; medians are printed (3)")
    if kafka:
        from .kafka_ref import KAFKA_VERSION

        p.add_argument("--no-kafka", action="store_true", help="skip Apache Kafka as the reference broker")
        p.add_argument("--kafka-version", default=KAFKA_VERSION)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)
    kwargs: dict[str, Any] = {}
    if kafka:
        kwargs["kafka_version"] = None if args.no_kafka else args.kafka_version
    try:
        if workdir:
            with tempfile.TemporaryDirectory(prefix=f"kelp-bench-{section}-") as tmp:
                res = run_from_args(args, work=Path(tmp), **kwargs)
        else:
            res = run_from_args(args, **kwargs)
    except ValueError as exc:
        print(f"{module}: {exc}", file=sys.stderr)
        return 2
    if res is not None:
        emit(section, res, as_json=args.json, report=report)
    return 0
