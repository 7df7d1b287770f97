"""Churn on real broker pods: rolls, scaling, kills, a stopped kubelet and a lost volume lose nothing.

Issue 18's churn suite. Each case runs, on the kube tier's real kubelet,
two idempotent acks=all producers and a two-member consumer group on a
fresh 6-partition topic (RF 3, min.insync.replicas 2) from before the
churn until after the cluster has settled again, then checks
(`churn_check`): every acknowledged record present exactly once at its
acknowledged offset, each producer's records in order per partition,
everything the group was served still in the log as served, the group
caught up, every replica byte-identical on disk below the high watermark,
and no producer gave up on a record. The cases:

(a) a rolling restart from a config change;
(b) scale 3→5 (the operator rebalances onto the new brokers), then 5→3
    (it drains brokers 3 and 4 before the StatefulSet shrinks) — 3→4→3
    in the short form;
(c) a broker container SIGKILLed while the roll restarts another broker;
(d) the active operator pod's container SIGKILLed while it drains a
    scale-down 4→3 (the operator installed by the chart, two replicas),
    and the other pod, the stand-by, taking the Lease over and finishing it;
(e) the node's kubelet stopped until the node controller marks the node
    and its pods NotReady (past the node Lease), then started;
(f) a broker's PersistentVolumeClaim lost: the pod comes back on a new,
    empty volume and must catch up as a new replica without serving
    stale data.

Per case the table at the end of the run (`churn_report`) shows records
acked, lost, duplicated, the longest produce stall and the time to settle
(Ready as the operator reports it and as observed directly).

All cases share one Cluster (`churn_env`); a case that leaves it
unsettled makes the next one start from a fresh Cluster. Run them alone
with `pytest -m kube -k churn`. `make test` runs the short form (two
producers at 50 records/s each, (b) to 4 brokers); `KELP_CHURN_FORM=full`
runs 100 records/s each and (b) to 5 brokers (docs/kube-test-tier.md).
"""

from __future__ import annotations

import time

import pytest

from tests.kube.churn_cases import FORM, SETTLE_TIMEOUT_S, scale_to
from tests.kube.churn_cases import broker_restarts as _broker_restarts
from tests.kube.churn_cases import ensure_volumes as _ensure_volumes
from tests.kube.churn_cases import revision as _revision
from tests.kube.churn_cases import run_case as _run_case
from tests.kube.churn_cases import uids as _uids
from tests.kube.churn_env import BASE_BROKERS, CLUSTER, ChurnEnv, churn, churn_env, condition_of  # noqa: F401
from tests.kube.churn_report import record_case
from tests.kube.churn_workload import Workload

pytestmark = [pytest.mark.kube, pytest.mark.clients, pytest.mark.timeout(1500)]

def test_churn_a_rolling_restart_from_a_config_change(churn: ChurnEnv) -> None:  # noqa: F811 (pytest fixture)
    env = churn
    with record_case("a rolling restart", FORM.name) as row:
        def steps(_work: Workload) -> None:
            before, revision = _uids(env), _revision(env)
            t0 = time.monotonic()
            env.patch_cluster({"config": {"num.partitions": "2"}})  # a static key: its change rolls the pods
            row.ready("roll", env.wait_settled(BASE_BROKERS, since=t0, timeout=SETTLE_TIMEOUT_S,
                                               what="the roll after a config change"))
            after = _uids(env)
            assert _revision(env) != revision, "the config change did not change the pod template"
            assert all(after[n] != before[n] for n in before), f"pods not restarted: {before} -> {after}"
        _run_case(env, row, "churn-a", steps)


def test_churn_b_scale_up_with_rebalance_then_down_with_drain(churn: ChurnEnv) -> None:  # noqa: F811 (pytest fixture)
    env = churn
    n = FORM.scale_to
    with record_case(f"b scale 3→{n}→3", FORM.name) as row:
        def steps(_work: Workload) -> None:
            _ensure_volumes(env, n)
            t0 = time.monotonic()
            env.patch_cluster({"brokers": n})
            row.ready(f"3→{n}", env.wait_settled(n, since=t0, timeout=SETTLE_TIMEOUT_S, what=f"scale-up to {n}"))
            load = {b: 0 for b in range(n)}
            for t in env.topics():
                for p in t["partitions"]:
                    for r in p["replicas"]:
                        load[r] += 1
            assert all(load[b] for b in range(3, n)), f"no replica moved onto a new broker: replicas per broker {load}"
            row.notes.append(f"replicas per broker after the rebalance: {load}")
            t1 = time.monotonic()
            env.patch_cluster({"brokers": 3})
            row.ready(f"{n}→3", env.wait_settled(3, since=t1, timeout=SETTLE_TIMEOUT_S, what="scale-down to 3"))
        _run_case(env, row, "churn-b", steps)


