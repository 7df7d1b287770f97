"""Options shared by several subcommands (`--http`, `--bootstrap`, `--json`, `--connect-timeout`), KEY=VALUE
parsing, and the one bounded reachability check every command makes before it talks to a broker.

Global options are accepted before and after the subcommand (`kelp --http URL topics list` and
`kelp topics list --http URL`): `add_global_options` puts them on the top-level parser with their
defaults, and the subcommands' parent parsers (`http_options()`, ...) repeat them with SUPPRESS
defaults, so a value given after the subcommand wins and an absent one does not reset the other.

`wait_reachable` is why an unreachable broker fails in seconds with the address named, the same for
`produce`/`consume` (Kafka listener) and `topics`/`groups`/`partitions` (HTTP API), instead of a
client library's 30 s of silent retries.

This module must never speak a broker protocol: it only opens (and closes) TCP connections.
"""

from __future__ import annotations

import argparse
import os
import socket
import time

from .errors import CliError
from .http_client import default_http_url

__all__ = [
    "add_global_options", "http_options", "bootstrap_options", "json_option", "parse_pairs",
    "default_bootstrap", "wait_reachable", "split_address", "check_bootstrap", "CONNECT_TIMEOUT_S",
]

DEFAULT_BOOTSTRAP = "localhost:9092"
CONNECT_TIMEOUT_S = 5.0  # how long every command retries connecting before it gives up
_RETRY_EVERY_S = 0.25


def default_bootstrap() -> str:
    return os.environ.get("KELP_BOOTSTRAP") or DEFAULT_BOOTSTRAP


def _add_http(p: argparse.ArgumentParser, default: object) -> None:
    p.add_argument("--http", default=default, metavar="URL",
                   help=f"broker HTTP API (env KELP_HTTP, default {default_http_url()})")


def _add_bootstrap(p: argparse.ArgumentParser, default: object) -> None:
    p.add_argument("--bootstrap", "-b", default=default, metavar="HOST:PORT",
                   help="Kafka bootstrap servers (env KELP_BOOTSTRAP, default localhost:9092)")


def _add_json(p: argparse.ArgumentParser, default: object) -> None:
    p.add_argument("--json", action="store_true", default=default, help="print JSON for scripts instead of a table")


def _add_connect_timeout(p: argparse.ArgumentParser, default: object) -> None:
    p.add_argument("--connect-timeout", type=float, default=default, metavar="SECONDS",
                   help=f"give up when the broker cannot be reached for this long ({CONNECT_TIMEOUT_S:g})")


def add_global_options(parser: argparse.ArgumentParser) -> None:
    """The options every command accepts before its name, with their real defaults."""
    _add_http(parser, None)
    _add_bootstrap(parser, None)
    _add_json(parser, False)
    _add_connect_timeout(parser, CONNECT_TIMEOUT_S)


def _parent(*adders) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    for add in adders:
        add(p, argparse.SUPPRESS)  # absent after the subcommand: keep what was given before it
    return p


def http_options() -> argparse.ArgumentParser:
    return _parent(_add_http, _add_connect_timeout)


def bootstrap_options() -> argparse.ArgumentParser:
    return _parent(_add_bootstrap, _add_connect_timeout)


def json_option() -> argparse.ArgumentParser:
    return _parent(_add_json)


def parse_pairs(items: list[str] | None, *, option: str) -> dict[str, str]:
    """`["k=v", ...]` -> dict; a missing '=' or empty key is an error naming the item."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"{option} expects KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def split_address(address: str, *, default_port: int) -> tuple[str, int]:
    """`host:port`, `[v6]:port` or `host` -> (host, port); a bad port is a CliError naming the address."""
    address = address.strip()
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif address.count(":") == 1:
        host, _, port_text = address.partition(":")
    else:
        host, port_text = address, ""
    try:
        port = int(port_text) if port_text else default_port
    except ValueError:
        raise CliError(f"bad address {address!r}: the port must be a number") from None
    return host or "localhost", port


def wait_reachable(addresses: list[tuple[str, int]], *, what: str, hint: str, timeout_s: float,
                   shown: str | None = None) -> None:
    """Return once one of `addresses` accepts a TCP connection; retry for at most `timeout_s`.

    Raises CliError naming every address, the last failure and how to point the command elsewhere.
    """
    deadline = time.monotonic() + max(timeout_s, 0.0)
    last: dict[str, str] = {}
    while True:
        for host, port in addresses:
            remaining = max(deadline - time.monotonic(), 0.05)
            try:
                with socket.create_connection((host, port), timeout=min(remaining, 2.0)):
                    return
            except OSError as exc:
                last[f"{host}:{port}"] = exc.strerror or str(exc) or type(exc).__name__
        if time.monotonic() + _RETRY_EVERY_S > deadline:
            break
        time.sleep(_RETRY_EVERY_S)
    if len(last) == 1:
        reasons = next(iter(last.values()))
    else:
        reasons = "; ".join(f"{addr}: {why}" for addr, why in last.items())
    raise CliError(f"cannot reach {what} at {shown or ', '.join(last)} ({reasons}; gave up after "
                   f"{timeout_s:g} s; {hint})")


def check_bootstrap(args: argparse.Namespace) -> str:
    """The bootstrap list of `args`, once one of its brokers is reachable (the Kafka commands' first step)."""
    bootstrap = getattr(args, "bootstrap", None) or default_bootstrap()
    addresses = [split_address(a, default_port=9092) for a in bootstrap.split(",") if a.strip()]
    if not addresses:
        raise CliError("--bootstrap is empty")
    wait_reachable(addresses, what="Kafka", hint="set --bootstrap or KELP_BOOTSTRAP",
                   timeout_s=getattr(args, "connect_timeout", CONNECT_TIMEOUT_S))
    return bootstrap
