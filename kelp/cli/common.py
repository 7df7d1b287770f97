"""Options shared by several subcommands (`--http`, `--bootstrap`, `--json`, `--connect-timeout`, and the client
properties of client_config.py: `--command-config`, `--sasl-username`, ...), KEY=VALUE
parsing, and `check_bootstrap`, the Kafka commands' first step (the reachability check itself, the default
addresses and address parsing are endpoints.py's, which the HTTP client shares).

Global options are accepted before and after the subcommand (`kelp --http URL topics list` and
`kelp topics list --http URL`): `add_global_options` puts them on the top-level parser with their
defaults, and the subcommands' parent parsers (`http_options()`, ...) repeat them with SUPPRESS
defaults, so a value given after the subcommand wins and an absent one does not reset the other.

This module must never speak a broker protocol.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from .client_config import add_security_options
from .endpoints import CONNECT_TIMEOUT_S, default_bootstrap, default_http_url, split_address, wait_reachable
from .errors import CliError

__all__ = [
    "add_global_options", "http_options", "bootstrap_options", "json_option", "parse_pairs",
    "default_bootstrap", "wait_reachable", "split_address", "check_bootstrap", "CONNECT_TIMEOUT_S",
]

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
    add_security_options(parser, None)


def _parent(*adders: Callable[[argparse.ArgumentParser, object], None]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    for add in adders:
        add(p, argparse.SUPPRESS)  # absent after the subcommand: keep what was given before it
    return p


def http_options() -> argparse.ArgumentParser:
    return _parent(_add_http, _add_connect_timeout, add_security_options)


def bootstrap_options() -> argparse.ArgumentParser:
    return _parent(_add_bootstrap, _add_connect_timeout, add_security_options)


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


def check_bootstrap(args: argparse.Namespace) -> str:
    """The bootstrap list of `args`, once one of its brokers is reachable (the Kafka commands' first step)."""
    bootstrap = getattr(args, "bootstrap", None) or default_bootstrap()
    addresses = [split_address(a, default_port=9092) for a in bootstrap.split(",") if a.strip()]
    if not addresses:
        raise CliError("--bootstrap is empty")
    wait_reachable(addresses, what="Kafka", hint="set --bootstrap or KELP_BOOTSTRAP",
                   timeout_s=getattr(args, "connect_timeout", CONNECT_TIMEOUT_S))
    return bootstrap
