"""Run a library package's `__init__` only when something asks the package itself for a name.

Why: `import kafka.protocol.metadata` runs `kafka/__init__.py` first, and kafka-python's imports its
clients (KafkaConsumer, KafkaProducer, KafkaAdminClient: about 100 modules and the compression codecs) that
a broker never uses; `prometheus_client`'s imports its HTTP exposition servers (http.server, wsgiref,
urllib.request); `crc32c`'s reads its own version with importlib.metadata (email, zipfile, csv). Together
about 8 MiB of an empty broker's 60 (issue 38). `defer_init(name)`, called by the broker's process entry
(`python -m kelp.broker`) before anything imports the package, puts in `sys.modules` the package's module
object as the import system would make it (its `__path__`, `__spec__`, `__file__`) without running its
`__init__`: its submodules import as usual and become its attributes, and the first name asked of the
package that it does not hold yet (`from kafka import KafkaConsumer`, `kafka.__version__`) runs the real
`__init__` in that same module (PEP 562's module `__getattr__`), so every name it defines is there as before.
A name that is a submodule (`from kafka import codec`) imports that submodule alone. A package already
imported is left as it is.

This module must never import the packages it defers.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading

__all__ = ["defer_init"]

def defer_init(name: str) -> bool:
    """Defer `name`'s `__init__` (a top-level package); False when it is imported already or not a package."""
    if name in sys.modules:
        return False
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return False
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader
    # Other threads asking meanwhile wait for the end of the `__init__`; the thread running it, asking again
    # from inside it (a circular import), gets what is defined so far, as an import in progress gives.
    lock = threading.RLock()
    state = {"ran": False, "running": False}

    def run_init() -> None:
        with lock:
            if state["ran"] or state["running"]:
                return
            state["running"] = True
            try:
                loader.exec_module(module)
            finally:
                state["running"] = False
            state["ran"] = True
            del module.__dict__["__getattr__"]

    def __getattr__(attr: str) -> object:
        if not state["ran"] and not attr.startswith("__") and importlib.util.find_spec(f"{name}.{attr}") is not None:
            return importlib.import_module(f"{name}.{attr}")
        run_init()
        try:
            return module.__dict__[attr]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}") from None

    module.__dict__["__getattr__"] = __getattr__
    sys.modules[name] = module
    return True
