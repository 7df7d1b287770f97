"""One Cluster reconciliation with the brokers scripted (FakeAdmin) and the API server faked (FakeKube).

What a user relies on, each the regression test of a finding of issue 18:
- a scale-down whose staying broker is dead neither crashes the operator
  nor leaves Ready=True: the condition names the dead broker (finding 3);
- a roll does not wait forever for pods that are not Ready, even when no
  broker answers (finding 2, at the reconciliation level);
- scaling a cluster does not change its brokers' config, so it rolls no pod
  (finding 7);
- a child the API server refuses (400/403/422) is `ApplyRefused` naming it
  and the server's message, never a failed pass;
- `kelp.dev/pause-reconciliation` stops every change, `kelp.dev/manual-rolling-update`
  restarts every pod once, and each decision leaves an Event.
"""

from __future__ import annotations

import asyncio

import pytest
import yaml

from kelp.kube.api import KubeApiError
from kelp.operator.manifests.builders import config_hash
from kelp.operator.manifests.spec import ClusterSpec
from kelp.operator.reconcile.cluster import reconcile_cluster
from kelp.operator.reconcile.runner import Runner
from tests.kelp_operator.fakes import FakeAdmin, FakeKube, admin_of, broker_pod, resource, statefulset


def run(body: dict, kube: FakeKube, admin: FakeAdmin, **kw):
    return asyncio.run(reconcile_cluster(body, kube, admin_of(admin), **kw))


def cond(conds: list[dict], type_: str) -> dict:
    return next(c for c in conds if c["type"] == type_)


def three_broker_topics() -> dict[str, list[dict]]:
    return {"orders": [{"replicas": [0, 1, 2], "isr": [0, 1, 2]}, {"replicas": [1, 2, 0], "isr": [1, 2, 0]},
                       {"replicas": [2, 0, 1], "isr": [2, 0, 1]}]}


def test_scale_down_with_a_dead_staying_broker_is_reported_not_raised() -> None:
    # 3 -> 2 brokers; broker 1 (which stays) is dead: not registered, its pod not Ready.
    body = resource("Cluster", "demo", {"brokers": 2})
    kube = FakeKube(body, statefulset("demo", 3, ready=2), broker_pod("demo", 0), broker_pod("demo", 1, ready=False),
                    broker_pod("demo", 2))
    admin = FakeAdmin(brokers=[0, 2], controller=0, topics={"orders": [
        {"replicas": [2, 0], "isr": [2, 0]}, {"replicas": [0, 2], "isr": [0, 2]}]})

    def refuse(method, path, body):
        if path == "/admin/v1/partitions/reassign":
            from kelp.operator.reconcile.brokers import AdminError
            raise AdminError(400, "POST /admin/v1/partitions/reassign: broker 1 is not alive")
    admin.fail = refuse
    status, conds = run(body, kube, admin)
    ready, progressing = cond(conds, "Ready"), cond(conds, "Progressing")
    assert ready["status"] == "False" and ready["reason"] == "BrokersMissing" and "[1]" in ready["message"], ready
    assert progressing["reason"] == "DrainBlocked" and "staying broker(s) [1]" in progressing["message"], progressing
    assert kube.objects[("StatefulSet", "ns", "demo")]["spec"]["replicas"] == 3, "must not shrink before the drain"
    assert admin.reassign_calls() == [], "nothing may move onto a dead broker"
    assert kube.events("DrainBlocked"), "the decision is an Event too"
    assert status["brokers"] == 1 and status["readyBrokers"] == "1/2"


def test_a_refused_drain_is_a_condition() -> None:
    body = resource("Cluster", "demo", {"brokers": 2})
    kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
    admin = FakeAdmin(brokers=[0, 1, 2], topics={"orders": [{"replicas": [2, 0], "isr": [2, 0]}]})

    def refuse(method, path, body):
        if path == "/admin/v1/partitions/reassign":
            from kelp.operator.reconcile.brokers import AdminError
            raise AdminError(409, "POST /admin/v1/partitions/reassign: the controller is moving")
    admin.fail = refuse
    _, conds = run(body, kube, admin)
    progressing = cond(conds, "Progressing")
    assert progressing["status"] == "False" and progressing["reason"] == "DrainRefused"
    assert "the controller is moving" in progressing["message"]


