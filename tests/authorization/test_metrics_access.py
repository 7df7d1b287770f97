"""`/metrics` once HTTP authentication is on (issue 33, item 6).

The attack: with HTTP authentication and an authorizer on, `/metrics` stayed public, so anyone read the topic
names, group names, committed offsets and lag the ACLs hide from them. Now it needs authentication whenever
HTTP takes any proof (unless `http.metrics.public` is set), and with an authorizer a super user or a principal
of `http.metrics.principals`; with HTTP authentication off it stays public, as before.
"""

from __future__ import annotations

import base64
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from kelp.broker.http.access.authentication import HttpAuthenticator
from kelp.broker.http.app import build_http_app
from kelp.config.broker import BrokerConfig
from kelp.security.principal import KafkaPrincipal
from tests.authorization.harness import InProcessBroker

PASSWORDS = {"admin": "a", "alice": "b", "prom": "c"}


async def check_basic(user: str, password: str, address: str = "") -> KafkaPrincipal | None:
    return KafkaPrincipal.user(user) if PASSWORDS.get(user) == password else None


def basic(user: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()}


async def test_metrics_need_a_scraper_identity_once_http_authenticates(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path, **{"http.metrics.principals": "User:prom"}) as b:
        await b.parts.topics.create_topic("payroll-secret", 1, 1)
        config = BrokerConfig.load(env={}, overrides={"http.authentication.methods": "basic"})
        authenticator = HttpAuthenticator.from_config(config, basic=check_basic)
        async with TestClient(TestServer(build_http_app(b.broker, authenticator=authenticator))) as client:
            anonymous = await client.get("/metrics")
            assert anonymous.status == 401
            assert "payroll-secret" not in await anonymous.text()
            alice = await client.get("/metrics", headers=basic("alice"))  # a valid user without the right
            assert alice.status == 403 and "http.metrics.principals" in (await alice.json())["message"]
            for scraper in ("prom", "admin"):  # listed, and a super user
                r = await client.get("/metrics", headers=basic(scraper))
                assert r.status == 200 and "payroll-secret" in await r.text(), scraper
            assert (await client.get("/healthz")).status == 200  # probes stay open


async def test_metrics_stay_public_while_http_takes_no_proof_or_when_said_so(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path, **{"authorizer.class.name": ""}) as b:
        for overrides in ({}, {"http.authentication.methods": "basic", "http.metrics.public": True}):
            config = BrokerConfig.load(env={}, overrides=overrides)
            authenticator = HttpAuthenticator.from_config(config, basic=check_basic)
            async with TestClient(TestServer(build_http_app(b.broker, authenticator=authenticator))) as client:
                assert (await client.get("/metrics")).status == 200, overrides
