"""`kelp` against a secured broker, with Kafka's client properties: `--command-config FILE` and the flags.

One broker whose only Kafka listener is SASL_SSL with SCRAM-SHA-512 (users seeded by `kelp storage format`),
whose HTTP API is HTTPS taking HTTP Basic (the same SCRAM users) and client certificates, with an authorizer
(`super.users=User:admin;User:ops`). The same properties file serves `produce`/`consume` (Kafka protocol) and
`topics`/`acls`/`groups` (HTTP): a wrong password fails with the broker's reason, no credentials get the
broker's 401 message, a principal without an ACL its 403 message, every one exit code 1. The orders example
(examples/spark/produce_orders.py) produces to the same broker with the same file.
"""

from __future__ import annotations

import io
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kelp.cli.main import main
from kelp.config.keys import KAFKA_STANDARD_AUTHORIZER
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.tls_files import Pki, scram_jaas

pytestmark = [pytest.mark.timeout(240)]

MAPPING = "RULE:^CN=([^,]+),OU=clients,.*$/$1/,DEFAULT"


@dataclass
class Secured:
    broker: BrokerProcess
    pki: Pki
    root: Path

    @property
    def https(self) -> str:
        return f"https://127.0.0.1:{self.broker.http_port}"

    def properties(self, name: str, lines: list[str]) -> Path:
        path = self.root / f"{name}.properties"
        path.write_text("\n".join(lines) + "\n")
        return path

    def scram(self, user: str, password: str, *, name: str | None = None) -> Path:
        return self.properties(name or user, [
            "# a Java client's properties, unchanged",
            "security.protocol=SASL_SSL",
            "sasl.mechanism=SCRAM-SHA-512",
            f"sasl.jaas.config={scram_jaas(user, password)}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={self.pki.ca_file}",
        ])


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    root = tmp_path_factory.mktemp("cli-secure")
    pki = Pki(root / "pki")
    settings = {
        "listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.location": str(pki.broker_file),
        "ssl.truststore.location": str(pki.ca_file), "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram_jaas("admin", "admin-secret"),
        "http.ssl.enabled": "true", "http.ssl.client.auth": "requested",
        "http.authentication.methods": "basic,mtls", "ssl.principal.mapping.rules": MAPPING,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ops", "num.partitions": 1, "offsets.topic.num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
    }
    command = [sys.executable, "-m", "kelp.cli.main", "storage", "format", "--log-dirs", str(root / "broker"),
               "-S", "SCRAM-SHA-512=[name=admin,password=admin-secret]",
               "-S", "SCRAM-SHA-512=[name=alice,password=alice-secret]"]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    formatted = subprocess.run(command, cwd=str(REPO), capture_output=True, text=True, timeout=60)
    assert formatted.returncode == 0, formatted.stderr
    broker = BrokerProcess(root / "broker", settings=settings)
    broker.start()
    try:
        yield Secured(broker, pki, root)
    finally:
        broker.kill()


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def run(secured: Secured, capsys: pytest.CaptureFixture[str],
         monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    """`run(...)`: `kelp` in-process, KELP_BOOTSTRAP and KELP_HTTP (https) pointing at the secured broker."""
    monkeypatch.setenv("KELP_HTTP", secured.https)
    monkeypatch.setenv("KELP_BOOTSTRAP", secured.broker.bootstrap)
    for name in ("KELP_COMMAND_CONFIG", "KELP_SASL_PASSWORD"):
        monkeypatch.delenv(name, raising=False)

    def kelp(*argv: str, stdin: str = "") -> Run:
        capsys.readouterr()
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return kelp


def test_a_properties_file_opens_the_kafka_listener_and_the_http_api(secured: Secured, run) -> None:
    admin = str(secured.scram("admin", "admin-secret"))
    alice = str(secured.scram("alice", "alice-secret"))
    r = run("topics", "create", "secured", "--command-config", admin)
    assert r.code == 0, r
    r = run("acls", "add", "--command-config", admin, "--allow-principal", "User:alice", "--topic", "secured",
             "--operation", "Read", "--operation", "Write", "--operation", "Describe")
    assert r.code == 0, r
    r = run("acls", "add", "--command-config", admin, "--allow-principal", "User:alice", "--group", "cli-g",
             "--operation", "Read")
    assert r.code == 0, r
    r = run("acls", "list", "--command-config", admin, "--principal", "User:alice", "--json")
    assert r.code == 0 and r.out.count('"User:alice"') == 4, r

    r = run("produce", "secured", "--command-config", alice, "--key-separator", ":", stdin="k1:one\nk2:two\n")
    assert r.code == 0, r
    assert "produced 2 record(s)" in r.err
    r = run("consume", "secured", "--command-config", alice, "--from-beginning", "--max-messages", "2",
             "--values-only")
    assert r.code == 0 and r.out == "one\ntwo\n", r
    r = run("consume", "secured", "--command-config", alice, "--group", "cli-g", "--from-beginning",
             "--max-messages", "2", "--values-only")
    assert r.code == 0 and r.out == "one\ntwo\n", r
    # alice sees the topic she may describe, over HTTPS with HTTP Basic
    r = run("topics", "list", "--command-config", alice, "--json")
    assert r.code == 0 and '"secured"' in r.out, r
    # the flags instead of a file, the password from the environment
    import os

    os.environ["KELP_SASL_PASSWORD"] = "alice-secret"
    try:
        r = run("topics", "describe", "secured", "--security-protocol", "SASL_SSL", "--sasl-mechanism",
                 "SCRAM-SHA-512", "--sasl-username", "alice", "--ssl-ca", str(secured.pki.ca_file))
    finally:
        del os.environ["KELP_SASL_PASSWORD"]
    assert r.code == 0 and "Topic: secured" in r.out, r


def test_a_wrong_password_fails_with_the_brokers_reason(secured: Secured, run) -> None:
    wrong = str(secured.scram("alice", "not-it", name="alice-wrong"))
    r = run("produce", "secured", "--command-config", wrong, stdin="x\n")
    assert r.code == 1
    assert "authentication to Kafka at" in r.err and "failed" in r.err and "Traceback" not in r.err, r
    r = run("consume", "secured", "--command-config", wrong, "--max-messages", "1")
    assert r.code == 1 and "authentication to Kafka at" in r.err, r
    r = run("topics", "list", "--command-config", wrong)
    assert r.code == 1
    assert "HTTP Basic authentication failed for user 'alice': wrong user name or password" in r.err
    assert "HTTP 401" in r.err, r


def test_no_credentials_get_the_brokers_401_and_no_acl_its_403(secured: Secured, run) -> None:
    r = run("topics", "list", "--ssl-ca", str(secured.pki.ca_file))
    assert r.code == 1
    assert "authentication required: this listener takes HTTP Basic credentials or a TLS client certificate" in r.err
    assert "HTTP 401" in r.err and "--command-config" in r.err, r
    alice = str(secured.scram("alice", "alice-secret"))
    r = run("acls", "list", "--command-config", alice)
    assert r.code == 1
    assert "User:alice is not authorized" in r.err and "HTTP 403" in r.err, r
    # without the CA, TLS fails and says what to trust
    r = run("topics", "list", "--sasl-username", "alice", "--sasl-password", "alice-secret",
             "--security-protocol", "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-512")
    assert r.code == 1 and "CERTIFICATE_VERIFY_FAILED" in r.err and "--ssl-ca" in r.err, r
    r = run("produce", "secured", "--security-protocol", "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-512",
             "--sasl-username", "alice", "--sasl-password", "alice-secret", stdin="x\n")
    assert r.code == 1 and "TLS handshake" in r.err and "--ssl-ca" in r.err, r


def test_a_client_certificate_is_the_http_principal(secured: Secured, run) -> None:
    ops = secured.pki.client_keystore("ops")  # CN=ops,OU=clients -> User:ops, a super user
    mtls = secured.properties("ops", ["security.protocol=SSL", f"ssl.truststore.location={secured.pki.ca_file}",
                                      f"ssl.keystore.location={ops}"])
    r = run("acls", "list", "--command-config", str(mtls))
    assert r.code == 0, r
    stranger = secured.pki.client_keystore("stranger")
    r = run("acls", "list", "--ssl-ca", str(secured.pki.ca_file), "--ssl-certificate", str(stranger))
    assert r.code == 1 and "User:stranger is not authorized" in r.err, r


def test_the_properties_file_from_the_environment_in_a_real_process(secured: Secured) -> None:
    admin = secured.scram("admin", "admin-secret")
    from tests.cli.conftest import run_kelp_process

    env = {"KELP_HTTP": secured.https, "KELP_BOOTSTRAP": secured.broker.bootstrap, "KELP_COMMAND_CONFIG": str(admin)}
    done = run_kelp_process("groups", "list", env=env)
    assert done.returncode == 0, done.stderr
    ca_only = secured.properties("ca-only", [f"ssl.ca.location={secured.pki.ca_file}"])
    done = run_kelp_process("topics", "list", env={**env, "KELP_COMMAND_CONFIG": str(ca_only)})
    assert done.returncode == 1 and "HTTP 401" in done.stderr and "Traceback" not in done.stderr


def test_the_orders_example_produces_to_the_secured_broker(secured: Secured, run) -> None:
    admin = secured.scram("admin", "admin-secret")
    example = [sys.executable, str(REPO / "examples" / "spark" / "produce_orders.py"), "--bootstrap",
               secured.broker.bootstrap, "--topic", "orders", "--count", "30", "--partitions", "1", "--create", "",
               "--timeout", "20"]
    done = subprocess.run(example + ["--command-config", str(admin)], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    assert "produced 30 orders to orders" in done.stdout
    r = run("consume", "orders", "--command-config", str(admin), "--from-beginning", "--max-messages", "30",
            "--values-only")
    assert r.code == 0 and len(r.out.splitlines()) == 30 and '"order_id": "o-000029"' in r.out, r
    wrong = secured.scram("admin", "not-it", name="admin-wrong")
    import os

    done = subprocess.run(example + ["--timeout", "5"], capture_output=True, text=True, timeout=90,
                          env={**os.environ, "KELP_COMMAND_CONFIG": str(wrong)})
    assert done.returncode == 1
    assert "authentication to Kafka at" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_pipeline_example_passes_the_properties_as_kafka_options(secured: Secured) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("orders_pipeline", REPO / "examples" / "spark" / "orders_pipeline.py")
    assert spec is not None and spec.loader is not None
    pipeline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pipeline)
    alice = secured.scram("alice", "alice-secret")
    args = pipeline.parse_args(["--bootstrap", "b:9093", "--checkpoint", "c", "--output", "o",
                                "--command-config", str(alice)])
    assert pipeline.kafka_options(args) == {
        "kafka.bootstrap.servers": "b:9093", "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.jaas.config": scram_jaas("alice", "alice-secret"),
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(secured.pki.ca_file)}


def test_a_bearer_token_opens_the_http_api(tmp_path_factory: pytest.TempPathFactory) -> None:
    """`http.authentication.methods=bearer`: `kelp` sends the JWT of `--bearer-token-file` or KELP_BEARER_TOKEN as
    `Authorization: Bearer`; the broker's OAUTHBEARER validator makes it `User:<sub>`, with that principal's ACLs;
    without one, or with a forged one, the broker's 401 reason is printed and the exit code is 1."""
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    from tests.cli.conftest import run_kelp_process

    root = tmp_path_factory.mktemp("kelp-bearer")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = root / "issuer.pem"
    public.write_bytes(key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    module = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
    broker = BrokerProcess(root / "broker", settings={
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0", "inter.broker.listener.name": "PLAINTEXT",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": f"{module} required;",
        "sasl.oauthbearer.public.key.location": str(public), "sasl.oauthbearer.expected.audience": "kelp",
        "http.authentication.methods": "bearer", "authorizer.class.name": KAFKA_STANDARD_AUTHORIZER,
        "super.users": "User:ops"})
    broker.start()
    try:
        def signed(sub: str, signer: rsa.RSAPrivateKey = key) -> str:
            now = int(time.time())
            return jwt.encode({"sub": sub, "aud": "kelp", "iat": now - 5, "exp": now + 600}, signer, algorithm="RS256")

        env = {"KELP_HTTP": broker.http_url, "KELP_BOOTSTRAP": broker.bootstrap, "KELP_COMMAND_CONFIG": ""}
        token_file = root / "ops.jwt"
        token_file.write_text(signed("ops") + "\n")
        done = run_kelp_process("topics", "create", "tokens", "--bearer-token-file", str(token_file), env=env)
        assert done.returncode == 0, done.stderr
        done = run_kelp_process("topics", "list", env={**env, "KELP_BEARER_TOKEN": signed("ops")})
        assert done.returncode == 0 and "tokens" in done.stdout, done.stderr
        done = run_kelp_process("topics", "list", env=env)
        assert done.returncode == 1 and "HTTP 401" in done.stderr and "--bearer-token-file" in done.stderr
        forged = signed("ops", rsa.generate_private_key(public_exponent=65537, key_size=2048))
        done = run_kelp_process("topics", "list", env={**env, "KELP_BEARER_TOKEN": forged})
        assert done.returncode == 1 and "the bearer token was refused" in done.stderr, done.stderr
    finally:
        broker.kill()