def test_unready_outdated_pods_restart_even_when_no_broker_answers() -> None:
    # A config change the brokers need in order to start at all: every pod crash-loops on the old revision.
    body = resource("Cluster", "demo", {"brokers": 3})
    sts = statefulset("demo", 3, ready=0, revision="rev-2")
    kube = FakeKube(body, sts, *(broker_pod("demo", n, revision="rev-1", ready=False, waiting="CrashLoopBackOff")
                                 for n in range(3)))
    admin = FakeAdmin(brokers=[])
    admin.unreachable = True
    _, conds = run(body, kube, admin)
    assert ("Pod", "demo-2") in kube.deleted, conds
    assert cond(conds, "Progressing")["reason"] == "RestartingUnready"
    assert cond(conds, "Ready")["status"] == "False"


@pytest.mark.parametrize("start, grown", [(1, 3), (2, 4), (3, 5)])
def test_scaling_keeps_the_replication_defaults_and_rolls_nothing(start: int, grown: int) -> None:
    body = resource("Cluster", "demo", {"brokers": start})
    kube = FakeKube(body)
    admin = FakeAdmin(brokers=list(range(start)))
    run(body, kube, admin)
    first = kube.objects[("ConfigMap", "ns", "demo-config")]
    first_hash = kube.objects[("StatefulSet", "ns", "demo")]["spec"]["template"]["metadata"]["annotations"]
    config = yaml.safe_load(first["data"]["broker.yaml"])
    assert config["default.replication.factor"] == str(min(3, start))
    assert config["min.insync.replicas"] == str(min(2, start))

    body["spec"]["brokers"] = grown
    body["metadata"]["generation"] = 2
    kube.put(body)
    run(body, kube, admin)
    after = kube.objects[("ConfigMap", "ns", "demo-config")]
    assert after["data"] == first["data"], "scaling must not change the brokers' config"
    assert kube.objects[("StatefulSet", "ns", "demo")]["spec"]["template"]["metadata"]["annotations"] == first_hash
    assert kube.objects[("StatefulSet", "ns", "demo")]["spec"]["replicas"] == grown
    if start != 1:
        return
    # The builders agree: a spec created at 3 brokers keeps 3's defaults whatever it grows to.
    at3 = ClusterSpec.from_resource(resource("Cluster", "d", {"brokers": 3}))
    at5 = ClusterSpec.from_resource(resource("Cluster", "d", {"brokers": 5}),
                                    pinned_defaults=at3.replication_defaults())
    assert config_hash(at3) == config_hash(at5)
    # An explicit spec.config still wins over the pinned defaults.
    body["spec"]["config"] = {"default.replication.factor": "3"}
    kube.put(body)
    run(body, kube, admin)
    assert yaml.safe_load(kube.objects[("ConfigMap", "ns", "demo-config")]["data"]["broker.yaml"])[
        "default.replication.factor"] == "3"


def test_paused_cluster_changes_nothing_but_still_reports() -> None:
    body = resource("Cluster", "demo", {"brokers": 4}, annotations={"kelp.dev/pause-reconciliation": "true"})
    kube = FakeKube(body, statefulset("demo", 3, revision="rev-2"),
                    *(broker_pod("demo", n, revision="rev-1") for n in range(3)))
    admin = FakeAdmin(brokers=[0, 1, 2], topics=three_broker_topics())
    status, conds = run(body, kube, admin)
    assert kube.applied == [] and kube.deleted == [] and admin.reassign_calls() == []
    assert cond(conds, "Progressing")["reason"] == "ReconciliationPaused"
    assert status["controller"] == 0 and status["readyBrokers"] == "3/4"
    assert kube.events("ReconciliationPaused")


def test_manual_rolling_update_restarts_every_pod_once() -> None:
    body = resource("Cluster", "demo", {"brokers": 3}, annotations={"kelp.dev/manual-rolling-update": "true"})
    kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
    admin = FakeAdmin(brokers=[0, 1, 2], controller=0, topics=three_broker_topics())
    _, conds = run(body, kube, admin)
    # Every pod marked, the Cluster's annotation consumed, the first restart done (highest ordinal, not the controller).
    marked = [n for n in range(3) if ("Pod", "ns", f"demo-{n}") not in kube.objects
              or kube.objects[("Pod", "ns", f"demo-{n}")]["metadata"]["annotations"].get(
                  "kelp.dev/manual-rolling-update") == "true"]
    assert marked == [0, 1, 2]
    assert "kelp.dev/manual-rolling-update" not in kube.objects[("Cluster", "ns", "demo")]["metadata"]["annotations"]
    assert kube.deleted == [("Pod", "demo-2")] and cond(conds, "Progressing")["reason"] == "RollingRestart"
    assert kube.events("ManualRollingUpdate") and kube.events("RollingRestart")