@pytest.mark.long
def test_churn_c_broker_container_killed_mid_roll(churn: ChurnEnv) -> None:  # noqa: F811 (pytest fixture)
    env = churn
    with record_case("c SIGKILL mid-roll", FORM.name) as row:
        def steps(_work: Workload) -> None:
            before = _uids(env)
            t0 = time.monotonic()
            env.patch_cluster({"config": {"num.partitions": "3"}})

            def first_restart():
                pods = env.pods()
                going = [n for n in before if n not in pods or pods[n].metadata.uid != before[n]
                         or pods[n].metadata.deletion_timestamp is not None]
                return going[0] if going else None
            restarting = env.watch(first_restart, timeout=120, what="the roll's first pod restart")
            containers = env.broker_containers()
            pods = env.pods()
            target = next(n for n in sorted(before) if n != restarting and pods[n].metadata.uid == before[n]
                          and pods[n].metadata.deletion_timestamp is None and n in containers)
            restarts = _broker_restarts(pods[target])
            env.node.kill_container(containers[target])
            row.notes.append(f"{target}'s container SIGKILLed {time.monotonic() - t0:.1f}s into the roll, "
                             f"while {restarting} was restarting")

            def kill_seen():
                p = env.pods().get(target)
                return p is None or p.metadata.uid != before[target] or _broker_restarts(p) > restarts
            env.watch(kill_seen, timeout=60, what=f"the kubelet restarting {target}'s killed container")
            row.ready("roll", env.wait_settled(BASE_BROKERS, since=t0, timeout=SETTLE_TIMEOUT_S,
                                               what="the roll with a broker killed in the middle"))
            after = _uids(env)
            assert all(after[n] != before[n] for n in before), f"pods not restarted: {before} -> {after}"
        _run_case(env, row, "churn-c", steps)


@pytest.mark.long
def test_churn_d_operator_killed_mid_scale_down_and_standby_takes_over(churn: ChurnEnv) -> None:  # noqa: F811 (pytest fixture)
    env = churn
    ops = env.operators
    assert ops is not None
    with record_case("d operator killed mid-drain", FORM.name) as row:
        def steps(_work: Workload) -> None:
            scale_to(env, row, 4)
            env.ensure_operators(timeout=60)  # both chart replicas up: one active, the other standing by
            t1 = time.monotonic()
            env.patch_cluster({"brokers": 3})

            def draining():
                moving = [f"{t['name']}-{p['partition']}" for t in env.topics() for p in t["partitions"]
                          if p.get("adding") or p.get("removing")]
                progressing = condition_of(env.cluster(), "Progressing").get("reason")
                return (moving or progressing in ("Draining", "DrainWaiting")) and (moving, progressing)
            moving, progressing = env.watch(draining, timeout=120, interval=0.1,
                                            what="the operator draining broker 3")
            replicas = env.apps.read_namespaced_stateful_set(CLUSTER, env.ns).spec.replicas
            active = env.active_operator(timeout=10)  # the Lease holder, its container id as of now
            standby = [name for name in ops.running() if name != active.name]
            assert len(standby) == 1, f"want one stand-by beside {active.name}: {ops.describe()}"
            killed_holder, transitions = ops.lease()
            env.kill_operator(active)
            t_kill = time.monotonic()
            row.notes.append(f"{active.name} (the Lease holder)'s operator container SIGKILLed through containerd "
                             f"{t_kill - t1:.1f}s into the scale-down (Progressing {progressing}, "
                             f"{len(moving)} partition(s) moving, StatefulSet at {replicas})")
            restarted_at: float | None = None

            def note_restart() -> None:
                nonlocal restarted_at
                if restarted_at is None and ops.restarted(active.name, uid=active.uid, restarts=active.restarts):
                    restarted_at = time.monotonic()

            def taken_over():
                note_restart()
                now = ops.active_now()
                # Not the killed container itself, answering in the instant before the kill took effect.
                return now if now is not None and now.container_id != active.container_id else None
            new = env.watch(taken_over, timeout=60, what="an operator pod holding the Lease again after the kill")
            took = time.monotonic() - t_kill
            restart = "" if restarted_at is None else f", its container restarted {restarted_at - t_kill:.1f}s after it"
            # The stand-by must take over, not the killed pod's own container once the kubelet restarted it.
            assert new.name == standby[0], (f"{new.name} holds the Lease {took:.1f}s after {active.name} was killed"
                                            f"{restart}, not the stand-by {standby[0]}: {ops.describe()}")
            holder, after = ops.lease()
            row.notes.append(f"{new.name} (the stand-by pod) took the Lease over {took:.1f}s after the kill "
                             f"(holder {killed_holder} → {holder}, leaseTransitions {transitions}→{after})")
            t_took = time.monotonic()
            row.ready("4→3", env.wait_settled(3, since=t1, timeout=SETTLE_TIMEOUT_S,
                                              what="scale-down to 3 finished by the stand-by"))
            row.notes.append(f"the stand-by finished the scale-down {time.monotonic() - t_took:.1f}s after taking over")
            still, _ = ops.lease()
            assert still == holder, f"the Lease moved again during the scale-down: {ops.describe()}"
            # Whether the kubelet restarted the killed container (restartPolicy Always): recorded, not required.
            deadline = t_kill + 60
            while restarted_at is None and time.monotonic() < deadline:
                note_restart()
                time.sleep(0.5)
            if restarted_at is None:
                row.notes.append(f"the kubelet had not restarted {active.name}'s container 60s after the kill: "
                                 f"{ops.describe()}")
            else:
                again = ops.running().get(active.name)
                role = (again.health() or {}).get("role") if again else None
                row.notes.append(f"the kubelet restarted {active.name}'s container {restarted_at - t_kill:.1f}s "
                                 f"after the kill (restarts {active.restarts}→{again.restarts if again else '?'}); "
                                 f"it came back as {role}")
        _run_case(env, row, "churn-d", steps)


