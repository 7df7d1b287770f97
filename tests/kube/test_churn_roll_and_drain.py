"""Churn on real broker pods, issue 32: the roll's rules (KafkaRoller's) and decommission before shrink.

Each case runs the churn suite's workload (two idempotent acks=all producers, a consumer group, a fresh
6-partition topic at RF 3 / min.insync 2; `churn_cases.run_case`) from before the churn until after the
cluster settled, and its checker: nothing acknowledged lost, duplicated or reordered, replicas
byte-identical. Beyond the records, `churn_watch.RollWatch` watches from outside that the operator never
deleted a broker pod while another was down (not Ready, terminating or missing) and that no partition
went below min.insync.replicas. The cases:

(g) a readiness blip of another broker mid-roll: once the roll restarts its first pod, the controller's
    readiness probe fails (the node's own traffic to its HTTP port is rejected — the kubelet probes from
    the node — while the broker keeps serving its peers, clients and the operator pod) until the
    restarting pod has been back for 12 s (45 s at most): the roll says it waits for the blipping pod,
    instead of restarting it into a second broker down;
(h) a roll with one broker dead: a broker frozen (hung) before a config change; the roll says it waits
    for it, restarts nothing else, restarts it once it is stuck (`spec.restart.podReadyTimeoutSeconds`,
    20 s here), then finishes — never a partition below min.insync;
(i) topics created and a Topic's partitions grown while a scale-down 4→3 drains: the operator
    decommissions broker 3 first, so none lands there, and shrinks only once the controller says it
    holds nothing;
(j) a staying broker's container SIGKILLed while a scale-down 4→3 drains: the drain waits for it and
    finishes;
(k) the active operator pod's container SIGKILLed mid-roll: the stand-by takes the Lease and finishes the
    roll under the same rules;
(l) a drain of at least 1 GiB under the operator's replication throttle (`spec.reassignment.
    throttleBytesPerSecond`, 32 MiB/s here), the workload's producers running: the brokers carry the throttle
    while the moves run (Kafka's rates on each broker, the moved replicas listed on the topic), the status
    shows the moves' progress growing, the bulk topic's partitions end with the same offsets and bytes, and
    the throttle is removed once the drain is done.

Freezing (h) uses containerd's pause (the cgroup freezer): signals wait until the container is thawed, so
the case thaws the frozen broker as soon as its pod is deleted (the kubelet's stop must reach it) and at
the latest before its liveness probe would have the kubelet kill it (60 s). The blip (g) is one iptables
rule in the node's OUTPUT chain naming the pod's IP and port 8080 (the test's own bridge), removed after.
"""

from __future__ import annotations

import time

import pytest

from tests.kube.churn_cases import FORM, SETTLE_TIMEOUT_S, revision, run_case, scale_to, uids
from tests.kube.churn_env import BASE_BROKERS, CLUSTER, ChurnEnv, churn, churn_env, condition_of  # noqa: F401
from tests.kube.churn_report import CaseRow, record_case
from tests.kube.churn_watch import RollWatch
from tests.kube.churn_workload import Workload
from tests.kube.test_kube_crd import GROUP, VERSION

pytestmark = [pytest.mark.kube, pytest.mark.clients, pytest.mark.timeout(1500)]

BLIP_MAX_S = 45.0  # liveness probes hit the same port: 6 failures 10 s apart would have the kubelet kill it
BLIP_AFTER_S = 12.0  # NotReady this long after the restarting pod is back: the roll decides on the blip itself
STUCK_AFTER_S = 20
THAW_BY_S = 50.0  # the liveness probe (10 s x 6) would have the kubelet kill a frozen broker at 60 s


def _watch(env: ChurnEnv, brokers: int) -> RollWatch:
    return RollWatch(pods=env.pods, topics=env.topics, expected=lambda: brokers)


def _first_restart(env: ChurnEnv, before: dict[str, str]) -> str | None:
    pods = env.pods()
    going = [n for n in before if n not in pods or pods[n].metadata.uid != before[n]
             or pods[n].metadata.deletion_timestamp is not None]
    return going[0] if going else None


