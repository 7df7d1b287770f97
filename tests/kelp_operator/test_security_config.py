"""spec.listeners.kafka, spec.tls and spec.authorization as the brokers' Kafka config (operator/security.py).

What the brokers rely on (docs/operator.md, "Broker config of the secured layout"): exactly these keys,
one security protocol per listener from its tls and authentication, the replication listener on 9091
with client certificates from the cluster CA, HTTPS for the HTTP listener, the operator and the brokers
among the super users under the principals the brokers will compute; and what users rely on: a spec the
brokers could not run is refused with a message naming the field, and a Cluster without
spec.listeners.kafka gets exactly the config it always had.
"""

from __future__ import annotations

import pytest
import yaml

from kelp.config.broker import BrokerConfig
from kelp.operator.manifests.builders import broker_config_yaml, config_hash
from kelp.operator.manifests.spec import ClusterSpec, SpecError
from kelp.operator.security.listener_security import KAFKA_AUTHORIZER, KELP_AUTHORIZER, owned_by_security, principal_of


def cluster(spec: dict, *, name: str = "demo") -> dict:
    return {"apiVersion": "kelp.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": "team-a", "uid": "u-1", "generation": 1}, "spec": spec}


def listener(name: str, port: int, *, tls: bool = False, auth: str | None = None, kind: str = "internal") -> dict:
    out: dict = {"name": name, "port": port, "type": kind, "tls": tls}
    if auth is not None:
        out["authentication"] = {"type": auth}
    return out


SECURED = {"listeners": {"kafka": [listener("plain", 9092, auth="scram-sha-512"),
                                   listener("tls", 9093, tls=True, auth="tls")]},
           "authorization": {"type": "simple", "superUsers": ["admin", "User:CN=ops"]}}


def secured(extra: dict | None = None, **listeners: object) -> ClusterSpec:
    spec = {**SECURED, **(extra or {})}
    if listeners:
        spec = {**spec, "listeners": {**spec["listeners"], **listeners}}
    return ClusterSpec.from_resource(cluster(spec))


@pytest.mark.parametrize("tls, auth, protocol, mechanism", [
    (False, None, "PLAINTEXT", None),
    (False, "none", "PLAINTEXT", None),
    (True, None, "SSL", None),
    (True, "tls", "SSL", None),
    (False, "scram-sha-512", "SASL_PLAINTEXT", "SCRAM-SHA-512"),
    (True, "scram-sha-512", "SASL_SSL", "SCRAM-SHA-512"),
    (False, "plain", "SASL_PLAINTEXT", "PLAIN"),
    (True, "plain", "SASL_SSL", "PLAIN"),
])
def test_each_listener_gets_its_security_protocol(tls: bool, auth: str | None, protocol: str,
                                                  mechanism: str | None) -> None:
    users = {"listener.name.clients.plain.sasl.jaas.config":
             'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'}
    spec = ClusterSpec.from_resource(cluster({"listeners": {"kafka": [listener("clients", 9092, tls=tls, auth=auth)]},
                                              **({"config": users} if auth == "plain" else {})}))
    config = spec.broker_config()
    assert config["listeners"] == "REPLICATION://:9091,CLIENTS://:9092"
    assert config["listener.security.protocol.map"] == f"REPLICATION:SSL,CLIENTS:{protocol}"
    assert config.get("listener.name.clients.sasl.enabled.mechanisms") == mechanism
    assert config.get("listener.name.clients.ssl.client.auth") == ("required" if auth == "tls" else None)


def test_the_secured_layout_writes_exactly_these_keys() -> None:
    config = secured().broker_config()
    security = {k: v for k, v in config.items() if k not in {
        "cluster.name", "cluster.backend", "kube.namespace", "broker.id.from.hostname", "http.host", "http.port",
        "default.replication.factor", "offsets.topic.replication.factor", "min.insync.replicas"}}
    assert security == {
        "config.providers": "env",
        "config.providers.env.class": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
        "listeners": "REPLICATION://:9091,PLAIN://:9092,TLS://:9093",
        "advertised.listeners": "REPLICATION://${env:POD_NAME}.demo-brokers.team-a.svc:9091,"
                                "PLAIN://${env:POD_NAME}.demo-brokers.team-a.svc:9092,"
                                "TLS://${env:POD_NAME}.demo-brokers.team-a.svc:9093",
        "listener.security.protocol.map": "REPLICATION:SSL,PLAIN:SASL_PLAINTEXT,TLS:SSL",
        "inter.broker.listener.name": "REPLICATION",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": "/etc/kelp/tls/${env:POD_NAME}.pem",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/kelp/tls/clients-ca.crt",
        "ssl.client.auth": "none",
        "listener.name.replication.ssl.truststore.location": "/etc/kelp/tls/cluster-ca.crt",
        "listener.name.replication.ssl.client.auth": "required",
        "listener.name.plain.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.tls.ssl.client.auth": "required",
        "http.ssl.enabled": True,
        "http.ssl.keystore.type": "PEM",
        "http.ssl.keystore.location": "/etc/kelp/tls/${env:POD_NAME}.pem",
        "http.ssl.truststore.type": "PEM",
        "http.ssl.truststore.location": "/etc/kelp/tls/trusted-ca.crt",
        "http.ssl.client.auth": "requested",
        "http.authentication.methods": "mtls,basic",
        "authorizer.class.name": KELP_AUTHORIZER,
        "super.users": "User:CN=kelp-operator,O=kelp.dev;User:CN=demo-broker,O=kelp.dev;User:admin;User:CN=ops",
        "allow.everyone.if.no.acl.found": False,
    }
    assert "host" not in config and "port" not in config  # listeners bind, never the plain layout's host/port
    assert KAFKA_AUTHORIZER == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def test_without_authorization_no_authorizer_and_no_super_users() -> None:
    spec = ClusterSpec.from_resource(cluster({"listeners": {"kafka": [listener("plain", 9092)]}}))
    config = spec.broker_config()
    assert not {"authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found"} & set(config)


