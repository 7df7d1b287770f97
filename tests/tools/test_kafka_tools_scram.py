"""Kafka's own tools over SASL_SSL: kafka-configs manages SCRAM users, the console clients use a properties file.

The broker's only client listener is SASL_SSL with SCRAM-SHA-512 (its certificate from trustme, the Java
clients trusting it through a PEM truststore); its first user, `admin`, is seeded before its first start
with `kelp storage format --add-scram`, as `kafka-storage format --add-scram` seeds Kafka. As admin,
`kafka-configs --entity-type users --alter --add-config 'SCRAM-SHA-512=[iterations=8192,password=...]'`
creates bob and `--describe` shows his credential; bob then produces and consumes with the console clients
and his own client properties file; `--delete-config` removes him, and his next login fails.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kelp import kafka_tools
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.tls_files import SCRAM_JAAS, Pki, scram_jaas
from tests.tools.conftest import Tools

pytestmark = [pytest.mark.clients, pytest.mark.timeout(400)]

CONFIGS = "kafka.admin.ConfigCommand"
PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
TOPICS = "org.apache.kafka.tools.TopicCommand"


def client_properties(path: Path, pki: Pki, user: str, password: str) -> Path:
    path.write_text("security.protocol=SASL_SSL\n"
                    "sasl.mechanism=SCRAM-SHA-512\n"
                    f"sasl.jaas.config={scram_jaas(user, password)}\n"
                    "ssl.truststore.type=PEM\n"
                    f"ssl.truststore.location={pki.ca_file}\n")
    return path


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Pki, Path]]:
    if shutil.which("java") is None:
        pytest.skip("java is not installed: Kafka's Java tools cannot run")
    kafka_tools.fetch()
    root = tmp_path_factory.mktemp("kelp-tools-scram")
    pki = Pki(root / "pki")
    settings = {"listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.location": str(pki.broker_file),
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
                "offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0}
    data = root / "broker"
    command = [sys.executable, "-m", "kelp.cli.main", "storage", "format", "--log-dirs", str(data),
               "--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]"]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=str(REPO), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "SCRAM credentials for admin (SCRAM-SHA-512, 4096 iterations)" in done.stdout
    assert "admin-secret" not in done.stdout + done.stderr
    bp = BrokerProcess(data, settings=settings)
    bp.start()
    yield bp, pki, client_properties(root / "admin.properties", pki, "admin", "admin-secret")
    bp.kill()


def test_kafka_configs_adds_describes_and_deletes_a_scram_user(secured: tuple[BrokerProcess, Pki, Path],
                                                               tmp_path: Path) -> None:
    broker, pki, admin = secured
    tools = Tools(broker.bootstrap)
    as_admin = ("--command-config", str(admin))
    added = tools.run(CONFIGS, *as_admin, "--entity-type", "users", "--entity-name", "bob", "--alter",
                      "--add-config", "SCRAM-SHA-512=[iterations=8192,password=bob-secret]").ok()
    assert "Completed updating config for user bob" in added.stdout
    described = tools.run(CONFIGS, *as_admin, "--entity-type", "users", "--entity-name", "bob", "--describe").ok()
    assert "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-512=iterations=8192" in described.stdout
    broker.wait_for_log("SCRAM credentials of user 'bob': set SCRAM-SHA-512")

    bob = client_properties(tmp_path / "bob.properties", pki, "bob", "bob-secret")
    tools.run(TOPICS, "--command-config", str(admin), "--create", "--topic", "bobs", "--partitions", "1").ok()
    lines = [f"line {i}" for i in range(10)]
    tools.run(PRODUCER, "--topic", "bobs", "--command-config", str(bob), stdin="\n".join(lines) + "\n").ok()
    read = tools.run(CONSUMER, "--topic", "bobs", "--from-beginning", "--max-messages", "10",
                     "--command-config", str(bob), "--timeout-ms", "60000").ok()
    assert read.stdout.split("\n")[:10] == lines
    broker.wait_for_log("authenticated as User:bob (SASL/SCRAM-SHA-512)")

    tools.run(CONFIGS, *as_admin, "--entity-type", "users", "--entity-name", "bob", "--alter", "--delete-config",
              "SCRAM-SHA-512").ok()
    gone = tools.run(CONFIGS, *as_admin, "--entity-type", "users", "--entity-name", "bob", "--describe")
    assert "SCRAM-SHA-512=iterations" not in gone.stdout
    refused = tools.run(TOPICS, "--command-config", str(bob), "--list", timeout=90)
    assert refused.returncode != 0
    assert "Authentication failed" in refused.stdout + refused.stderr
    broker.wait_for_log("authentication failed on listener SASL_SSL")
    assert "bob-secret" not in broker.log_text() and "admin-secret" not in broker.log_text().split("\n", 1)[1]