def _probe_blocked(env: ChurnEnv, pod: str, *, restarting: str, row: CaseRow, progress: list[str]) -> tuple[bool, bool]:
    """Reject the node's own connections to `pod`'s HTTP port (its probes fail; its peers, clients and the operator
    pod, on the bridge, are not affected) until `restarting` has been Ready for BLIP_AFTER_S, at most BLIP_MAX_S;
    (whether the pod was deleted meanwhile, whether `restarting` was back long enough). The Progressing
    conditions seen meanwhile go to `progress`."""
    import subprocess

    p = env.pods()[pod]
    ip, uid = p.status.pod_ip, p.metadata.uid
    rule = ["OUTPUT", "-d", f"{ip}/32", "-p", "tcp", "--dport", "8080", "-j", "REJECT", "--reject-with", "tcp-reset"]
    subprocess.run(["iptables", "-I", *rule], check=True, capture_output=True, timeout=20)
    t0 = time.monotonic()
    deleted = False
    back_since: float | None = None
    try:
        while time.monotonic() - t0 < BLIP_MAX_S:
            pods = env.pods()
            now = pods.get(pod)
            if now is None or now.metadata.uid != uid or now.metadata.deletion_timestamp is not None:
                deleted = True
            other = pods.get(restarting)
            ready = other is not None and other.metadata.deletion_timestamp is None and any(
                c.type == "Ready" and c.status == "True" for c in other.status.conditions or [])
            back_since = (back_since or time.monotonic()) if ready else None
            if back_since is not None and time.monotonic() - back_since >= BLIP_AFTER_S:
                break
            cond = condition_of(env.cluster(), "Progressing")
            seen = f"{cond.get('reason')}: {cond.get('message')}"
            if not progress or progress[-1] != seen:
                progress.append(seen)
            time.sleep(0.5)
    finally:
        subprocess.run(["iptables", "-D", *rule], capture_output=True, timeout=20)
    row.notes.append(f"{pod}'s readiness probe failed for {time.monotonic() - t0:.1f}s (node → {ip}:8080 rejected)")
    return deleted, back_since is not None and time.monotonic() - back_since >= BLIP_AFTER_S


def _said_it_waits_for(pod: str, progress: list[str], row: CaseRow) -> None:
    """The roll's condition named `pod` as what it waits for, at least once while `pod` was down."""
    waited = [m for m in progress if m.startswith("RestartWaiting") and pod in m]
    assert waited, f"the roll never said it waits for {pod}: {progress}"
    row.notes.append(f"while {pod} was down: {waited[-1][:200]}")


def _roll_value() -> str:
    """A new value of a static key for each roll: the pod template changes, so the pods restart."""
    return str(int(time.time()) % 1000 + 10)


def _assert_watch(watch: RollWatch, row: CaseRow) -> None:
    watch.stop()
    row.notes.append(f"pods deleted by the operator: {watch.deleted() or 'none'} ({watch.samples} samples)")
    assert not watch.violations(), f"the roll's rules were broken: {watch.violations()}"


@pytest.mark.long
def test_churn_g_readiness_blip_of_another_broker_mid_roll(churn: ChurnEnv) -> None:  # noqa: F811 (pytest fixture)
    env = churn
    with record_case("g readiness blip mid-roll", FORM.name) as row:
        def steps(_work: Workload) -> None:
            before, rev = uids(env), revision(env)
            watch = _watch(env, BASE_BROKERS)  # the blipping broker keeps serving: no ISR may shrink below 2
            try:
                t0 = time.monotonic()
                env.patch_cluster({"config": {"num.partitions": _roll_value()}})
                restarting = env.watch(lambda: _first_restart(env, before), timeout=120,
                                       what="the roll's first pod restart")
                controller = f"{CLUSTER}-{env.admin('/admin/v1/cluster')['controller']}"
                pods = env.pods()
                target = controller if controller != restarting and pods[controller].metadata.uid == before.get(
                    controller) else next(n for n in sorted(before) if n != restarting
                                          and pods[n].metadata.uid == before[n])
                progress: list[str] = []
                deleted, decided = _probe_blocked(env, target, restarting=restarting, row=row, progress=progress)
                row.notes.append(f"{target} (controller {controller}) failed readiness while {restarting} restarted; "
                                 f"Progressing meanwhile: {[m[:120] for m in progress[-3:]]}")
                assert not deleted, f"{target} was restarted during its readiness blip: {progress}"
                # Once the restarting pod was back, the roll had the blipping one to decide on: it waits for it.
                _said_it_waits_for(target if decided else restarting, progress, row)
                row.ready("roll", env.wait_settled(BASE_BROKERS, since=t0, timeout=SETTLE_TIMEOUT_S,
                                                   what="the roll after a readiness blip"))
            finally:
                watch.stop()
            after = uids(env)
            assert revision(env) != rev and all(after[n] != before[n] for n in before), (before, after)
            _assert_watch(watch, row)
        run_case(env, row, "churn-g", steps)