def test_pod_ip_advertising_and_replication_without_host_names() -> None:
    spec = secured(advertise="podIP")
    config = spec.broker_config()
    assert config["advertised.listeners"] == ("REPLICATION://${env:POD_IP}:9091,PLAIN://${env:POD_IP}:9092,"
                                              "TLS://${env:POD_IP}:9093")
    assert config["listener.name.replication.ssl.endpoint.identification.algorithm"] == ""


def test_cert_manager_paths() -> None:
    spec = secured({"tls": {"issuerRef": {"name": "kafka-ca"}}})
    config = spec.broker_config()
    assert config["ssl.keystore.location"] == config["http.ssl.keystore.location"] == "/etc/kelp/tls/tls-combined.pem"
    assert {config["ssl.truststore.location"], config["http.ssl.truststore.location"],
            config["listener.name.replication.ssl.truststore.location"]} == {"/etc/kelp/tls/ca.crt"}
    assert spec.broker_tls_secret == "demo-broker-tls" and spec.security is not None
    assert spec.security.issuer is not None and spec.security.issuer.kind == "Issuer"


def test_principal_mapping_rules_decide_the_super_users() -> None:
    rules = "RULE:^CN=([a-zA-Z0-9.-]*),O=kelp.dev$/$1-svc/,DEFAULT"
    assert principal_of("CN=kelp-operator,O=kelp.dev", rules) == "User:kelp-operator-svc"
    assert principal_of("CN=demo-broker,O=kelp.dev", None) == "User:CN=demo-broker,O=kelp.dev"
    spec = secured()
    assert spec.security is not None
    assert spec.security.principals(cluster="demo", mapping_rules=rules) == ("User:demo-broker-svc",
                                                                             "User:kelp-operator-svc")
    with pytest.raises(Exception, match="ssl.principal.mapping.rules"):
        principal_of("CN=kelp-operator,O=kelp.dev", "RULE:^CN=nobody$/x/")


def test_status_listeners_say_where_to_bootstrap() -> None:
    spec = secured({"listeners": {"kafka": [*SECURED["listeners"]["kafka"],
                                            listener("ext", 9094, tls=True, auth="scram-sha-512", kind="external")],
                                  "external": {"type": "LoadBalancer"}}})
    assert spec.security is not None
    assert spec.security.listener_status(name="demo", namespace="team-a", external=["203.0.113.5:9094"]) == [
        {"name": "plain", "type": "internal", "securityProtocol": "SASL_PLAINTEXT",
         "bootstrapServers": "demo.team-a.svc:9092"},
        {"name": "tls", "type": "internal", "securityProtocol": "SSL", "bootstrapServers": "demo.team-a.svc:9093"},
        {"name": "ext", "type": "external", "securityProtocol": "SASL_SSL", "bootstrapServers": "203.0.113.5:9094"}]
    assert spec.bootstrap == "demo.team-a.svc:9092" and spec.external_port == 9094


