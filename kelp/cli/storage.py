"""`kelp storage format --add-scram ...`: seed a cluster's SCRAM users before its first start.

Why: Kafka's `kafka-storage format --add-scram 'SCRAM-SHA-512=[name=alice,password=alice-secret]'` writes the
first users into the bootstrap metadata, so a cluster whose listeners all authenticate can be reached at all.
Kelp's equivalent writes them as the first entry of the cluster's metadata log (`kelp.broker.cluster
.bootstrap`), found from the broker config the cluster will run with (`--config`, `KELP_*`, `--set`: the
file backend's `cluster.dir`, or the Kubernetes namespace). Arguments are Kafka's: `--add-scram` is repeatable
and takes `name=` with `password=` or `iterations=`/`salt=`/`saltedpassword=`; a store that already holds
metadata is refused (exit 1) unless `--ignore-formatted` says that is fine (exit 0, nothing written), as
Kafka's tool does. The command never prints a password.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from .errors import CliError

__all__ = ["register"]


def cmd_format(args: argparse.Namespace) -> int:
    from kelp.broker.cluster.bootstrap import AlreadyFormatted, describe_store, format_metadata, metadata_log_for
    from kelp.config.broker import BrokerConfig
    from kelp.errors import ConfigError
    from kelp.security.scram import ScramError, parse_add_scram

    overrides: dict[str, object] = {}
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value
    if args.log_dirs:
        overrides["log.dirs"] = args.log_dirs
    try:
        config = BrokerConfig.load(file=args.config or os.environ.get("KELP_CONFIG"), overrides=overrides)
        upsertions = [parse_add_scram(argument) for argument in args.add_scram or []]
    except (ConfigError, ScramError) as exc:
        raise CliError(str(exc)) from None
    if not upsertions:
        raise CliError("nothing to format: give --add-scram 'SCRAM-SHA-512=[name=alice,password=...]' (repeatable)")
    store = describe_store(config)

    async def run() -> None:
        log = metadata_log_for(config)
        try:
            await format_metadata(log, upsertions)
        finally:
            await log.close()

    try:
        asyncio.run(run())
    except AlreadyFormatted as exc:
        if args.ignore_formatted:
            print(f"{store} is already formatted ({exc}); nothing written (--ignore-formatted)")
            return 0
        raise CliError(f"{store}: {exc}. Change the users of a running cluster with kafka-configs --entity-type "
                       "users or PUT /admin/v1/users/{name}/scram-credentials; pass --ignore-formatted to accept "
                       "a formatted store") from None
    except (ScramError, ValueError, OSError) as exc:
        raise CliError(f"{store}: {exc}") from None
    users = ", ".join(f"{u.name} ({u.mechanism.mechanism_name}, {u.iterations} iterations)" for u in upsertions)
    print(f"formatted the metadata store of {store}: SCRAM credentials for {users}")
    return 0


def register(subparsers: Any) -> None:
    storage = subparsers.add_parser("storage", help="the cluster's metadata store (format it with its first users)")
    sub = storage.add_subparsers(dest="storage_command", metavar="COMMAND", required=True)
    fmt = sub.add_parser(
        "format", help="seed SCRAM users before the cluster's first start (kafka-storage format --add-scram)",
        description="Write the first SCRAM users into the metadata store the cluster will load. "
                    "Example: kelp storage format --config server.properties "
                    "--add-scram 'SCRAM-SHA-512=[name=admin,password=admin-secret]'")
    fmt.add_argument("--config", help="the brokers' config file (server.properties or YAML; env KELP_CONFIG)")
    fmt.add_argument("--log-dirs", help="log.dirs, where a broker without cluster.dir keeps its metadata")
    fmt.add_argument("--set", action="append", metavar="KEY=VALUE", help="any broker property, repeatable")
    fmt.add_argument("--add-scram", "-S", action="append", metavar="MECHANISM=[name=...,password=...]",
                     help="a SCRAM credential, as kafka-storage takes it; repeatable")
    fmt.add_argument("--ignore-formatted", "-g", action="store_true",
                     help="a store that already holds metadata is not an error (nothing is written)")
    fmt.set_defaults(func=cmd_format)
