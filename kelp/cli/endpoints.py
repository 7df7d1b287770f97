"""Where the CLI finds a broker: the default addresses, address parsing, and the one bounded reachability
check every command makes before it talks to a broker.

Why a module of its own: the option definitions (common.py) need the default addresses for their help,
and the HTTP client (http_client.py) needs the reachability check; both import this, it imports neither,
so neither imports the other.

`wait_reachable` is why an unreachable broker fails in seconds with the address named, the same for
`produce`/`consume` (Kafka listener) and `topics`/`groups`/`partitions` (HTTP API), instead of a
client library's 30 s of silent retries.

This module must never speak a broker protocol: it only opens (and closes) TCP connections.
"""

from __future__ import annotations

import os
import socket
import time

from .errors import CliError

__all__ = [
    "DEFAULT_HTTP", "DEFAULT_BOOTSTRAP", "CONNECT_TIMEOUT_S", "default_http_url", "default_bootstrap",
    "split_address", "wait_reachable",
]

DEFAULT_HTTP = "http://localhost:8080"
DEFAULT_BOOTSTRAP = "localhost:9092"
CONNECT_TIMEOUT_S = 5.0  # how long every command retries connecting before it gives up
_RETRY_EVERY_S = 0.25


def default_http_url() -> str:
    return os.environ.get("KELP_HTTP") or DEFAULT_HTTP


def default_bootstrap() -> str:
    return os.environ.get("KELP_BOOTSTRAP") or DEFAULT_BOOTSTRAP


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