def test_the_override_annotation_lets_a_roll_past_the_min_insync_rule() -> None:
    # Both partitions have exactly min.insync.replicas (2) in sync and every broker is in one of those ISRs:
    # restarting any broker takes a partition below, so the roll is blocked and says which partitions block;
    # the Cluster annotation lets it through.
    topics = {"orders": [{"replicas": [0, 1, 2], "isr": [1, 2]}, {"replicas": [1, 2, 0], "isr": [1, 0]}]}
    for notes, restarted in (({}, False), ({"kelp.dev/restart-ignore-min-insync": "true"}, True)):
        body = resource("Cluster", "demo", {"brokers": 3}, annotations=notes)
        kube = FakeKube(body, statefulset("demo", 3, revision="rev-2"),
                        *(broker_pod("demo", n, revision="rev-1") for n in range(3)))
        admin = FakeAdmin(brokers=[0, 1, 2], controller=0, topics=topics)
        _, conds = run(body, kube, admin)
        progressing = cond(conds, "Progressing")
        if restarted:
            assert kube.deleted == [("Pod", "demo-2")], (notes, progressing)
            assert progressing["reason"] == "RollingRestart"
        else:
            assert kube.deleted == [], progressing
            assert progressing["reason"] == "RestartBlocked" and "orders-0" in progressing["message"], progressing
            assert "kelp.dev/restart-ignore-min-insync" in progressing["message"], "the way out is named"


def test_the_override_annotation_is_one_shot() -> None:
    # Issue 32, item 4: the override used to stay for good, so every later roll skipped the availability check.
    # Once the roll it let through is done, the operator removes it; set while no roll runs, it waits for one.
    key = "kelp.dev/restart-ignore-min-insync"
    rolling = {"conditions": [{"type": "Progressing", "status": "True", "reason": "RollingRestart", "message": "",
                               "lastTransitionTime": "2026-11-01T00:00:00Z"}]}
    body = resource("Cluster", "demo", {"brokers": 3}, annotations={key: "true"}, status=rolling)
    kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
    admin = FakeAdmin(brokers=[0, 1, 2], controller=0, topics=three_broker_topics())
    run(body, kube, admin)
    assert key not in kube.objects[("Cluster", "ns", "demo")]["metadata"]["annotations"], "the roll is done"
    assert kube.events("RestartOverrideRemoved")
    # Set between rolls (the previous pass reconciled, no election owed): kept for the roll to come.
    settled = {"conditions": [{**rolling["conditions"][0], "reason": "Reconciled", "status": "False"}]}
    body = resource("Cluster", "demo", {"brokers": 3}, annotations={key: "true"}, status=settled)
    kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
    run(body, kube, admin)
    assert kube.objects[("Cluster", "ns", "demo")]["metadata"]["annotations"][key] == "true"
    assert not kube.events("RestartOverrideRemoved")


