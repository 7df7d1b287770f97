"""The secured bench (bench/security/section.py) in a tiny mode against Kelp alone, so its code path cannot rot.

`make bench` runs it beside Apache Kafka with hundreds of thousands of records; here a few thousand per
case and one run, no Kafka: every listener (PLAINTEXT, SSL, SASL_SSL with SCRAM-SHA-512) produces with
acks=1 and acks=all and consumes, the ACL case runs against a broker whose authorizer holds ACLs, and an
existing SASL_SSL listener is measured through `python -m bench --bootstrap-server --client-config` with
a Kafka client properties file — each checked by the figures it prints, not by its exit code alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bench.security.section as security
from bench.__main__ import main as bench_main
from bench.broker import BenchBroker
from bench.security.pki import make_pki

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

RECORDS = 3_000


def _figures(measure: dict, records: int) -> None:
    assert measure["records"] == records
    assert measure["mb_s"] > 0 and measure["records_s"] > 0
    assert measure["mb_s"] == pytest.approx(measure["records_s"] * 1024 / 1e6)
    assert measure["client_cpu_s_per_gb"] >= 0


def test_every_listener_and_the_acl_case_against_kelp(capsys: pytest.CaptureFixture[str]) -> None:
    assert security.main(["--no-kafka", "--security-records", str(RECORDS), "--security-consume-records",
                          str(RECORDS), "--runs", "1", "--acl-count", "30", "--acl-runs", "2", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)["security"]
    assert [(r["security"], r["case"]) for r in res["rows"]] == [
        (mode, case) for mode in security.MODES for case in security.CASES]
    for row in res["rows"]:
        assert "kafka" not in row
        _figures(row["kelp"], RECORDS)
        assert row["kelp"]["broker_cpu_s_per_gb"] is not None and row["kelp"]["broker_cpu_s_per_gb"] >= 0
    assert res["tls"]["kelp"].startswith("TLSv1.")
    acl = res["acl"]
    assert acl["acl_count"] == 30 and len(acl["paired_delta_pct"]) == 2
    _figures(acl["none"], RECORDS)
    _figures(acl["acls"], RECORDS)
    assert isinstance(acl["delta_pct"], float)

    security.print_report(res)
    report = capsys.readouterr().out
    lines = report.splitlines()
    assert any(line.split()[:3] == ["SASL_SSL", "produce", "acks=all"] for line in lines), report
    assert "SECURITY'S CPU s/GB OVER PLAINTEXT" in report and "authorizer, 30 ACLs" in report
    assert "goal" not in report  # no Kafka, no verdict against it


def test_make_bench_measures_an_existing_secured_cluster_from_a_client_properties_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pki = make_pki(tmp_path / "pki")
    security._kelp_format(tmp_path / "data", (security.USER, security.ADMIN))
    with BenchBroker(tmp_path / "data", settings=security.kelp_settings(pki, listeners=("SASL_SSL",))) as broker:
        config = tmp_path / "client.properties"
        config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                          "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                          'username="alice" password="alice-secret";\n'
                          f"ssl.truststore.type=PEM\nssl.truststore.location={pki.ca_file}\n")
        args = ["--bootstrap-server", broker.listeners["SASL_SSL"], "--client-config", str(config),
                "--security-records", "2000", "--security-consume-records", "2000", "--runs", "1", "--json"]
        assert bench_main(args) == 0
        res = json.loads(capsys.readouterr().out)["security"]
        assert res["modes"] == ["SASL_SSL"] and res["bootstrap"] == broker.listeners["SASL_SSL"]
        assert [r["case"] for r in res["rows"]] == list(security.CASES)
        for row in res["rows"]:
            _figures(row["cluster"], 2000)
            assert row["cluster"]["broker_cpu_s_per_gb"] is None  # not this machine's processes

        # A flag overrides the file; a wrong password is refused by the broker, not counted as throughput.
        wrong = ('sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                 'username="alice" password="wrong";')
        with pytest.raises(RuntimeError, match="Authentication failed .* SCRAM-SHA-512"):
            bench_main([*args, "-X", wrong, "--security-records", "10"])


def test_client_properties_become_librdkafka_settings(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    java = {"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" '
                                'password="p;w";',
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file),
            "ssl.keystore.location": str(pki.broker_file), "ssl.endpoint.identification.algorithm": "",
            "client.id": "bench"}
    assert security.librdkafka_config(java) == {
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "bob",
        "sasl.password": "p;w", "ssl.ca.location": str(pki.ca_file), "ssl.certificate.location": str(pki.broker_file),
        "ssl.key.location": str(pki.broker_file), "ssl.endpoint.identification.algorithm": "none",
        "client.id": "bench"}
    props = tmp_path / "c.properties"
    props.write_text("security.protocol=SSL\nssl.ca.location=/nowhere/ca.pem\n")
    read = security.read_client_properties(props, ["ssl.ca.location=" + str(pki.ca_file)])
    assert security.librdkafka_config(read) == {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_file)}
    with pytest.raises(ValueError, match="ssl.truststore.type' is JKS"):
        security.librdkafka_config({"security.protocol": "SSL", "ssl.truststore.type": "JKS"})
    with pytest.raises(ValueError, match="sasl.jaas.config"):
        security.librdkafka_config({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"})
    with pytest.raises(ValueError, match="KEY=VALUE"):
        security.read_client_properties(None, ["nonsense"])