def test_churn_h_roll_with_one_broker_dead(churn: ChurnEnv) -> None:  # noqa: F811 (pytest fixture)
    env = churn
    with record_case("h roll with a broker dead", FORM.name) as row:
        def steps(_work: Workload) -> None:
            env.patch_cluster({"restart": {"podReadyTimeoutSeconds": STUCK_AFTER_S}})
            before = uids(env)
            dead = f"{CLUSTER}-1"
            container = env.broker_containers()[dead]
            env.node.pause_container(container)
            t_dead = time.monotonic()
            thawed = False
            watch = _watch(env, BASE_BROKERS)
            progress: list[str] = []
            try:
                env.watch(lambda: not any(c.type == "Ready" and c.status == "True"
                                          for c in env.pods()[dead].status.conditions or []),
                          timeout=60, what=f"{dead} NotReady once frozen")
                t0 = time.monotonic()
                env.patch_cluster({"config": {"num.partitions": _roll_value()}})

                def dead_deleted():
                    p = env.pods().get(dead)
                    cond = condition_of(env.cluster(), "Progressing")
                    seen = f"{cond.get('reason')}: {cond.get('message')}"
                    if not progress or progress[-1] != seen:
                        progress.append(seen)
                    if time.monotonic() - t_dead > THAW_BY_S:
                        raise AssertionError(f"{dead} was not restarted within {THAW_BY_S:.0f}s of hanging: "
                                             f"{progress}")
                    return p is None or p.metadata.uid != before[dead] or p.metadata.deletion_timestamp is not None
                env.watch(dead_deleted, timeout=THAW_BY_S + 5, interval=0.5,
                          what=f"the operator restarting the hung {dead}")
                env.node.resume_container(container)
                thawed = True
                took = time.monotonic() - t_dead
                row.notes.append(f"{dead} hung (frozen); the operator restarted it {took:.1f}s later "
                                 f"(deadline {STUCK_AFTER_S}s after it went NotReady)")
                others = {n: u for n, u in before.items() if n != dead}
                now = uids(env)
                assert all(now.get(n) == u for n, u in others.items()), f"another pod restarted meanwhile: {now}"
                _said_it_waits_for(dead, progress, row)
                row.ready("roll", env.wait_settled(BASE_BROKERS, since=t0, timeout=SETTLE_TIMEOUT_S,
                                                   what="the roll with a hung broker"))
            finally:
                if not thawed:
                    env.node.resume_container(container)
                watch.stop()
                env.patch_cluster({"restart": {"podReadyTimeoutSeconds": 300}})
            after = uids(env)
            assert all(after[n] != before[n] for n in before), f"pods not restarted: {before} -> {after}"
            _assert_watch(watch, row)
        run_case(env, row, "churn-h", steps)


def _draining(env: ChurnEnv):
    moving = [f"{t['name']}-{p['partition']}" for t in env.topics() for p in t["partitions"]
              if p.get("adding") or p.get("removing")]
    progressing = condition_of(env.cluster(), "Progressing").get("reason")
    return (moving or progressing in ("Draining", "DrainWaiting")) and (moving, progressing)


def _sts_replicas(env: ChurnEnv) -> int:
    return int(env.apps.read_namespaced_stateful_set(CLUSTER, env.ns).spec.replicas)