def test_a_topic_created_during_the_scale_down_never_strands_replicas_on_a_broker_that_goes() -> None:
    # Issue 32, item 1: 4 -> 3 while an application auto-creates topics. The drain decided "broker 3 holds
    # nothing" from the pass's observation and the same pass shrank the StatefulSet; a topic created just after
    # the observation (placed on every live broker, as the controller does) lost its replicas on broker 3.
    body = resource("Cluster", "demo", {"brokers": 3})
    kube = FakeKube(body, statefulset("demo", 4), *(broker_pod("demo", n) for n in range(4)))
    admin = FakeAdmin(brokers=[0, 1, 2, 3], topics=three_broker_topics())
    created: list[str] = []

    def auto_create(method, path, _body):
        # Right after each pass has described the topics it listed, an application creates another one.
        if (method, path) == ("GET", "/admin/v1/topics/orders"):
            created.append(f"auto-{len(created)}")
            admin.create_everywhere(created[-1], partitions=4)
    admin.fail = auto_create
    held_at_shrink: list[dict] = []

    async def on_apply(manifest) -> None:
        if manifest["kind"] == "StatefulSet" and manifest["spec"]["replicas"] == 3:
            held_at_shrink.append(admin.held(3))
    kube.hooks[("apply", "StatefulSet")] = on_apply
    _, conds = run(body, kube, admin)
    assert held_at_shrink == [], f"shrunk while broker 3 held {held_at_shrink}"
    assert kube.objects[("StatefulSet", "ns", "demo")]["spec"]["replicas"] == 4
    assert admin.decommissioned == {3}, "the brokers that go are decommissioned first"
    assert cond(conds, "Progressing")["reason"] == "Draining" and "auto-0" in cond(conds, "Progressing")["message"]
    assert kube.events("BrokersDecommissioned")
    for _ in range(6):  # the drain moves what landed before the mark; whatever is created later avoids broker 3
        for name, parts in admin.topics.items():
            for i, part in enumerate(parts):
                if part.get("adding") or part.get("removing"):
                    admin.complete(name, i)
        run(kube.objects[("Cluster", "ns", "demo")], kube, admin)
        if kube.objects[("StatefulSet", "ns", "demo")]["spec"]["replicas"] == 3:
            break
    assert kube.objects[("StatefulSet", "ns", "demo")]["spec"]["replicas"] == 3, "the drain finished"
    assert len(held_at_shrink) == 1 and held_at_shrink[0]["replicas"] == 0, held_at_shrink
    assert len(created) >= 3 and all(3 not in p["replicas"] for n in created[1:] for p in admin.topics[n])


def test_ids_the_cluster_keeps_are_recommissioned() -> None:
    # A scale-down undone (or a scale-up reusing the ids): brokers below spec.brokers take replicas again, so the
    # rebalance onto them is not refused.
    body = resource("Cluster", "demo", {"brokers": 3})
    kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
    admin = FakeAdmin(brokers=[0, 1, 2], topics=three_broker_topics())
    admin.decommissioned = {2, 5}
    run(body, kube, admin)
    assert admin.decommissioned == {5}, "only ids below spec.brokers are the Cluster's to recommission"
    assert "[2]" in kube.events("BrokersRecommissioned")[0]["message"]


def test_the_scale_down_shrink_is_fenced_and_recorded() -> None:
    # 3 -> 2 and broker 2 holds nothing any more: the StatefulSet shrinks (its pod is deleted by Kubernetes),
    # which is an availability decision like a pod delete: leadership proven first, an Event recorded.
    body = resource("Cluster", "demo", {"brokers": 2})
    kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
    admin = FakeAdmin(brokers=[0, 1, 2], topics={"orders": [{"replicas": [0, 1], "isr": [0, 1]}]})
    fences_at_apply: list[int] = []

    async def on_apply(manifest) -> None:
        if manifest["kind"] == "StatefulSet":
            fences_at_apply.append(kube.fences)
    kube.hooks[("apply", "StatefulSet")] = on_apply
    run(body, kube, admin)
    assert kube.objects[("StatefulSet", "ns", "demo")]["spec"]["replicas"] == 2
    # One fence for the decommission, one for the shrink itself, after the controller's confirmation.
    assert fences_at_apply == [2], "the shrink must follow a fence"
    confirm = admin.requests.index(("GET", "/admin/v1/brokers/2/decommission", None))
    assert [m for m, _p, _b in admin.requests[confirm + 1:]].count("POST") == 0
    assert "broker(s) [2]" in kube.events("ScaleDown")[0]["message"]