@pytest.mark.long
def test_churn_e_kubelet_stopped_past_the_node_lease_then_started(churn: ChurnEnv) -> None:  # noqa: F811 (pytest fixture)
    env = churn
    with record_case("e kubelet stopped", FORM.name) as row:
        def node_ready() -> str | None:
            got = env.core.read_node(env.node.name)
            return next((c.status for c in got.status.conditions or [] if c.type == "Ready"), None)

        def steps(_work: Workload) -> None:
            t0 = time.monotonic()
            env.node.stop_kubelet()
            try:
                env.watch(lambda: node_ready() != "True", timeout=180, interval=1,
                          what="the node controller marking the node NotReady (node Lease expired)")
                t_node = time.monotonic()
                env.watch(lambda: not env.ready_ips(), timeout=60, interval=1,
                          what="the node controller marking the broker pods NotReady")
                t_pods = time.monotonic()
                # The operator cannot reach a broker through a NotReady pod: it must stop claiming Ready.
                env.watch(lambda: condition_of(env.cluster(), "Ready").get("status") != "True", timeout=60, interval=1,
                          what="the Cluster leaving Ready=True while its pods are NotReady")
                row.notes.append(f"node NotReady {t_node - t0:.1f}s after the kubelet stopped, pods NotReady "
                                 f"{t_pods - t0:.1f}s, Cluster not Ready {time.monotonic() - t0:.1f}s")
            finally:
                env.node.start_kubelet()
            t1 = time.monotonic()
            row.notes.append(f"kubelet down {t1 - t0:.1f}s")
            env.watch(lambda: node_ready() == "True", timeout=120, interval=1, what="the node Ready again")
            row.ready("kubelet start", env.wait_settled(BASE_BROKERS, since=t1, timeout=SETTLE_TIMEOUT_S,
                                                        what="the cluster after the kubelet came back"))
        _run_case(env, row, "churn-e", steps)


@pytest.mark.long
def test_churn_f_lost_volume_broker_rejoins_empty_and_catches_up(churn: ChurnEnv) -> None:  # noqa: F811 (pytest fixture)
    from kubernetes import client

    env = churn
    with record_case("f PVC lost", FORM.name) as row:
        def steps(_work: Workload) -> None:
            leader = env.admin("/admin/v1/topics/churn-f")["partitions"][0]["leader"]
            victim, claim_name = f"{CLUSTER}-{leader}", f"data-{CLUSTER}-{leader}"
            old_pod = env.pods()[victim].metadata.uid
            old_claim = env.core.read_namespaced_persistent_volume_claim(claim_name, env.ns)
            env.add_volumes(1)
            t0 = time.monotonic()
            env.core.delete_namespaced_persistent_volume_claim(claim_name, env.ns)
            env.core.delete_namespaced_pod(victim, env.ns)
            redeleted = 0
            missing_since: float | None = None

            def rescheduled():
                nonlocal redeleted, missing_since
                try:
                    claim = env.core.read_namespaced_persistent_volume_claim(claim_name, env.ns)
                except client.ApiException as exc:
                    if exc.status != 404:
                        raise
                    claim = None
                pod = env.pods().get(victim)
                if claim is not None and claim.metadata.uid != old_claim.metadata.uid \
                        and claim.status.phase == "Bound" and pod is not None and pod.metadata.uid != old_pod:
                    return claim
                # The StatefulSet controller makes a missing claim only when it creates the pod; a pod
                # created while the old claim was still terminating waits for a claim that never comes.
                # Deleting that pod is the documented way out (kubernetes#74374), as an admin would.
                if claim is None and pod is not None and pod.metadata.uid != old_pod and pod.status.phase == "Pending":
                    missing_since = missing_since or time.monotonic()
                    if time.monotonic() - missing_since > 5 and redeleted < 5:
                        env.core.delete_namespaced_pod(victim, env.ns)
                        redeleted += 1
                        missing_since = None
                return None
            claim = env.watch(rescheduled, timeout=180, interval=0.5,
                              what=f"{victim} rescheduled on a new claim {claim_name}")
            assert claim.spec.volume_name != old_claim.spec.volume_name
            row.notes.append(f"{victim} (leader of churn-f-0) came back on {claim.spec.volume_name} instead of "
                             f"{old_claim.spec.volume_name}" + (f"; its Pending pod deleted {redeleted} time(s) "
                                                                "until the StatefulSet made the claim" if redeleted
                                                                else ""))
            row.ready("rejoined", env.wait_settled(BASE_BROKERS, since=t0, timeout=SETTLE_TIMEOUT_S,
                                                   what=f"{victim} rejoined on an empty volume"))
        _run_case(env, row, "churn-f", steps)
