"""`kelp`: the console script (`kelp = kelp.cli.main:main`).

Why: one entry point whose subcommands each live in a module of this
package exposing `register(subparsers)`; adding a command is one line in
`COMMAND_MODULES`. Global options (`--http`, `--bootstrap`, `--json`,
`--connect-timeout`) go before or after the subcommand. Every `CliError`
becomes one line on stderr and exit code 1.

It must never hold subcommand logic itself.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .common import add_global_options
from .errors import CliError

__all__ = ["main", "build_parser", "COMMAND_MODULES"]

# Subcommand modules under kelp.cli, in `kelp --help` order.
COMMAND_MODULES: tuple[str, ...] = (
    "broker_cmd",
    "topics",
    "produce",
    "consume",
    "groups",
    "transactions",
    "partitions",
    "storage",
    "acls",
    "dev_cluster",
    "operator_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kelp", description="Kelp: a Kafka-compatible streaming platform.")
    add_global_options(parser)  # also accepted after the subcommand (common.py)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__package__}.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "broker":
        from .broker_cmd import run

        return run(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"kelp: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