def test_a_dynamic_config_change_is_applied_without_a_roll_and_the_spec_owns_the_default_entity() -> None:
    body = resource("Cluster", "demo", {"brokers": 3, "config": {"log.retention.ms": "3600000"}})
    kube = FakeKube(body)
    admin = FakeAdmin(brokers=[0, 1, 2], controller=0, topics=three_broker_topics())
    admin.dynamic = {"log.segment.bytes": "1048576"}  # set by hand with kafka-configs: not in the spec
    run(body, kube, admin)  # no broker pod yet: applied once the brokers answer
    assert admin.dynamic == {"log.segment.bytes": "1048576"}
    template = kube.objects[("StatefulSet", "ns", "demo")]["spec"]["template"]
    kube.put(statefulset("demo", 3))
    kube.objects[("StatefulSet", "ns", "demo")]["spec"]["template"] = template
    for n in range(3):
        kube.put(broker_pod("demo", n))
    run(body, kube, admin)
    assert admin.dynamic == {"log.retention.ms": "3600000"}
    assert "log.retention.ms" not in kube.objects[("ConfigMap", "ns", "demo-config")]["data"]["broker.yaml"]
    assert "log.retention.ms=3600000" in kube.events("BrokerConfigUpdated")[0]["message"]

    # Changing the retention (and min.insync) changes what the brokers run, not the pod template.
    body["spec"]["config"] = {"log.retention.ms": "7200000", "min.insync.replicas": "1"}
    body["metadata"]["generation"] = 2
    kube.put(body)
    _, conds = run(body, kube, admin)
    assert admin.dynamic == {"log.retention.ms": "7200000", "min.insync.replicas": "1"}
    assert kube.objects[("StatefulSet", "ns", "demo")]["spec"]["template"] == template, "no roll for a dynamic key"
    assert kube.deleted == [] and cond(conds, "Progressing")["reason"] != "RollingRestart"
    patches = [b for m, p, b in admin.requests if (m, p) == ("PATCH", "/admin/v1/brokers/configs")]
    assert len(patches) == 2
    run(body, kube, admin)  # nothing differs: nothing sent
    assert len([1 for m, p, _ in admin.requests if (m, p) == ("PATCH", "/admin/v1/brokers/configs")]) == 2


def test_a_refused_dynamic_config_is_a_condition() -> None:
    body = resource("Cluster", "demo", {"brokers": 3, "config": {"log.retention.ms": "3600000"}})
    kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
    admin = FakeAdmin(brokers=[0, 1, 2], controller=0, topics=three_broker_topics())

    def refuse(method, path, body):
        if method == "PATCH" and path == "/admin/v1/brokers/configs":
            from kelp.operator.reconcile.brokers import AdminError
            raise AdminError(422, "log.retention.ms: the controller refused it")
    admin.fail = refuse
    _, conds = run(body, kube, admin)
    progressing = cond(conds, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "BrokerConfigRefused")
    assert "the controller refused it" in progressing["message"] and kube.events("BrokerConfigRefused")


def test_a_child_the_api_server_refuses_is_a_condition_and_other_failures_are_retried() -> None:
    # A policy webhook refuses the PodDisruptionBudget (403): a user must read which object and why, and the rest
    # of the pass (status, observation) still happens. A 500 is no refusal: the pass fails and is retried.
    denied = 'admission webhook "policy.example.com" denied the request: maxUnavailable must be 0 in namespace ns'

    def refuse(status: int, message: str):
        async def hook(manifest) -> None:
            raise KubeApiError(status, message)
        return hook
    body = resource("Cluster", "demo", {"brokers": 3})
    kube = FakeKube(body, statefulset("demo", 3), *(broker_pod("demo", n) for n in range(3)))
    admin = FakeAdmin(brokers=[0, 1, 2], controller=0, topics=three_broker_topics())
    kube.hooks[("apply", "PodDisruptionBudget")] = refuse(403, denied)
    assert asyncio.run(Runner(kube, admin_of(admin)).reconcile("Cluster", "ns", "demo"))
    conds = {c["type"]: c for c in kube.objects[("Cluster", "ns", "demo")]["status"]["conditions"]}
    assert (conds["Progressing"]["status"], conds["Progressing"]["reason"]) == ("False", "ApplyRefused")
    assert "refused PodDisruptionBudget demo" in conds["Progressing"]["message"]
    assert "Kubernetes API answered 403: " + denied in conds["Progressing"]["message"]
    assert conds["Ready"]["reason"] == "ClusterReady", "what was observed is still reported"
    assert kube.events("ApplyRefused")[0]["type"] == "Warning"

    kube.hooks[("apply", "PodDisruptionBudget")] = refuse(500, "etcdserver: request timed out")
    with pytest.raises(KubeApiError):
        asyncio.run(Runner(kube, admin_of(admin)).reconcile("Cluster", "ns", "demo"))
    ready = next(c for c in kube.objects[("Cluster", "ns", "demo")]["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("Unknown", "ReconcileFailed")
