"""The broker process's event loop: asyncio's own, or uvloop's, as `event.loop` says.

Why a module of its own: `Broker.run` makes the loop; which one is a broker setting (asyncio, uvloop or auto),
and uvloop is an optional dependency (the `uvloop` extra), so the choice, the import and the error when the
package is missing live here, in one place, instead of in the composition root. uvloop is a drop-in loop
(libuv underneath, its own TLS transport on `SSLObject`); every loop API the broker uses (`sendfile`,
`start_tls`, signal handlers, `run_in_executor`/`to_thread`, `getaddrinfo`, aiohttp's server) is asyncio's
interface, so nothing else in the broker knows which loop it runs on. `loop_name` says which one a running loop
is (the ready line carries it, and the tests check it). Which is the default is
decided by bench/event_loop.py's figures (docs/performance.md, "Event loops").

This module must never import uvloop unless it was asked for (or `auto` found it installed).
"""

from __future__ import annotations

import asyncio
import importlib.util

from kelp.errors import ConfigError

__all__ = ["resolve", "new_event_loop", "loop_name"]


def uvloop_installed() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def resolve(choice: str) -> str:
    """`asyncio` or `uvloop` for a `event.loop` value; ConfigError when uvloop is asked for and missing."""
    if choice == "auto":
        return "uvloop" if uvloop_installed() else "asyncio"
    if choice == "uvloop" and not uvloop_installed():
        raise ConfigError("event.loop=uvloop: uvloop is not installed (pip install 'kelp[uvloop]'), "
                          "or set event.loop=asyncio or auto")
    if choice not in ("asyncio", "uvloop"):
        raise ConfigError(f"event.loop: expected asyncio, uvloop or auto, got {choice!r}")
    return choice


def new_event_loop(choice: str) -> asyncio.AbstractEventLoop:
    """A new loop of the kind `choice` (a `event.loop` value) resolves to."""
    if resolve(choice) == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """`uvloop` for uvloop's loop, `asyncio` for the standard library's."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
