"""The `kelp` data source and Spark's own Kafka connector read a SASL_SSL topic with the same `kafka.*` options.

A broker whose only listener is SASL_SSL with SCRAM-SHA-512 (users seeded with `kelp storage format`, its
certificate from trustme): the options a Spark user already writes for Kafka — `kafka.security.protocol`,
`kafka.sasl.mechanism`, `kafka.sasl.jaas.config`, a PEM `kafka.ssl.truststore.location` — make both sources
read the same rows, and the kelp sink writes over the same connection security. A wrong password fails the
query with the broker's refusal.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.broker_process import REPO, BrokerProcess
from tests.support.secure_clients import ClientAuth, produce
from tests.support.tls_files import Pki, scram_jaas

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Pki]]:
    root = tmp_path_factory.mktemp("spark-secure")
    pki = Pki(root / "pki")
    settings = {"listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.location": str(pki.broker_file),
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram_jaas("admin", "admin-secret")}
    command = [sys.executable, "-m", "kelp.cli.main", "storage", "format", "--log-dirs", str(root / "broker"),
               "-S", "SCRAM-SHA-512=[name=admin,password=admin-secret]",
               "-S", "SCRAM-SHA-512=[name=spark,password=spark-secret]"]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    assert subprocess.run(command, cwd=str(REPO), capture_output=True, timeout=60).returncode == 0
    broker = BrokerProcess(root / "broker", settings=settings)
    broker.start()
    yield broker, pki
    broker.kill()


def options(broker: BrokerProcess, pki: Pki, password: str = "spark-secret") -> dict[str, str]:
    return {"kafka.bootstrap.servers": broker.bootstrap, "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.jaas.config": scram_jaas("spark", password),
            "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(pki.ca_file)}


def read(spark, fmt: str, opts: dict[str, str], topic: str) -> list[tuple]:
    r = spark.read.format(fmt).option("subscribe", topic)
    for key, value in opts.items():
        r = r.option(key, value)
    return sorted((row.value, row.partition, row.offset) for row in r.load().collect())


def test_both_sources_read_a_sasl_ssl_topic_and_the_sink_writes_to_one(spark, secured) -> None:
    broker, pki = secured
    auth = ClientAuth("SASL_SSL", "SCRAM-SHA-512", "spark", "spark-secret", ca=pki.ca_file)
    produce("kafka-python", broker.bootstrap, "secured", auth, [f"r{i}".encode() for i in range(20)])
    opts = options(broker, pki)
    ours = read(spark, "kelp", opts, "secured")
    assert [v for v, _, _ in ours] == sorted(f"r{i}".encode() for i in range(20))
    assert ours == read(spark, "kafka", opts, "secured")

    df = spark.createDataFrame([(f"w{i}",) for i in range(5)], ["value"])
    writer = df.write.format("kelp").mode("append").option("topic", "written")
    for key, value in opts.items():
        writer = writer.option(key, value)
    writer.save()
    assert [v for v, _, _ in read(spark, "kelp", opts, "written")] == [f"w{i}".encode() for i in range(5)]
    broker.wait_for_log("authenticated as User:spark (SASL/SCRAM-SHA-512)")


def test_a_wrong_password_fails_the_query_with_the_brokers_refusal(spark, secured) -> None:
    broker, pki = secured
    with pytest.raises(Exception, match="refused SASL/SCRAM-SHA-512 authentication as spark"):
        read(spark, "kelp", options(broker, pki, password="nope"), "secured")
