"""Options shared by several subcommands (`--http`, `--bootstrap`, `--json`, KEY=VALUE parsing).

This module must never talk to a broker.
"""

from __future__ import annotations

import argparse
import os

from .errors import CliError
from .http_client import default_http_url

__all__ = ["http_options", "bootstrap_options", "json_option", "parse_pairs", "default_bootstrap"]

DEFAULT_BOOTSTRAP = "localhost:9092"


def default_bootstrap() -> str:
    return os.environ.get("KELP_BOOTSTRAP") or DEFAULT_BOOTSTRAP


def http_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--http", default=None, metavar="URL",
                   help=f"broker HTTP API (env KELP_HTTP, default {default_http_url()})")
    return p


def bootstrap_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--bootstrap", "-b", default=None, metavar="HOST:PORT",
                   help="Kafka bootstrap servers (env KELP_BOOTSTRAP, default localhost:9092)")
    return p


def json_option() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")
    return p


def parse_pairs(items: list[str] | None, *, option: str) -> dict[str, str]:
    """`["k=v", ...]` -> dict; a missing '=' or empty key is an error naming the item."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"{option} expects KEY=VALUE, got {item!r}")
        out[key] = value
    return out
