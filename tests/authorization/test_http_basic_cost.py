"""What an HTTP Basic attempt costs the broker (issue 33, item 7).

The attacks: a wrong password for an existing SCRAM user ran the full PBKDF2 (8.2 ms) where an unknown user cost
0.45 ms (so timing told which user names exist), and 24 threads of wrong passwords ran 24 saltings at once,
taking most of a core and delaying valid requests. Now an unknown user (and a PLAIN user's wrong password) is
salted like a SCRAM user's, one salting runs at a time on the CPU pool (never on the loop), a client address has
at most two checks under way, a verified password is remembered, and a failure is answered after
`connection.failed.authentication.delay.ms`.
"""

from __future__ import annotations

import asyncio
import base64
import statistics
import threading
import time

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kelp.broker.http.access import basic_credentials
from kelp.broker.http.access.authentication import HttpAuthenticator
from kelp.broker.http.access.basic_credentials import SaslUsersCheck
from kelp.security.scram import ScramMechanism, make_credential

SHA512 = ScramMechanism.SCRAM_SHA_512
CREDENTIALS = {("alice", "SCRAM-SHA-512"): make_credential("alice-secret", SHA512, 4096)}


def _check() -> SaslUsersCheck:
    return SaslUsersCheck(plain={"bob": "bob-secret"}, scram=lambda: CREDENTIALS)


class _Saltings:
    """Wraps the module's PBKDF2: counts calls and the most running at once (each made to last `hold_s`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, hold_s: float = 0.0) -> None:
        self.calls: list[int] = []
        self.running = self.most = 0
        self._lock = threading.Lock()
        real = basic_credentials.salted_password

        def salted(password: str, salt: bytes, iterations: int, mechanism: ScramMechanism) -> bytes:
            with self._lock:
                self.running += 1
                self.most = max(self.most, self.running)
                self.calls.append(iterations)
            try:
                if hold_s:
                    time.sleep(hold_s)
                return real(password, salt, iterations, mechanism)
            finally:
                with self._lock:
                    self.running -= 1

        monkeypatch.setattr(basic_credentials, "salted_password", salted)


async def test_unknown_users_and_wrong_plain_passwords_cost_a_salting_too(monkeypatch) -> None:
    saltings = _Saltings(monkeypatch)
    check = _check()
    assert await check("nobody", "guess") is None
    assert await check("bob", "guess") is None
    assert await check("alice", "guess") is None
    assert saltings.calls == [4096, 4096, 4096]  # each failure the same work, at a credential's iterations
    assert await check("bob", "bob-secret") is not None  # PLAIN: no salting on success
    assert await check("alice", "alice-secret") is not None
    assert await check("alice", "alice-secret") is not None  # remembered: salted once
    assert len(saltings.calls) == 4


async def test_failures_take_as_long_for_unknown_and_known_users() -> None:
    check = _check()

    async def median(user: str) -> float:
        times = []
        for _ in range(7):
            start = time.perf_counter()
            assert await check(user, "wrong") is None
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    known, unknown = await median("alice"), await median("nobody")
    assert unknown > known / 3, f"an unknown user fails in {unknown * 1000:.2f} ms, a known one in {known * 1000:.2f}"


async def test_a_flood_of_wrong_passwords_salts_one_at_a_time_off_the_loop(monkeypatch) -> None:
    saltings = _Saltings(monkeypatch, hold_s=0.02)
    check = _check()
    cpu = time.thread_time()
    results = await asyncio.gather(*(check("alice", f"guess-{i}") for i in range(12)))
    assert results == [None] * 12
    assert saltings.most == 1, f"{saltings.most} saltings ran at once"
    assert time.thread_time() - cpu < 0.05  # the loop's thread did none of it


async def test_one_address_has_at_most_two_checks_under_way(monkeypatch) -> None:
    check = _check()
    inside = most = 0
    real = check._salted

    async def counting(fn, *args):
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        try:
            await asyncio.sleep(0.01)
            return await real(fn, *args)
        finally:
            inside -= 1

    monkeypatch.setattr(check, "_salted", counting)
    await asyncio.gather(*(check("alice", f"guess-{i}", "10.9.9.9") for i in range(6)))
    assert most <= 2
    assert check._per_address == {}  # nothing kept for addresses no longer in use


async def test_a_failed_basic_is_answered_after_the_failed_authentication_delay() -> None:
    authenticator = HttpAuthenticator(methods=("basic",), basic=_check(), failed_delay_s=0.3)

    async def whoami(request: web.Request) -> web.Response:
        return web.Response(text=str(await authenticator.principal(request)))

    async def guarded(request: web.Request) -> web.Response:
        try:
            return await whoami(request)
        except Exception:
            return web.Response(status=401)

    app = web.Application()
    app.router.add_get("/", guarded)
    async with TestClient(TestServer(app)) as client:
        for password, status, slow in (("bob-secret", 200, False), ("nope", 401, True)):
            token = base64.b64encode(f"bob:{password}".encode()).decode()
            start = time.monotonic()
            r = await client.get("/", headers={"Authorization": f"Basic {token}"})
            assert r.status == status
            assert (time.monotonic() - start >= 0.3) is slow
