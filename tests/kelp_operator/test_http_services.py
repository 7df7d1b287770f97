"""spec.http: the REST Proxy and Schema Registry switches in the broker config, and the Service `<cluster>-http`.

What a user relies on (docs/operator.md, "HTTP services"): both services are on by default and a Cluster
without spec.http keeps the broker config it had (no roll on upgrade); switching one off writes its broker key
(`http.rest.proxy.enable` / `http.schema.registry.enable` = false); `<cluster>-http` selects the broker pods on
the HTTP port with the type, port and annotations asked for, HTTPS in the secured layout (whose broker
certificates name it), and is deleted with an Event once both services are off; `spec.config` cannot set the
keys; status.httpUrl is its in-cluster URL.
"""

from __future__ import annotations

import asyncio

import kubernetes_validate
import pytest
import yaml

from kelp.operator.manifests.builders import cluster_children, http_service
from kelp.operator.manifests.spec import ClusterSpec, SpecError
from kelp.operator.manifests.tls_builders import broker_dns_names
from kelp.operator.reconcile.cluster import reconcile_cluster
from tests.kelp_operator.fakes import FakeAdmin, FakeKube, admin_of, broker_pod, resource, statefulset

SELECTOR = {"app.kubernetes.io/name": "kelp", "app.kubernetes.io/instance": "demo",
            "app.kubernetes.io/component": "broker"}
SECURED = {"listeners": {"kafka": [{"name": "tls", "port": 9093, "tls": True,
                                    "authentication": {"type": "scram-sha-512"}}]}}


def spec_of(spec: dict) -> ClusterSpec:
    return ClusterSpec.from_resource(resource("Cluster", "demo", spec))


def broker_yaml(spec: ClusterSpec) -> dict:
    cm = next(m for m in cluster_children(spec) if m["kind"] == "ConfigMap")
    return yaml.safe_load(cm["data"]["broker.yaml"])


def test_defaults_serve_both_and_leave_the_broker_config_alone() -> None:
    plain = spec_of({})
    assert plain.rest_proxy and plain.schema_registry and plain.http_service_wanted
    written = broker_yaml(plain)
    assert "http.rest.proxy.enable" not in written and "http.schema.registry.enable" not in written
    # spec.http given with its defaults is the same config (the same hash: no roll)
    assert broker_yaml(spec_of({"http": {"restProxy": {"enabled": True}, "schemaRegistry": {"enabled": True},
                                         "service": {"type": "ClusterIP"}}})) == written
    svc = http_service(plain)
    kubernetes_validate.validate(svc, "1.34", strict=True)
    assert svc["metadata"]["name"] == "demo-http"
    assert svc["metadata"]["ownerReferences"][0]["kind"] == "Cluster"
    assert svc["spec"] == {"type": "ClusterIP", "selector": SELECTOR, "ports": [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP", "appProtocol": "http"}]}
    assert plain.http_url == "http://demo-http.ns.svc:8080"


def test_a_service_switched_off_is_written_into_the_broker_config() -> None:
    spec = spec_of({"http": {"schemaRegistry": {"enabled": False}}})
    written = broker_yaml(spec)
    assert written["http.schema.registry.enable"] is False and "http.rest.proxy.enable" not in written
    assert ("Service", "demo-http") in {(m["kind"], m["metadata"]["name"]) for m in cluster_children(spec)}
    both = spec_of({"http": {"restProxy": {"enabled": False}, "schemaRegistry": {"enabled": False}}})
    written = broker_yaml(both)
    assert written["http.rest.proxy.enable"] is False and written["http.schema.registry.enable"] is False
    assert "Service" not in {m["kind"] for m in cluster_children(both) if m["metadata"]["name"] == "demo-http"}
    assert both.http_url is None


def test_service_type_port_annotations_and_node_port() -> None:
    spec = spec_of({"http": {"service": {"type": "NodePort", "port": 80, "nodePort": 30080,
                                         "annotations": {"example.com/team": "payments"}}}})
    svc = http_service(spec)
    kubernetes_validate.validate(svc, "1.34", strict=True)
    assert svc["spec"]["type"] == "NodePort"
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP",
                                     "appProtocol": "http", "nodePort": 30080}]
    assert svc["metadata"]["annotations"] == {"example.com/team": "payments"}
    assert svc["metadata"]["labels"]["kelp.dev/service"] == "http"
    lb = http_service(spec_of({"http": {"service": {"type": "LoadBalancer"}}}))
    assert lb["spec"]["type"] == "LoadBalancer" and "nodePort" not in lb["spec"]["ports"][0]


def test_secured_layout_is_https_and_the_certificates_name_the_service() -> None:
    spec = spec_of(SECURED)
    svc = http_service(spec)
    assert svc["spec"]["ports"][0]["name"] == "https" and svc["spec"]["ports"][0]["appProtocol"] == "https"
    assert spec.http_url == "https://demo-http.ns.svc:8080"
    names = broker_dns_names(spec, 0)
    assert {"demo-http", "demo-http.ns", "demo-http.ns.svc", "demo-http.ns.svc.cluster.local"} <= set(names)
    off = spec_of({**SECURED, "http": {"restProxy": {"enabled": False}, "schemaRegistry": {"enabled": False}}})
    assert not [n for n in broker_dns_names(off, 0) if "demo-http" in n]


@pytest.mark.parametrize("http, message", [
    ({"service": {"type": "ExternalName"}}, "spec.http.service.type must be one of"),
    ({"service": {"port": 70000}}, "spec.http.service.port must be in 1..65535"),
    ({"service": {"nodePort": 30080}}, "nodePort is only used with type NodePort"),
])
def test_invalid_http_specs_are_refused(http: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec_of({"http": http})


def test_spec_config_cannot_set_the_switches() -> None:
    with pytest.raises(SpecError, match="http.rest.proxy.enable.*spec.http"):
        spec_of({"config": {"http.rest.proxy.enable": "false"}})


def run(body: dict, kube: FakeKube) -> dict:
    admin = FakeAdmin(brokers=[0, 1, 2], topics={})
    status, _conditions = asyncio.run(reconcile_cluster(body, kube, admin_of(admin)))
    return dict(status)


def test_the_service_is_applied_then_deleted_when_both_are_switched_off() -> None:
    body = resource("Cluster", "demo", {"http": {"service": {"type": "LoadBalancer", "port": 443}}})
    kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
    status = run(body, kube)
    applied = kube.objects[("Service", "ns", "demo-http")]
    assert applied["spec"]["type"] == "LoadBalancer" and applied["spec"]["ports"][0]["port"] == 443
    assert status["httpUrl"] == "http://demo-http.ns.svc:443"
    body = resource("Cluster", "demo", {"http": {"restProxy": {"enabled": False},
                                                 "schemaRegistry": {"enabled": False}}})
    kube.put(body)
    status = run(body, kube)
    assert ("Service", "ns", "demo-http") not in kube.objects
    assert status["httpUrl"] is None
    assert len(kube.events("HttpServiceRemoved")) == 1
    config = yaml.safe_load(kube.objects[("ConfigMap", "ns", "demo-config")]["data"]["broker.yaml"])
    assert config["http.rest.proxy.enable"] is False and config["http.schema.registry.enable"] is False
    run(body, kube)  # nothing left to delete: no second Event
    assert len(kube.events("HttpServiceRemoved")) == 1
