"""Kelp end to end on a real Kubernetes cluster: helm install, the examples, records across a broker
pod deletion, consumer-group lag, uninstall and namespace deletion.

Why: the unit, chart and kube tiers each check a part against fakes or a
control plane without a kubelet; this is the one place where the chart, the
operator, the image, real broker pods with persistent volumes, cluster DNS
and Kafka clients run together, as a user runs them. See e2e/README.md.

The tests are one story and run in file order on one namespace (fixtures in
conftest.py): the operator is installed, examples/ applied, the Cluster
`demo` becomes Ready; records are produced with acks=all from a pod in the
cluster while a broker pod is deleted, and every acknowledged record must
be read back; a consumer group commits part of the topic and the
ConsumerGroup status must show the rest as lag; the last test uninstalls
the chart and deletes the namespace, which must finish (no finalizer left
waiting for an operator that is gone).

Without a reachable cluster the whole module is skipped with one line
(the reason comes from target.py); KELP_E2E_REQUIRE=1 fails instead.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Any

import pytest

from .deploy import BROKERS, CLUSTER, NAMESPACE_GONE_TIMEOUT_S, READY_TIMEOUT_S, RELEASE, cluster_ready, helm
from .kube import Kubectl, Pending, condition
from .target import Target, find_target, flag

# No cluster: skip the whole module with one line (exit 0, see conftest.py), or fail with KELP_E2E_REQUIRE=1.
if isinstance(find_target(), str):
    if flag("KELP_E2E_REQUIRE"):
        pytest.fail(str(find_target()), pytrace=False)
    pytest.skip(str(find_target()), allow_module_level=True)

# Each step's own waits are bounded; this bounds a whole test, the first one including
# the image build and load (docker build of the Kelp image can take several minutes).
pytestmark = pytest.mark.timeout(3600)

TOPIC = "orders"
PARTITIONS = 6
REPLICATION = 3
GROUP = "orders-audit"
PRODUCE_COUNT = 3000
PRODUCE_SECONDS = 60
DELETE_AFTER_ACKS = 500
ISR_TIMEOUT_S = 300.0
CLIENT_START_TIMEOUT_S = 240.0
LAG_TIMEOUT_S = 240.0


def _topic_in_sync(kube: Kubectl) -> dict[str, Any] | Pending:
    """The Topic when Ready with every partition led and its ISR equal to its replicas."""
    topic = kube.get("topic", TOPIC)
    status = (topic or {}).get("status") or {}
    states = status.get("partitionStates") or []
    ready = condition(topic, "Ready").get("status")
    lagging = [s["partition"] for s in states
               if s.get("leader", -1) not in s.get("replicas", []) or sorted(s.get("isr", [])) != sorted(s["replicas"])]
    if ready == "True" and len(states) == PARTITIONS and not lagging:
        return topic  # type: ignore[return-value]
    return Pending(f"Ready={ready}, {len(states)} partition states, partitions not in sync: {lagging}")


def _pod_ready(pod: dict[str, Any] | None) -> bool:
    return condition(pod, "Ready").get("status") == "True"


def test_operator_installed_by_helm_holds_the_election_lease(kube: Kubectl, operator_release: str,
                                                              namespace: str) -> None:
    deployment = kube.get("deployment", RELEASE)
    assert deployment is not None, f"helm install created no Deployment {RELEASE}"
    assert deployment["status"].get("readyReplicas") == deployment["spec"]["replicas"], deployment["status"]
    assert kube.get("clusterrole", f"{RELEASE}-{namespace}", namespaced=False) is not None
    pods = {p["metadata"]["name"] for p in kube.items("pods", "app.kubernetes.io/component=operator",
                                                       f"app.kubernetes.io/instance={RELEASE}")}

    def held() -> str | Pending:
        lease = kube.get("lease", "kelp-operator")
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        return holder if holder in pods else Pending(f"holder {holder!r}, operator pods {sorted(pods)}")

    kube.wait_until("an operator pod to hold Lease kelp-operator", held, timeout=120)


def test_cluster_demo_becomes_ready_with_its_status(kube: Kubectl, demo: dict[str, Any], namespace: str) -> None:
    status = demo["status"]
    assert status["bootstrap"] == f"{CLUSTER}.{namespace}.svc:9092"
    assert status["controller"] in range(BROKERS)
    sts = kube.get("statefulset", CLUSTER)
    assert sts is not None and sts["status"].get("readyReplicas") == BROKERS, (sts or {}).get("status")
    pods = kube.items("pods", f"app.kubernetes.io/instance={CLUSTER}", "app.kubernetes.io/component=broker")
    assert sorted(p["metadata"]["name"] for p in pods) == [f"{CLUSTER}-{n}" for n in range(BROKERS)]
    assert all(_pod_ready(p) for p in pods)

    def settled() -> dict[str, Any] | Pending:
        obj = kube.get("cluster", CLUSTER)
        progressing, degraded = condition(obj, "Progressing"), condition(obj, "Degraded")
        if condition(obj, "Ready").get("status") == "True" and progressing.get("status") == "False" \
                and degraded.get("status") == "False":
            return obj  # type: ignore[return-value]
        return Pending(f"Progressing={progressing.get('status')} ({progressing.get('message')}), "
                       f"Degraded={degraded.get('status')} ({degraded.get('message')})")

    kube.wait_until(f"Cluster {CLUSTER} neither Progressing nor Degraded", settled, timeout=ISR_TIMEOUT_S)


def test_topic_orders_ready_with_six_partitions(kube: Kubectl, demo: dict[str, Any]) -> None:
    topic = kube.wait_until(f"Topic {TOPIC} Ready with every partition in sync", lambda: _topic_in_sync(kube),
                            timeout=ISR_TIMEOUT_S)
    status = topic["status"]
    assert status["topicName"] == TOPIC
    assert status["partitions"] == PARTITIONS
    assert status["replicationFactor"] == REPLICATION
    states = status["partitionStates"]
    assert sorted(s["partition"] for s in states) == list(range(PARTITIONS))
    assert all(len(set(s["replicas"])) == REPLICATION and set(s["replicas"]) <= set(range(BROKERS)) for s in states)


def test_acknowledged_records_survive_a_broker_pod_deletion(kube: Kubectl, demo: dict[str, Any]) -> None:
    kube.wait_until(f"Topic {TOPIC} in sync before producing", lambda: _topic_in_sync(kube), timeout=ISR_TIMEOUT_S)
    bootstrap = demo["status"]["bootstrap"]
    tag = f"e2e-{secrets.token_hex(3)}"
    kube.start_client_pod("e2e-producer", "produce_acked", bootstrap, TOPIC, str(PRODUCE_COUNT),
                          str(PRODUCE_SECONDS), tag)

    def acked_so_far() -> int | Pending:
        phase = (((kube.get("pod", "e2e-producer") or {}).get("status")) or {}).get("phase")
        if phase in ("Failed", "Succeeded"):
            raise AssertionError(f"the producer pod ended ({phase}) before the broker pod was deleted:\n"
                                 f"{kube.logs('e2e-producer')[-4000:]}")
        log = kube.logs("e2e-producer", tail=3)
        found = re.findall(r"progress sent=(\d+) acked=(\d+)", log)
        acked = int(found[-1][1]) if found else 0
        return acked if acked >= DELETE_AFTER_ACKS else Pending(f"acked {acked}; log tail: {log.strip()[-300:]}")

    acked_at_delete = kube.wait_until(f"the producer to have {DELETE_AFTER_ACKS} records acknowledged",
                                      acked_so_far, timeout=CLIENT_START_TIMEOUT_S, interval=1.0)
    controller = int(((kube.get("cluster", CLUSTER) or {}).get("status") or {}).get("controller", -1))
    victim = f"{CLUSTER}-{controller if controller >= 0 else 0}"
    old = kube.get("pod", victim)
    assert old is not None
    kube.run("delete", "pod", victim, "--wait=false")
    assert acked_at_delete < PRODUCE_COUNT, "the producer finished before the broker pod was deleted"

    produced = kube.client_pod_result("e2e-producer", timeout=PRODUCE_SECONDS + 360)

    def replaced() -> dict[str, Any] | Pending:
        pod = kube.get("pod", victim)
        if pod and pod["metadata"]["uid"] != old["metadata"]["uid"] and _pod_ready(pod):
            return pod
        return Pending(f"{victim}: uid {(pod or {}).get('metadata', {}).get('uid')}, ready {_pod_ready(pod)}")

    kube.wait_until(f"broker pod {victim} to be replaced and Ready", replaced, timeout=READY_TIMEOUT_S)
    kube.wait_until(f"Cluster {CLUSTER} Ready again", lambda: cluster_ready(kube), timeout=READY_TIMEOUT_S)
    kube.wait_until(f"Topic {TOPIC} back in sync", lambda: _topic_in_sync(kube), timeout=ISR_TIMEOUT_S)

    consumed = kube.run_client_pod("e2e-consumer", "consume_all", bootstrap, TOPIC, "240", timeout=420)
    assert consumed["complete"], f"the consumer stopped short: position {consumed['position']}, end {consumed['end']}"
    read = {(int(p), offset): value for p, records in consumed["records"].items() for offset, value in records}
    acked = produced["acked"]
    assert acked, f"no record was acknowledged: {produced['failed']}"
    missing = [(p, o, f"{tag}-{i}", read.get((p, o))) for p, o, i in acked if read.get((p, o)) != f"{tag}-{i}"]
    assert not missing, (f"{len(missing)} of {len(acked)} acknowledged records are missing or differ after deleting "
                         f"{victim} (partition, offset, acknowledged value, value read), first 20: {missing[:20]}")
    # Availability: with min.insync.replicas 2 and one broker of three away, acks=all writes go on.
    assert produced["failedCount"] == 0 and len(acked) == PRODUCE_COUNT, (
        f"{produced['failedCount']} of {PRODUCE_COUNT} records were not acknowledged while {victim} was replaced: "
        f"{produced['failed']}")


def test_consumer_group_status_shows_lag_after_a_commit(kube: Kubectl, demo: dict[str, Any]) -> None:
    bootstrap = demo["status"]["bootstrap"]
    produced = kube.run_client_pod("e2e-lag-producer", "produce_acked", bootstrap, TOPIC, "600", "5",
                                   f"lag-{secrets.token_hex(3)}", timeout=CLIENT_START_TIMEOUT_S + 120)
    assert produced["failedCount"] == 0, produced["failed"]
    committed = kube.run_client_pod("e2e-group", "group_commit", bootstrap, TOPIC, GROUP, "100", "180",
                                    timeout=CLIENT_START_TIMEOUT_S + 180)
    consumed = committed["consumed"]
    assert 0 < consumed <= 100
    assert sum(v for v in committed["committed"].values() if v is not None) == consumed, committed

    def reported() -> dict[str, Any] | Pending:
        group = kube.get("consumergroup", GROUP)
        status = (group or {}).get("status") or {}
        offsets = status.get("offsets") or []
        total = sum(o["committedOffset"] for o in offsets if o.get("topic") == TOPIC and o["committedOffset"] >= 0)
        if status.get("state") == "Empty" and total == consumed and status.get("totalLag"):
            return group  # type: ignore[return-value]
        return Pending(f"state {status.get('state')}, committed total {total} (want {consumed}), "
                       f"totalLag {status.get('totalLag')}")

    group = kube.wait_until(f"ConsumerGroup {GROUP} to show the commit and the lag", reported, timeout=LAG_TIMEOUT_S)
    status = group["status"]
    assert status["members"] == 0
    assert condition(group, "Ready").get("status") == "True", status["conditions"]
    for o in status["offsets"]:
        if o["committedOffset"] >= 0:
            assert o["lag"] == o["logEndOffset"] - o["committedOffset"], o
    assert status["totalLag"] == sum(o.get("lag") or 0 for o in status["offsets"])
    assert status["totalLag"] >= produced["sent"] - consumed


def test_uninstall_then_namespace_deletion_completes(kube: Kubectl, target: Target, helm_home: Path, namespace: str,
                                                     demo: dict[str, Any], operator_release: str) -> None:
    if flag("KELP_E2E_KEEP"):
        pytest.skip("KELP_E2E_KEEP is set: the release and the namespace stay")
    # Nothing waits for the operator: a Cluster, a ConsumerGroup and a Topic with deletePolicy
    # retain carry no finalizer (docs/operator.md).
    for kind in ("clusters", "topics", "consumergroups"):
        for obj in kube.items(kind):
            assert not obj["metadata"].get("finalizers"), (kind, obj["metadata"]["name"], obj["metadata"]["finalizers"])

    helm(target, helm_home, "uninstall", RELEASE, "--namespace", namespace, "--wait", "--timeout", "300s")
    assert kube.get("deployment", RELEASE) is None
    assert kube.get("clusterrole", f"{RELEASE}-{namespace}", namespaced=False) is None
    # helm keeps CRDs, so the Kelp resources outlive the operator.
    assert kube.get("customresourcedefinition", "clusters.kelp.dev", namespaced=False) is not None
    assert kube.get("cluster", CLUSTER) is not None

    kube.run("delete", "namespace", namespace, "--wait=false", namespaced=False)

    def gone() -> bool | Pending:
        ns = kube.get("namespace", namespace, namespaced=False)
        if ns is None:
            return True
        conds = [f"{c.get('type')}: {c.get('message')}" for c in (ns.get("status") or {}).get("conditions") or []
                 if c.get("status") == "True"]
        return Pending(f"phase {(ns.get('status') or {}).get('phase')}; {conds}")

    kube.wait_until(f"namespace {namespace} to be deleted", gone, timeout=NAMESPACE_GONE_TIMEOUT_S, interval=5.0)
