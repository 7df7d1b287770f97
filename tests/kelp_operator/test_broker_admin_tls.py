"""The operator's admin client against a real HTTPS server that asks for client certificates, as a secured
Cluster's brokers do, and the admin contract's security endpoints as the client sends them.

What the operator relies on: with its client certificate (issued by the cluster CA) and the cluster CA as
its only trust, it reaches the brokers' HTTPS admin API and the brokers see `CN=kelp-operator,O=kelp.dev`;
a broker whose certificate is not from the cluster CA, or does not name the address (Service mode), is
refused; with pod IPs the chain alone authenticates the broker; the client sends exactly the contract's
paths and bodies (issue 20): ACL list/create/delete, SCRAM users list/put/delete.
"""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
import tempfile
import time
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kelp.operator.manifests.spec import ClusterSpec
from kelp.operator.manifests.tls_builders import keystore_pem
from kelp.operator.reconcile.brokers import AdminError, BrokerAdmin, operator_tls_context
from kelp.operator.reconcile.resync import admin_factory
from kelp.operator.security.certificates import CLIENT_ONLY, SERVER_AND_CLIENT, KeyPair, make_ca, make_leaf
from kelp.security.principal import dn_from_der_certificate
from tests.kelp_operator.fakes import FakeKube, resource


def now_ms() -> int:
    return int(time.time() * 1000)


class Pki:
    def __init__(self) -> None:
        self.ca = make_ca(common_name="demo-cluster-ca v0", organization="kelp.dev", now_ms=now_ms(), validity_days=2)
        self.broker = make_leaf(self.ca, common_name="demo-broker", organization="kelp.dev",
                                dns_names=("localhost",), usages=SERVER_AND_CLIENT, now_ms=now_ms(), validity_days=2)
        self.operator = make_leaf(self.ca, common_name="kelp-operator", organization="kelp.dev", usages=CLIENT_ONLY,
                                  now_ms=now_ms(), validity_days=2)

    def operator_secret(self) -> dict[str, bytes]:
        return {"tls.crt": self.operator.cert_pem + self.ca.cert_pem, "tls.key": self.operator.key_pem,
                "ca.crt": self.ca.cert_pem}


