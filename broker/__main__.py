"""`python -m kelp.broker [flags]`: run one broker until SIGTERM/SIGINT.

Why: the process entry point used by `make run`, the CLI's `kelp broker`
(which calls `main(argv)`), the container image and the test fixture. Flags
override `KELP_*` environment variables, which override the config file (YAML or Java properties).
On start it prints one JSON line `{"event": "listening", "kafka": ..., "http": ...}`
to stdout so scripts and tests can wait for readiness.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from kelp.lazy_packages import defer_init

# Before anything imports them: these packages' __init__ load modules a broker never uses (lazy_packages.py).
for _package in ("kafka", "prometheus_client", "crc32c"):
    defer_init(_package)

from kelp.config.broker import BrokerConfig  # noqa: E402  (after defer_init)
from kelp.errors import ConfigError  # noqa: E402

from .app import Broker  # noqa: E402
from .cluster.rack import RackLookupError  # noqa: E402

__all__ = ["main", "build_parser"]


def build_parser(prog: str = "kelp broker") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Run a Kelp broker (Kafka protocol + HTTP API).")
    p.add_argument("--config",
                   help="broker properties file, YAML or Java properties (server.properties) (env KELP_CONFIG)")
    p.add_argument("--log-dirs", help="comma-separated data directories (log.dirs)")
    p.add_argument("--port", type=int, help="Kafka listener port, 0 = ephemeral (port)")
    p.add_argument("--host", help="address to bind (host), default 127.0.0.1")
    p.add_argument("--http-port", type=int, help="HTTP listener port, 0 = ephemeral (http.port)")
    p.add_argument("--broker-id", type=int, help="broker.id")
    p.add_argument("--advertised-host", help="host name given to clients in Metadata (advertised.host)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any broker property, repeatable, e.g. --set num.partitions=3")
    p.add_argument("--log-level", default=os.environ.get("KELP_LOG_LEVEL", "INFO"), help="logging level (INFO)")
    return p


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    overrides: dict[str, object] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value
    for flag, key in (("log_dirs", "log.dirs"), ("port", "port"), ("host", "host"),
                      ("http_port", "http.port"), ("broker_id", "broker.id"),
                      ("advertised_host", "advertised.host")):
        value = getattr(args, flag)
        if value is not None:
            overrides[key] = value
    return BrokerConfig.load(file=args.config or os.environ.get("KELP_CONFIG"), overrides=overrides)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"kelp broker: configuration error: {exc}", file=sys.stderr)
        return 2
    broker = Broker(config)
    try:
        broker.run()
    except ConfigError as exc:
        print(f"kelp broker: configuration error: {exc}", file=sys.stderr)
        return 2
    except (OSError, RackLookupError) as exc:
        print(f"kelp broker: cannot start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
