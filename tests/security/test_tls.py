"""TLS contexts from Kafka's PEM settings, mutual TLS, and certificates rotated under a running listener.

Every handshake here is real, over asyncio on 127.0.0.1, as a Kelp listener will do it. The rotation
test keeps one server (one SSLContext) running, replaces the keystore file between two handshakes and
sees the new certificate on the second: `load_cert_chain` on the live context reaches new handshakes.
CAs and certificates come from trustme; time never matters (the reloader's clock is a fake).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from kelp.security.principal import KafkaPrincipal, SslPrincipalMapper, principal_from_certificate
from kelp.security.tls import (
    ClientAuth,
    TlsConfigError,
    TlsReloader,
    TlsSettings,
    client_context,
    server_context,
)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _leaf_pem(leaf: trustme.LeafCert) -> bytes:
    return b"".join(blob.bytes() for blob in leaf.cert_chain_pems) + leaf.private_key_pem.bytes()


def _leaf_der(leaf: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> tuple[bytes, bytes | None]:
    """One connection: (the server certificate the client saw, the client certificate the server saw)."""
    seen: list[bytes | None] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(writer.get_extra_info("ssl_object").getpeercert(binary_form=True))
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname="localhost"), 5)
        server_cert = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        answer = await asyncio.wait_for(reader.read(2), 5)
        writer.close()
        if answer != b"ok":
            raise ConnectionError("the server closed the connection")
        return server_cert, seen[0]
    finally:
        server.close()
        await server.wait_closed()


# --- settings ---------------------------------------------------------------------------------------------

def test_settings_from_kafka_keys_with_listener_overrides() -> None:
    config = {
        "ssl.keystore.type": "PEM", "ssl.keystore.location": "/etc/kelp/broker.pem", "ssl.key.password": "pw",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/etc/kelp/ca.pem", "ssl.client.auth": "required",
        "ssl.enabled.protocols": "TLSv1.3", "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256",
        "listener.name.external.ssl.keystore.location": "/etc/kelp/external.pem",
        "listener.name.external.ssl.client.auth": "none",
    }
    internal = TlsSettings.from_kafka_config(config, listener="INTERNAL")
    assert internal.keystore_location == "/etc/kelp/broker.pem" and internal.client_auth is ClientAuth.REQUIRED
    assert internal.enabled_protocols == ("TLSv1.3",) and internal.cipher_suites == ("TLS_AES_128_GCM_SHA256",)
    external = TlsSettings.from_kafka_config(config, listener="EXTERNAL")
    assert external.keystore_location == "/etc/kelp/external.pem" and external.client_auth is ClientAuth.NONE
    assert external.truststore_location == "/etc/kelp/ca.pem"
    assert "pw" not in repr(internal)
    defaults = TlsSettings.from_kafka_config({})
    assert defaults.enabled_protocols == ("TLSv1.2", "TLSv1.3")
    assert defaults.endpoint_identification_algorithm == "https"
    no_check = TlsSettings.from_kafka_config({"ssl.endpoint.identification.algorithm": ""})
    assert no_check.endpoint_identification_algorithm == ""


@pytest.mark.parametrize(("config", "message"), [
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type=JKS: Kelp reads PEM files only"),
    ({"ssl.truststore.type": "PKCS12"}, "ssl.truststore.type=PKCS12"),
    ({"ssl.client.auth": "sometimes"}, "expected none, requested or required"),
    ({"ssl.protocol": "TLSv1.1"}, "TLSv1.2 and TLSv1.3 only"),
])
def test_settings_kelp_cannot_use(config: dict[str, str], message: str) -> None:
    with pytest.raises(TlsConfigError, match=message):
        TlsSettings.from_kafka_config(config)


def test_contexts_refuse_what_they_cannot_serve(tmp_path: Path, ca: trustme.CA) -> None:
    keystore = _write(tmp_path / "server.pem", _leaf_pem(ca.issue_cert("localhost")))
    with pytest.raises(TlsConfigError, match="needs ssl.keystore.location"):
        server_context(TlsSettings())
    with pytest.raises(TlsConfigError, match="ssl.client.auth=required needs ssl.truststore.location"):
        server_context(TlsSettings(keystore_location=keystore, client_auth=ClientAuth.REQUIRED))
    with pytest.raises(TlsConfigError, match="lists TLSv1.1: Kelp's minimum is TLSv1.2"):
        server_context(TlsSettings(keystore_location=keystore, enabled_protocols=("TLSv1.1", "TLSv1.2")))
    with pytest.raises(TlsConfigError, match="TLS_RSA_WITH_RC4_128_SHA, which Kelp does not offer"):
        server_context(TlsSettings(keystore_location=keystore, cipher_suites=("TLS_RSA_WITH_RC4_128_SHA",)))
    with pytest.raises(TlsConfigError, match="no TLS 1.2 suite while TLSv1.2 is enabled"):
        server_context(TlsSettings(keystore_location=keystore, cipher_suites=("TLS_AES_128_GCM_SHA256",)))
    with pytest.raises(TlsConfigError, match="cannot read ssl.keystore.location"):
        server_context(TlsSettings(keystore_location=str(tmp_path / "missing.pem")))
    with pytest.raises(TlsConfigError, match="holds no PEM certificate"):
        server_context(TlsSettings(keystore_location=keystore, truststore_location=_write(tmp_path / "x", b"junk")))


def test_context_settings(tmp_path: Path, ca: trustme.CA) -> None:
    keystore = _write(tmp_path / "server.pem", _leaf_pem(ca.issue_cert("localhost")))
    context = server_context(TlsSettings(keystore_location=keystore, cipher_suites=(
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES128-GCM-SHA256", "TLS_AES_256_GCM_SHA384")))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2 and context.maximum_version == ssl.TLSVersion.TLSv1_3
    tls12 = {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {"ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-AES128-GCM-SHA256"}
    assert context.verify_mode == ssl.CERT_NONE
    client = client_context(TlsSettings())
    assert client.check_hostname and client.verify_mode == ssl.CERT_REQUIRED
    assert not client_context(TlsSettings(endpoint_identification_algorithm="")).check_hostname


def test_encrypted_key_needs_its_password_and_never_prompts(tmp_path: Path, ca: trustme.CA) -> None:
    leaf = ca.issue_cert("localhost")
    key = load_pem_private_key(leaf.private_key_pem.bytes(), None)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"s3cret"))
    keystore = _write(tmp_path / "server.pem", b"".join(b.bytes() for b in leaf.cert_chain_pems) + encrypted)
    with pytest.raises(TlsConfigError, match="is encrypted: set ssl.key.password"):
        server_context(TlsSettings(keystore_location=keystore))
    with pytest.raises(TlsConfigError, match="cannot load the certificate chain and private key") as raised:
        server_context(TlsSettings(keystore_location=keystore, key_password="wrong"))
    assert "wrong" not in str(raised.value)
    server_context(TlsSettings(keystore_location=keystore, key_password="s3cret"))


# --- handshakes -------------------------------------------------------------------------------------------

async def test_server_tls_and_a_verifying_client(tmp_path: Path, ca: trustme.CA) -> None:
    leaf = ca.issue_cert("localhost")
    server = server_context(TlsSettings(keystore_location=_write(tmp_path / "s.pem", _leaf_pem(leaf))))
    client = client_context(TlsSettings(truststore_location=_write(tmp_path / "ca.pem", ca.cert_pem.bytes())))
    server_cert, client_cert = await _handshake(server, client)
    assert server_cert == _leaf_der(leaf) and client_cert is None


async def test_mutual_tls_principal_and_refusals(tmp_path: Path, ca: trustme.CA) -> None:
    truststore = _write(tmp_path / "ca.pem", ca.cert_pem.bytes())
    keystore = _write(tmp_path / "s.pem", _leaf_pem(ca.issue_cert("localhost")))
    alice = ca.issue_cert("alice@example.com", common_name="alice", organization_name="Kelp",
                          organization_unit_name="ServiceUsers")
    client = client_context(TlsSettings(truststore_location=truststore,
                                        keystore_location=_write(tmp_path / "alice.pem", _leaf_pem(alice))))
    required = server_context(TlsSettings(keystore_location=keystore, truststore_location=truststore,
                                          client_auth=ClientAuth.REQUIRED))
    _, seen = await _handshake(required, client)
    assert seen == _leaf_der(alice)
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT")
    assert principal_from_certificate(seen, mapper) == KafkaPrincipal.user("alice")
    anonymous = client_context(TlsSettings(truststore_location=truststore))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await _handshake(required, anonymous)
    requested = server_context(TlsSettings(keystore_location=keystore, truststore_location=truststore,
                                           client_auth=ClientAuth.REQUESTED))
    assert (await _handshake(requested, anonymous))[1] is None  # no certificate: ANONYMOUS, as Kafka
    stranger = trustme.CA().issue_cert("mallory")
    untrusted = client_context(TlsSettings(truststore_location=truststore,
                                           keystore_location=_write(tmp_path / "m.pem", _leaf_pem(stranger))))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await _handshake(requested, untrusted)


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
async def test_tls_1_2_is_the_floor(tmp_path: Path, ca: trustme.CA) -> None:
    keystore = _write(tmp_path / "s.pem", _leaf_pem(ca.issue_cert("localhost")))
    truststore = _write(tmp_path / "ca.pem", ca.cert_pem.bytes())
    only13 = server_context(TlsSettings(keystore_location=keystore, enabled_protocols=("TLSv1.3",)))
    client12 = client_context(TlsSettings(truststore_location=truststore, enabled_protocols=("TLSv1.2",)))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await _handshake(only13, client12)
    old_client = client_context(TlsSettings(truststore_location=truststore))
    old_client.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    old_client.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await _handshake(server_context(TlsSettings(keystore_location=keystore)), old_client)


# --- rotation ---------------------------------------------------------------------------------------------

async def test_rotated_certificate_reaches_the_next_handshake(tmp_path: Path, ca: trustme.CA) -> None:
    first, second = ca.issue_cert("localhost"), ca.issue_cert("localhost")
    keystore = tmp_path / "server.pem"
    keystore.write_bytes(_leaf_pem(first))
    clock = FakeClock()
    reloader = TlsReloader.server(TlsSettings(keystore_location=str(keystore)), check_interval_s=30, monotonic=clock)
    client = client_context(TlsSettings(truststore_location=_write(tmp_path / "ca.pem", ca.cert_pem.bytes())))
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=reloader.context)  # one context throughout
    port = server.sockets[0].getsockname()[1]
    try:
        for step in range(2):
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost"), 5)
            seen.append(writer.get_extra_info("ssl_object").getpeercert(binary_form=True))
            writer.close()
            if step == 0:
                keystore.write_bytes(_leaf_pem(second))  # cert-manager or the operator rotates the file
                assert not reloader.maybe_reload()       # inside the check interval: not even looked at
                clock.now += 31
                assert reloader.maybe_reload()
                assert not reloader.maybe_reload()
    finally:
        server.close()
        await server.wait_closed()
    assert seen == [_leaf_der(first), _leaf_der(second)]


async def test_half_written_or_mismatched_files_keep_the_old_certificate(
        tmp_path: Path, ca: trustme.CA, caplog: pytest.LogCaptureFixture) -> None:
    first, second = ca.issue_cert("localhost"), ca.issue_cert("localhost")
    keystore = tmp_path / "server.pem"
    keystore.write_bytes(_leaf_pem(first))
    reloader = TlsReloader.server(TlsSettings(keystore_location=str(keystore)))
    client = client_context(TlsSettings(truststore_location=_write(tmp_path / "ca.pem", ca.cert_pem.bytes())))
    good = _leaf_pem(second)
    caplog.set_level(logging.WARNING, logger="kelp.security.tls")
    for broken in (good[: len(good) // 2],                                                     # rotation in progress
                   b"".join(b.bytes() for b in second.cert_chain_pems) + first.private_key_pem.bytes()):  # wrong key
        keystore.write_bytes(broken)
        assert not reloader.reload_now()
        assert not reloader.reload_now()  # the same bad content: tried, not logged again
        assert (await _handshake(reloader.context, client))[0] == _leaf_der(first)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all("the current certificates stay in use" in r.getMessage() for r in warnings)
    assert "PRIVATE KEY" not in caplog.text
    keystore.write_bytes(good)
    assert reloader.reload_now()
    assert (await _handshake(reloader.context, client))[0] == _leaf_der(second)


def test_a_touched_file_with_the_same_content_is_not_reloaded(tmp_path: Path, ca: trustme.CA) -> None:
    keystore = tmp_path / "server.pem"
    keystore.write_bytes(_leaf_pem(ca.issue_cert("localhost")))
    clock = FakeClock()
    reloader = TlsReloader.server(TlsSettings(keystore_location=str(keystore)), check_interval_s=1, monotonic=clock)
    keystore.write_bytes(keystore.read_bytes())
    clock.now += 2
    assert not reloader.maybe_reload()


async def test_separate_key_file_and_truststore_rotation(tmp_path: Path, ca: trustme.CA,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    new_ca = trustme.CA()
    leaf = ca.issue_cert("localhost")
    chain = _write(tmp_path / "tls.crt", b"".join(b.bytes() for b in leaf.cert_chain_pems))
    key = _write(tmp_path / "tls.key", leaf.private_key_pem.bytes())  # cert-manager's layout
    truststore = tmp_path / "ca.pem"
    truststore.write_bytes(ca.cert_pem.bytes())
    reloader = TlsReloader.server(TlsSettings(keystore_location=chain, key_location=key,
                                              truststore_location=str(truststore), client_auth=ClientAuth.REQUIRED))
    server_trust = _write(tmp_path / "server-ca.pem", ca.cert_pem.bytes())
    bob = new_ca.issue_cert("bob", common_name="bob")
    client = client_context(TlsSettings(truststore_location=server_trust,
                                        keystore_location=_write(tmp_path / "bob.pem", _leaf_pem(bob))))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await _handshake(reloader.context, client)  # bob's CA is not trusted yet
    truststore.write_bytes(new_ca.cert_pem.bytes())  # the old CA is dropped from the file, the new one added
    caplog.set_level(logging.INFO, logger="kelp.security.tls")
    assert reloader.reload_now()
    assert (await _handshake(reloader.context, client))[1] == _leaf_der(bob)
    assert "stay trusted until the process restarts" in caplog.text