def server_context(pki: Pki, broker: KeyPair | None = None) -> ssl.SSLContext:
    """`http.ssl.client.auth=requested`: a certificate is asked for and checked, not required."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.verify_mode = ssl.CERT_OPTIONAL
    context.load_verify_locations(cadata=pki.ca.cert_pem.decode())
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "broker.pem")
        with open(path, "wb") as out:
            out.write(keystore_pem(broker or pki.broker, pki.ca.cert_pem))
        context.load_cert_chain(path)
    return context


async def serve(context: ssl.SSLContext) -> tuple[web.AppRunner, int, list[tuple[str, str, Any, str | None]]]:
    seen: list[tuple[str, str, Any, str | None]] = []

    async def handle(request: web.Request) -> web.Response:
        der = request.transport.get_extra_info("ssl_object").getpeercert(binary_form=True) if request.transport \
            else None
        who = dn_from_der_certificate(der) if der else None
        body = await request.json() if request.can_read_body else None
        seen.append((request.method, request.path_qs, body, who))
        if who != "CN=kelp-operator,O=kelp.dev":
            return web.json_response({"error_code": 31, "message": "no client certificate"}, status=401)
        if request.path == "/admin/v1/users" and request.method == "GET":
            return web.json_response({"users": [{"name": "alice", "credentials": [
                {"mechanism": "SCRAM-SHA-512", "iterations": 8192}]}]})
        if request.path == "/admin/v1/acls" and request.method == "GET":
            return web.json_response({"acls": []})
        if request.path == "/admin/v1/acls":
            return web.json_response({"results": [{"error": None} for _ in body["acls"]]})
        if request.path == "/admin/v1/acls/delete":
            return web.json_response({"results": [{"error": None, "deleted": []} for _ in body["filters"]]})
        if request.method == "DELETE":
            return web.json_response({"error_code": 69, "message": "no such credential"}, status=404)
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port, seen


def test_the_operator_reaches_https_brokers_with_its_certificate() -> None:
    async def scenario() -> None:
        pki = Pki()
        runner, port, seen = await serve(server_context(pki))
        try:
            async with aiohttp.ClientSession() as session:
                tls = operator_tls_context(pki.operator_secret(), check_hostname=True)
                admin = BrokerAdmin(session, [f"https://localhost:{port}"], tls=tls)
                assert await admin.list_users() == [{"name": "alice", "credentials": [
                    {"mechanism": "SCRAM-SHA-512", "iterations": 8192}]}]
                assert seen[-1][3] == "CN=kelp-operator,O=kelp.dev"

                # The contract's paths and bodies.
                await admin.list_acls({"principal": "User:alice"})
                binding = {"resourceType": "TOPIC", "resourceName": "t", "patternType": "LITERAL",
                           "principal": "User:alice", "host": "*", "operation": "READ", "permission": "ALLOW"}
                assert await admin.create_acls([binding]) == {"results": [{"error": None}]}
                await admin.delete_acls([{"principal": "User:alice"}])
                await admin.put_scram_credential("alice", {"mechanism": "SCRAM-SHA-512", "iterations": 8192,
                                                           "salt": "c2FsdA==", "saltedPassword": "eA=="})
                with pytest.raises(AdminError) as missing:
                    await admin.delete_scram_credential("alice", "SCRAM-SHA-512")
                assert missing.value.status == 404
                assert [(m, p, b) for m, p, b, _who in seen[1:]] == [
                    ("GET", "/admin/v1/acls?principal=User:alice", None),
                    ("POST", "/admin/v1/acls", {"acls": [binding]}),
                    ("POST", "/admin/v1/acls/delete", {"filters": [{"principal": "User:alice"}]}),
                    ("PUT", "/admin/v1/users/alice/scram-credentials", {
                        "mechanism": "SCRAM-SHA-512", "iterations": 8192, "salt": "c2FsdA==",
                        "saltedPassword": "eA=="}),
                    ("DELETE", "/admin/v1/users/alice/scram-credentials?mechanism=SCRAM-SHA-512", None)]

                # Without its certificate the broker does not know it; without the cluster CA it does not trust
                # the broker; an address the certificate does not name is refused (Service mode)...
                no_cert = ssl.create_default_context(cadata=pki.ca.cert_pem.decode())
                with pytest.raises(AdminError, match="no client certificate"):
                    await BrokerAdmin(session, [f"https://localhost:{port}"], tls=no_cert).list_users()
                with pytest.raises(AdminError) as untrusted:
                    await BrokerAdmin(session, [f"https://localhost:{port}"]).list_users()
                assert untrusted.value.status == 0
                with pytest.raises(AdminError):
                    await BrokerAdmin(session, [f"https://127.0.0.1:{port}"], tls=tls).list_users()
                # ...but with pod IPs the chain to the cluster CA is what authenticates the broker.
                by_ip = operator_tls_context(pki.operator_secret(), check_hostname=False)
                assert await BrokerAdmin(session, [f"https://127.0.0.1:{port}"], tls=by_ip).list_users()
        finally:
            await runner.cleanup()
    asyncio.run(scenario())


def test_a_broker_from_another_ca_is_refused() -> None:
    async def scenario() -> None:
        pki, other = Pki(), Pki()
        runner, port, _seen = await serve(server_context(pki, broker=other.broker))
        try:
            async with aiohttp.ClientSession() as session:
                tls = operator_tls_context(pki.operator_secret(), check_hostname=True)
                with pytest.raises(AdminError) as refused:
                    await BrokerAdmin(session, [f"https://localhost:{port}"], tls=tls).list_users()
                assert refused.value.status == 0 and "certificate" in refused.value.message.lower()
        finally:
            await runner.cleanup()
    asyncio.run(scenario())


def test_the_admin_factory_uses_the_operator_secret(monkeypatch) -> None:
    async def scenario() -> None:
        pki = Pki()
        body = resource("Cluster", "demo", {"listeners": {"kafka": [{"name": "tls", "port": 9093, "tls": True}]}})
        spec = ClusterSpec.from_resource(body)
        kube = FakeKube(body)
        async with aiohttp.ClientSession() as session:
            admin_for = admin_factory(kube, session)  # type: ignore[arg-type]
            waiting = await admin_for(spec)
            assert waiting.urls == ["https://demo.ns.svc:8080"]
            with pytest.raises(AdminError, match="operator's client certificate .*demo-operator-tls.* is not issued"):
                await waiting.list_users()
            kube.put({"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": "demo-operator-tls", "namespace": "ns"},
                      "data": {k: base64.b64encode(v).decode() for k, v in pki.operator_secret().items()}})
            first, second = await admin_for(spec), await admin_for(spec)
            assert first.tls is not None and first.tls is second.tls, "one context per certificate"
            assert first.tls.check_hostname
            plain = await admin_for(ClusterSpec.from_resource(resource("Cluster", "demo", {})))
            assert plain.tls is None and plain.urls == ["http://demo.ns.svc:8080"]
    monkeypatch.setenv("KELP_OPERATOR_BROKER_ADDRESS", "service")
    asyncio.run(scenario())
