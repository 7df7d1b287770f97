"""The control-plane proxy does what the nemesis relies on: passes bytes, delays them so requests overtake each other
(and still delivers a request whose client gave up), blackholes, resets, and stalls open connections while dropping.

The proxy runs as its own process on loopback, in front of a small TCP
server (in this test) that records the order in which whole requests
arrive. Delays are drawn from the proxy's seed: the test picks a seed whose
first connection draws a long delay and whose second draws a short one.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]


class Recorder:
    """A TCP server on loopback: each connection's bytes up to a newline are one request, recorded in arrival order."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.arrived: list[tuple[float, bytes]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        conn.settimeout(30)
        try:
            while b"\n" not in buf:
                data = conn.recv(4096)
                if not data:
                    break
                buf += data
            if buf:
                with self.lock:
                    self.arrived.append((time.monotonic(), buf.strip()))
                conn.sendall(b"ok:" + buf)
        except OSError:
            pass
        finally:
            conn.close()

    def wait(self, n: int, timeout: float) -> list[bytes]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.arrived) >= n:
                    return [b for _, b in self.arrived]
            time.sleep(0.02)
        with self.lock:
            return [b for _, b in self.arrived]


class ProxyProcess:
    def __init__(self, target_port: int, seed: int) -> None:
        code = ("import runpy, sys; sys.path.append(sys.argv.pop(1)); "
                "runpy.run_module('tests.chaos.proxy', run_name='__main__', alter_sys=True)")
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(ROOT), "--listen", "127.0.0.1", "--seed",
                                      str(seed), "--pair", f"0:1:127.0.0.1:{target_port}"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.port = self.read("proxy-listening")["ports"]["0-1"]

    def read(self, event: str) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # bounded: the proxy answers each command at once (pytest timeout)
        got = json.loads(line)
        assert got["event"] == event, got
        return got

    def rules(self, rules: list[dict]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": "rules", "rules": rules}) + "\n")
        self.proc.stdin.flush()
        self.read("rules")

    def stats(self) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write('{"op": "stats"}\n')
        self.proc.stdin.flush()
        return self.read("stats")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def _seed_long_then_short() -> int:
    for seed in range(10_000):
        rng = random.Random(seed)
        if rng.random() > 0.8 and rng.random() < 0.1:
            return seed
    raise AssertionError("no such seed")


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    r = Recorder()
    yield r
    r.sock.close()


@pytest.fixture
def proxy_factory(recorder: Recorder) -> Iterator:
    made: list[ProxyProcess] = []

    def make(seed: int = 0) -> ProxyProcess:
        made.append(ProxyProcess(recorder.port, seed))
        return made[-1]

    yield make
    for p in made:
        p.close()


def _send(port: int, payload: bytes, *, wait_answer: float | None = 5.0) -> bytes | None:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(payload)
    if wait_answer is None:
        s.close()
        return None
    s.settimeout(wait_answer)
    try:
        return s.recv(4096)
    except (socket.timeout, OSError):
        return None
    finally:
        s.close()


def test_without_rules_bytes_pass_both_ways(proxy_factory, recorder) -> None:
    proxy = proxy_factory()
    assert _send(proxy.port, b"hello\n") == b"ok:hello\n"
    assert recorder.wait(1, 5) == [b"hello"]


def test_delay_lets_a_later_request_overtake_and_delivers_one_whose_client_gave_up(proxy_factory, recorder) -> None:
    proxy = proxy_factory(_seed_long_then_short())
    proxy.rules([{"src": 0, "dst": "*", "action": "delay", "lo_ms": 0, "hi_ms": 2000}])
    t0 = time.monotonic()
    _send(proxy.port, b"first\n", wait_answer=None)   # share > 0.8: at least 1.6 s late, and its client is gone
    _send(proxy.port, b"second\n", wait_answer=None)  # share < 0.1: at most 0.2 s late
    assert recorder.wait(2, 10) == [b"second", b"first"]
    assert time.monotonic() - t0 >= 1.5
    stats = proxy.stats()
    assert stats["delayed"] == 2 and stats["late_after_close"] >= 1


def test_drop_blackholes_new_connections_and_reset_refuses_them(proxy_factory, recorder) -> None:
    proxy = proxy_factory()
    proxy.rules([{"src": "*", "dst": 1, "action": "drop"}])
    assert _send(proxy.port, b"lost\n", wait_answer=1.0) is None
    proxy.rules([{"src": 0, "dst": 1, "action": "reset"}])
    with pytest.raises((ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        s = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        try:
            time.sleep(0.2)
            s.sendall(b"refused\n")
            if not s.recv(10):
                raise ConnectionResetError("closed")
        finally:
            s.close()
    proxy.rules([])
    assert _send(proxy.port, b"after\n") == b"ok:after\n"
    assert recorder.wait(1, 5) == [b"after"]
    assert proxy.stats()["dropped"] == 1


def test_an_open_connection_stalls_while_dropping_and_its_bytes_arrive_once_healed(proxy_factory, recorder) -> None:
    proxy = proxy_factory()
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    try:
        s.sendall(b"par")
        time.sleep(0.3)  # the connection is open upstream before the partition starts
        proxy.rules([{"src": 0, "dst": 1, "action": "drop"}])
        s.sendall(b"tial\n")
        assert recorder.wait(1, 1.0) == []
        proxy.rules([])
        assert recorder.wait(1, 5) == [b"partial"]
    finally:
        s.close()


def test_a_reset_rule_resets_an_open_connection_at_its_next_byte(proxy_factory, recorder) -> None:
    proxy = proxy_factory()
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    try:
        s.sendall(b"op")
        time.sleep(0.3)
        proxy.rules([{"src": 0, "dst": "*", "action": "reset"}])
        s.sendall(b"en\n")
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            if not s.recv(10):
                raise ConnectionResetError("closed")
        assert recorder.wait(1, 1.0) == []
        assert proxy.stats()["reset"] == 1
    finally:
        s.close()