def test_churn_i_topics_created_and_grown_during_a_scale_down_drain(churn: ChurnEnv) -> None:  # noqa: F811
    env = churn
    with record_case("i topics created during drain", FORM.name) as row:
        def steps(_work: Workload) -> None:
            scale_to(env, row, 4)
            env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "topics", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "Topic", "metadata": {"name": "churn-i-grow"},
                "spec": {"cluster": CLUSTER, "partitions": 2, "replicationFactor": 3}})
            env.watch(lambda: any(t["name"] == "churn-i-grow" for t in env.admin("/admin/v1/topics")["topics"]),
                      timeout=60, what="Topic churn-i-grow created")
            t1 = time.monotonic()
            env.patch_cluster({"brokers": 3})
            created: list[str] = []
            grown = False
            # An application auto-creating topics, and a Topic growing, for as long as the drain runs.
            while _sts_replicas(env) == 4 and time.monotonic() - t1 < 120:
                name = f"churn-i-auto-{len(created)}"
                env.post_admin("/admin/v1/topics", {"name": name, "partitions": 3, "replication_factor": 3})
                created.append(name)
                if not grown and _draining(env):
                    env.custom.patch_namespaced_custom_object(GROUP, VERSION, env.ns, "topics", "churn-i-grow",
                                                              {"spec": {"partitions": 8}})
                    grown = True
                time.sleep(0.5)
            row.notes.append(f"{len(created)} topic(s) created while the drain ran ({time.monotonic() - t1:.1f}s); "
                             f"churn-i-grow grown 2→8 {'during' if grown else 'not during'} the drain")
            row.ready("4→3", env.wait_settled(3, since=t1, timeout=SETTLE_TIMEOUT_S,
                                              what="scale-down to 3 while topics were created"))
            # Settled means every partition of every topic is fully in sync on brokers 0..2.
            grow = env.admin("/admin/v1/topics/churn-i-grow")
            assert len(grow["partitions"]) == 8, grow
            assert created, "no topic was created during the drain"
            events = [e.message for e in env.core.list_namespaced_event(env.ns).items
                      if e.reason in ("BrokersDecommissioned", "ScaleDown")]
            row.notes.append(f"events: {events[-2:]}")
        run_case(env, row, "churn-i", steps)


@pytest.mark.long
def test_churn_j_broker_killed_mid_drain(churn: ChurnEnv) -> None:  # noqa: F811 (pytest fixture)
    env = churn
    with record_case("j SIGKILL mid-drain", FORM.name) as row:
        def steps(_work: Workload) -> None:
            scale_to(env, row, 4)
            t1 = time.monotonic()
            env.patch_cluster({"brokers": 3})
            moving, progressing = env.watch(lambda: _draining(env), timeout=120, interval=0.1,
                                            what="the operator draining broker 3")
            target = f"{CLUSTER}-1"
            env.node.kill_container(env.broker_containers()[target])
            row.notes.append(f"{target}'s container SIGKILLed {time.monotonic() - t1:.1f}s into the scale-down "
                             f"(Progressing {progressing}, {len(moving)} partition(s) moving)")
            row.ready("4→3", env.wait_settled(3, since=t1, timeout=SETTLE_TIMEOUT_S,
                                              what="scale-down to 3 with a broker killed mid-drain"))
        run_case(env, row, "churn-j", steps)


@pytest.mark.long
def test_churn_k_operator_killed_mid_roll(churn: ChurnEnv) -> None:  # noqa: F811 (pytest fixture)
    env = churn
    ops = env.operators
    assert ops is not None
    with record_case("k operator killed mid-roll", FORM.name) as row:
        def steps(_work: Workload) -> None:
            env.ensure_operators(timeout=60)
            before = uids(env)
            watch = _watch(env, BASE_BROKERS)
            try:
                t0 = time.monotonic()
                env.patch_cluster({"config": {"num.partitions": _roll_value()}})
                restarting = env.watch(lambda: _first_restart(env, before), timeout=120,
                                       what="the roll's first pod restart")
                active = env.active_operator(timeout=10)
                env.kill_operator(active)
                t_kill = time.monotonic()
                row.notes.append(f"{active.name} (the Lease holder)'s container SIGKILLed {t_kill - t0:.1f}s into "
                                 f"the roll, while {restarting} restarted")

                def taken_over():
                    now = ops.active_now()
                    return now if now is not None and now.container_id != active.container_id else None
                new = env.watch(taken_over, timeout=60, what="an operator holding the Lease after the kill")
                row.notes.append(f"{new.name} active {time.monotonic() - t_kill:.1f}s after the kill")
                row.ready("roll", env.wait_settled(BASE_BROKERS, since=t0, timeout=SETTLE_TIMEOUT_S,
                                                   what="the roll finished by the operator that took over"))
            finally:
                watch.stop()
            after = uids(env)
            assert all(after[n] != before[n] for n in before), f"pods not restarted: {before} -> {after}"
            _assert_watch(watch, row)
        run_case(env, row, "churn-k", steps)


BULK_TOPIC = "churn-l-bulk"
BULK_PARTITIONS = 4
BULK_RECORD = 256 * 1024
BULK_BYTES = 1 << 30
THROTTLE = 32 * 1024 * 1024