@pytest.mark.parametrize("spec, message", [
    ({"listeners": {"kafka": [listener("a", 9092), listener("a", 9093)]}}, "listed twice"),
    ({"listeners": {"kafka": [listener("a", 9092), listener("b", 9092)]}}, "already used by listener 'a'"),
    ({"listeners": {"kafka": [listener("a", 9091)]}}, "replication listener"),
    ({"listeners": {"kafka": [listener("a", 8080)]}}, "listeners.httpPort"),
    ({"listeners": {"kafka": [listener("replication", 9092)]}}, "inter-broker listener"),
    ({"listeners": {"kafka": [listener("Plain", 9092)]}}, "lower-case"),
    ({"listeners": {"kafka": [listener("averylongname", 9092)]}}, "15 characters"),
    ({"listeners": {"kafka": [listener("a", 9092, auth="tls")]}}, "needs tls: true"),
    ({"listeners": {"kafka": [listener("a", 9092, auth="kerberos")]}}, "authentication.type"),
    ({"listeners": {"kafka": [listener("e", 9092, kind="external")], "external": {"type": "NodePort"}}},
     "at least one internal"),
    ({"listeners": {"kafka": [listener("a", 9092), listener("e", 9093, kind="external")]}},
     "spec.listeners.external.type"),
    ({"listeners": {"kafka": [listener("a", 9092)], "external": {"type": "NodePort"}}}, "no listener"),
    ({"listeners": {"kafka": [listener("a", 9092), listener("e", 9093, kind="external"),
                              listener("f", 9094, kind="external")], "external": {"type": "NodePort"}}},
     "more than one external"),
    ({"listeners": {"kafka": []}}, "at least one listener"),
    ({"tls": {"renewalDays": 30}}, "spec.tls needs spec.listeners.kafka"),
    ({"authorization": {"type": "simple"}}, "spec.authorization needs spec.listeners.kafka"),
    ({**SECURED, "tls": {"certificateValidityDays": 30, "renewalDays": 30}}, "renewalDays"),
    ({**SECURED, "config": {"ssl.keystore.location": "/x"}}, "ssl.keystore.location, which the operator manages"),
    ({**SECURED, "config": {"super.users": "User:x"}}, "super users under spec.authorization"),
    ({**SECURED, "config": {"listener.name.plain.ssl.client.auth": "none"}}, "which the operator manages"),
    ({**SECURED, "podTemplate": {"metadata": {"annotations": {"kelp.dev/trust-floor": "x"}}}}, "trust-floor"),
])
def test_specs_the_brokers_could_not_run_are_refused(spec: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        ClusterSpec.from_resource(cluster(spec))


def test_what_a_user_may_still_set() -> None:
    for key in ("ssl.cipher.suites", "ssl.enabled.protocols", "ssl.principal.mapping.rules",
                "listener.name.plain.plain.sasl.jaas.config", "connections.max.reauth.ms"):
        assert not owned_by_security(key), key
    for key in ("listeners", "advertised.listeners", "listener.name.tls.ssl.keystore.location", "http.ssl.enabled",
                "authorizer.class.name", "allow.everyone.if.no.acl.found", "config.providers.env.class"):
        assert owned_by_security(key) or key == "listeners", key


def test_the_plain_layout_is_what_it_always_was() -> None:
    """A Cluster without spec.listeners.kafka: one PLAINTEXT listener from host/port, no TLS key; since issue 33
    `http.control.plane.open` (plaintext brokers present no identity to each other's /cluster/v1), so the config
    hash changed once then (an upgrade to it rolls the pods, as the new broker image does)."""
    spec = ClusterSpec.from_resource(cluster({"brokers": 3}))
    assert spec.security is None and not spec.secured
    assert yaml.safe_load(broker_config_yaml(spec)) == {
        "broker.id.from.hostname": True, "cluster.backend": "kube", "cluster.name": "demo",
        "default.replication.factor": "3", "host": "0.0.0.0", "http.host": "0.0.0.0", "http.port": 8080,
        "http.control.plane.open": True, "kube.namespace": "team-a", "min.insync.replicas": "2",
        "offsets.topic.replication.factor": "3", "port": 9092}
    assert config_hash(spec) == "fa2eabcc6d64da86"


def test_the_broker_validator_still_checks_the_users_keys() -> None:
    with pytest.raises(SpecError, match="num.partitions"):
        secured({"config": {"num.partitions": "zero"}})
    # A PLAIN listener's users are the user's to give: without them the brokers could not start.
    with pytest.raises(SpecError, match="listener CLIENTS enables SASL/PLAIN but has no users: set "
                                        "'listener.name.clients.plain.sasl.jaas.config'"):
        ClusterSpec.from_resource(cluster({"listeners": {"kafka": [listener("clients", 9092, auth="plain")]}}))


def test_the_brokers_load_the_secured_layout_as_the_operator_writes_it(tmp_path) -> None:
    """The file the operator mounts, read by the broker's own loader with a pod's environment: every key is one
    the brokers know, and each `${env:...}` resolves to that pod's values."""
    spec = secured()
    path = tmp_path / "broker.yaml"
    path.write_text(broker_config_yaml(spec))
    env = {"POD_NAME": "demo-1", "POD_IP": "10.0.0.7", "HOSTNAME": "demo-1"}
    cfg = BrokerConfig.load(file=path, env=env)
    assert cfg.broker_id == 1
    assert cfg["advertised.listeners"].startswith("REPLICATION://demo-1.demo-brokers.team-a.svc:9091,")
    assert cfg["ssl.keystore.location"] == "/etc/kelp/tls/demo-1.pem"
    assert cfg["authorizer.class.name"] == KELP_AUTHORIZER
    assert cfg["http.authentication.methods"] == ["mtls", "basic"]
