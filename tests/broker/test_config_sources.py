"""Where broker settings come from: Kafka's server.properties beside YAML, and KELP_* variables checked like --set.

A Kafka user's `server.properties` (Java properties: `#`/`!` comments, `=`/`:`/space separators, `\\`
continuations and escapes) loads; Kafka names that mean a Kelp setting are mapped (`node.id`,
`advertised.listeners`), the KRaft/thread-pool keys Kelp has no use for are ignored with a warning, any other
unknown key is refused. A misspelt KELP_* variable stops the broker with "did you mean", as `--set` does.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from pathlib import Path

import pytest

from kelp.broker.__main__ import main as broker_main
from kelp.config.broker import BrokerConfig
from kelp.errors import ConfigError

# An excerpt of Apache Kafka 4.x's config/server.properties (KRaft, combined mode), as shipped.
SERVER_PROPERTIES = r"""############################# Server Basics #############################

# The role of this server. Setting this puts us in KRaft mode
process.roles=broker,controller

# The node id associated with this instance's roles
node.id=1

# List of controller endpoints used connect to the controller cluster
controller.quorum.bootstrap.servers=localhost:9093

############################# Socket Server Settings #############################

listeners=PLAINTEXT://:9092,CONTROLLER://:9093

# Name of listener used for communication between brokers.
inter.broker.listener.name=PLAINTEXT

# Listener name, hostname and port the broker or the controller will advertise to clients.
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093

# A comma-separated list of the names of the listeners used by the controller.
controller.listener.names=CONTROLLER

# Maps listener names to security protocols, the default is for them to be the same.
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL

num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600

############################# Log Basics #############################

log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1

offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def test_kafkas_server_properties_loads(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "server.properties"
    path.write_text(SERVER_PROPERTIES)
    with caplog.at_level(logging.WARNING, logger="kelp.broker.config"):
        cfg = BrokerConfig.load(file=path, env={})
    assert cfg.broker_id == 1  # node.id
    assert cfg["log.dirs"] == ["/tmp/kraft-combined-logs"]
    assert (cfg["host"], cfg["port"]) == ("0.0.0.0", 9092)
    assert (cfg["advertised.host"], cfg["advertised.port"]) == ("localhost", 9092)
    assert cfg["offsets.topic.replication.factor"] == 1 and cfg.retention_ms() == 168 * 3_600_000
    assert cfg["transaction.state.log.replication.factor"] == cfg["transaction.state.log.min.isr"] == 1
    warned = " ".join(r.getMessage() for r in caplog.records)
    for key in ("process.roles", "num.io.threads"):
        assert key in warned
    assert "transaction.state.log" not in warned  # the transaction coordinator's own settings now


def test_properties_syntax_separators_continuations_escapes_and_comments(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"  # no suffix that says which format: the content decides
    path.write_text("# comment\n! also a comment\nnum.partitions 4\nlog.dirs = /data/a,\\\n    /data/b\n"
                    "cluster.id: kelp\\u002dprod\nbroker.rack=rack\\:1\n")
    cfg = BrokerConfig.load(file=path, env={})
    assert cfg["num.partitions"] == 4
    assert cfg["log.dirs"] == ["/data/a", "/data/b"]
    assert cfg["cluster.id"] == "kelp-prod" and cfg["broker.rack"] == "rack:1"


def test_yaml_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "broker.yaml"
    path.write_text("num.partitions: 2\nlog:\n  dirs: [/d1]\n")
    cfg = BrokerConfig.load(file=path, env={})
    assert cfg["num.partitions"] == 2 and cfg["log.dirs"] == ["/d1"]


def test_unknown_keys_in_a_properties_file_are_refused_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=1\nnum.partition=3\n")
    with pytest.raises(ConfigError, match=r"unknown broker config 'num.partition' \(from config file "
                                          r".*server.properties\); "
                                          r"did you mean 'num.partitions'\?"):
        BrokerConfig.load(file=path, env={})


def test_a_broker_starts_from_a_server_properties_file(tmp_path: Path, broker_factory) -> None:
    path = tmp_path / "server.properties"
    path.write_text(SERVER_PROPERTIES.replace("num.partitions=1", "num.partitions=3")
                    .replace("advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093\n", ""))
    b = broker_factory(extra_args=["--config", str(path)])  # flags still win: ephemeral ports, the test's log dir
    req = urllib.request.Request(b.http_url + "/admin/v1/topics", method="POST",
                                 data=json.dumps({"name": "t"}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert json.loads(resp.read())["partitions_count"] == 3


def test_a_misspelt_kelp_variable_is_refused_with_did_you_mean() -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(env={"KELP_NUM_PARTITION": "3"})
    assert "KELP_NUM_PARTITION" in str(info.value) and "did you mean KELP_NUM_PARTITIONS?" in str(info.value)
    with pytest.raises(ConfigError, match="unknown environment variable KELP_FROBNICATE"):
        BrokerConfig.load(env={"KELP_FROBNICATE": "1"})
    # the same typo in --set fails the same way
    with pytest.raises(ConfigError, match=r"did you mean 'num.partitions'\?"):
        BrokerConfig.load(env={}, overrides={"num.partition": "3"})


def test_kelp_variables_of_other_tools_and_real_settings_are_fine() -> None:
    cfg = BrokerConfig.load(env={"KELP_NUM_PARTITIONS": "5", "KELP_HTTP": "http://x", "KELP_BOOTSTRAP": "x:1",
                                 "KELP_CONFIG": "", "KELP_LOG_LEVEL": "DEBUG", "KELP_KUBE_BUILD": "1",
                                 "KELP_OPERATOR_NAMESPACE": "n", "KELP_E2E_KEEP": "1", "KELP_UID": "7",
                                 "KELP_KUBE_NAMESPACE": "ns1", "KELP_KUBE_NODE_NAME": "node-1"})
    assert cfg["num.partitions"] == 5
    # a broker property wins over the other tools' prefixes: the operator's pods set these two
    assert cfg["kube.namespace"] == "ns1" and cfg["kube.node.name"] == "node-1"


def test_the_broker_refuses_to_start_on_a_misspelt_variable(monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.setenv("KELP_LOG_DIR", str(tmp_path))  # log.dir is Kafka's; Kelp maps it to log.dirs
    monkeypatch.setenv("KELP_NUM_PARTITONS", "3")
    assert broker_main(["--port", "0", "--http-port", "0"]) == 2
    err = capsys.readouterr().err
    assert "KELP_NUM_PARTITONS" in err and "did you mean KELP_NUM_PARTITIONS?" in err