def _fill_bulk(env: ChurnEnv) -> None:
    """1 GiB into BULK_TOPIC, every partition's one replica on broker 3 (acks=1: RF 1)."""
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({"bootstrap.servers": env.bootstrap(), "acks": "1", "linger.ms": 20,
                         "batch.size": 1 << 20, "compression.type": "none", "message.timeout.ms": 120000,
                         "queue.buffering.max.kbytes": 64 * 1024})
    value = bytes(range(256)) * (BULK_RECORD // 256)
    deadline = time.monotonic() + 300
    for i in range(BULK_BYTES // BULK_RECORD):
        while True:
            try:
                producer.produce(BULK_TOPIC, value, partition=i % BULK_PARTITIONS,
                                 on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
                break
            except BufferError:
                assert time.monotonic() < deadline, "the bulk fill did not finish in 300 s"
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(120) == 0 and not errors, errors[:3]


def _bulk_partitions(env: ChurnEnv) -> list[tuple[int, int, list[int]]]:
    """(high watermark, size in bytes, replicas) of each bulk partition."""
    return [(p["high_watermark"], int(p.get("size_bytes") or 0), sorted(p["replicas"]))
            for p in env.admin(f"/admin/v1/topics/{BULK_TOPIC}")["partitions"]]


@pytest.mark.long
def test_churn_l_a_throttled_drain_of_a_gibibyte(churn: ChurnEnv) -> None:  # noqa: F811 (pytest fixture)
    env = churn
    with record_case("l 1 GiB throttled drain", FORM.name) as row:
        def steps(_work: Workload) -> None:
            scale_to(env, row, 4)
            env.patch_cluster({"reassignment": {"throttleBytesPerSecond": THROTTLE}})
            env.post_admin("/admin/v1/topics", {"name": BULK_TOPIC, "assignments": {
                str(p): [3] for p in range(BULK_PARTITIONS)}})
            t_fill = time.monotonic()
            _fill_bulk(env)
            before = _bulk_partitions(env)
            size = sum(b for _, b, _ in before)
            assert size >= BULK_BYTES, before
            row.notes.append(f"{size / 2**20:.0f} MiB filled onto broker 3 in {time.monotonic() - t_fill:.1f}s")
            t1 = time.monotonic()
            env.patch_cluster({"brokers": 3})
            throttled: set[str] = set()
            progress: list[int] = []
            while _sts_replicas(env) == 4 and time.monotonic() - t1 < SETTLE_TIMEOUT_S:
                rates = env.admin("/admin/v1/brokers/3/configs").get("configs") or {}
                if rates.get("leader.replication.throttled.rate") == str(THROTTLE):
                    throttled.add("broker 3's leader rate")
                configs = env.admin(f"/admin/v1/topics/{BULK_TOPIC}").get("configs") or {}
                if "follower.replication.throttled.replicas" in configs:
                    throttled.add("the topic's follower list")
                moving = (env.cluster().get("status") or {}).get("reassignment") or {}
                if moving.get("progress") is not None and (not progress or moving["progress"] != progress[-1]):
                    progress.append(int(moving["progress"]))
                time.sleep(1.0)
            drained_s = time.monotonic() - t1
            row.ready("4→3", env.wait_settled(3, since=t1, timeout=SETTLE_TIMEOUT_S,
                                              what="a 1 GiB drain under the replication throttle"))
            after = _bulk_partitions(env)
            row.notes.append(f"{size / 2**20:.0f} MiB drained off broker 3 in {drained_s:.1f}s at a throttle of "
                             f"{THROTTLE // 2**20} MiB/s; status progress seen {len(progress)} time(s), up to "
                             f"{progress[-1] if progress else '-'} records")
            assert [(hw, b) for hw, b, _ in after] == [(hw, b) for hw, b, _ in before], (before, after)
            assert all(3 not in r for _, _, r in after), after
            assert throttled == {"broker 3's leader rate", "the topic's follower list"}, throttled
            assert len(progress) >= 2 and progress == sorted(progress), progress
            # Broker 3 leads every bulk partition: its leader quota bounds the whole move.
            assert drained_s >= 0.7 * size / THROTTLE, f"{size} bytes drained in {drained_s:.1f}s"
            left = env.admin(f"/admin/v1/topics/{BULK_TOPIC}").get("configs") or {}
            assert not [k for k in left if "throttled" in k], left
            assert "kelp.dev/replication-throttle" not in (env.cluster()["metadata"].get("annotations") or {})
        run_case(env, row, "churn-l", steps)
