"""A plain broker does not import what it does not use (issue 38: an empty broker was 73 MiB, most of it modules).

A broker with the default config (no Kubernetes, no TLS or OAUTHBEARER listener, the HTTP listener on, the
schema registry enabled, neither asked) is started with CPython's `-X importtime` (`PYTHONPROFILEIMPORTTIME=1`:
one stderr line per module imported), answers a Metadata request, and is stopped; no module of the deny-list
below may be among those it imported. Each entry is something only some brokers need, imported on first use:
the registry's format libraries, its REST codecs' protobuf, PyJWT and cryptography for OAUTHBEARER keys, the
Kubernetes client for the Kubernetes metadata log; aiohttp, the HTTP routes and the schema registry by the
HTTP listener's first connection (`http_listener.py`); RE2 by the first client pattern; kafka-python's own
clients, prometheus_client's HTTP exposition servers and importlib.metadata (crc32c's `__init__`) never, as
their packages' `__init__` is deferred (`kelp.lazy_packages`). Before issue 38 the broker imported every one
of them but the Kubernetes client at start; the second round's (HTTP and after) were 65 of the 820 modules of
the first round's broker and 190 more through them (37 of 64 MiB with the rest).
"""

from __future__ import annotations

import re
from typing import Callable

from kafka.protocol.metadata import MetadataRequest

from tests.support.broker_process import BrokerProcess
from tests.support.kafka_wire import WireClient

# Top-level packages (or dotted prefixes) a plain broker must not import.
DENIED = ("kubernetes", "kopf", "avro", "jsonschema", "referencing", "google.protobuf", "proto_schema_parser",
          "antlr4", "jwt", "cryptography",
          "aiohttp", "multidict", "yarl", "kelp.broker.http", "kelp.broker.schema_registry", "re2",
          "kafka.consumer", "kafka.producer", "kafka.admin", "kafka.coordinator", "kafka.codec",
          "prometheus_client.exposition", "http.server", "wsgiref", "importlib.metadata", "email")

_IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$")


def _imported(log: str) -> set[str]:
    return {m.group(1) for m in map(_IMPORT_LINE.match, log.splitlines()) if m is not None}


def test_a_plain_broker_imports_none_of_the_deny_list(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(env={"PYTHONPROFILEIMPORTTIME": "1"})
    with WireClient(b.bootstrap) as c:
        answer = c.request(MetadataRequest(topics=None), 4)
    assert [broker.node_id for broker in answer.brokers] == [b.broker_id]
    assert b.terminate() == 0, b.log_text()[-3000:]
    modules = _imported(b.log_text())
    assert "kelp.broker.app" in modules, "no import lines: is -X importtime still read from the environment?"
    denied = sorted(m for m in modules if any(m == d or m.startswith(d + ".") for d in DENIED))
    assert not denied, f"a plain broker imported {len(denied)} modules it does not use: {denied[:40]}"
