"""What every churn case shares: the form (how hard it pushes), the run around its churn, small probes.

Why this exists: the churn cases live in more than one module (issue 18's six in `test_churn_cluster`,
issue 32's in `test_churn_roll_and_drain`), and each must run its workload, its checker and its row of
the report the same way: traffic from before the churn until after the cluster settled, then every
acknowledged record checked, replicas compared byte for byte, hung graceful stops counted.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable

from tests.kube.churn_check import check_records
from tests.kube.churn_env import CLUSTER, ChurnEnv
from tests.kube.churn_report import CaseRow
from tests.kube.churn_workload import Workload, WorkloadSettings

__all__ = ["Form", "FORM", "SETTLE_TIMEOUT_S", "run_case", "ensure_volumes", "scale_to", "uids", "broker_restarts",
           "revision"]

SETTLE_TIMEOUT_S = 300


@dataclass(frozen=True)
class Form:
    """How hard each case pushes: `make test` runs the short form, KELP_CHURN_FORM=full the full one."""

    name: str
    scale_to: int  # case (b) scales 3 -> scale_to -> 3
    rate_per_producer: int  # records per second, two producers
    warm_up_acks: int  # acknowledged before the churn starts
    cool_down_acks: int  # acknowledged after the cluster settled again


FORMS = {"short": Form("short", scale_to=4, rate_per_producer=50, warm_up_acks=200, cool_down_acks=200),
         "full": Form("full", scale_to=5, rate_per_producer=100, warm_up_acks=500, cool_down_acks=500)}
_FORM_NAME = os.environ.get("KELP_CHURN_FORM", "short")
if _FORM_NAME not in FORMS:
    raise ValueError(f"KELP_CHURN_FORM={_FORM_NAME!r}: use one of {sorted(FORMS)}")
FORM = FORMS[_FORM_NAME]


def run_case(env: ChurnEnv, row: CaseRow, topic: str, churn_steps: Callable[[Workload], None]) -> None:
    """Workload from before `churn_steps` until after it, then the checker; the row gets every figure."""
    env.create_topic(topic)
    began = time.time()
    work = Workload(bootstrap=env.bootstrap(), topic=topic, group=f"{topic}-readers",
                    settings=WorkloadSettings(rate_per_producer=FORM.rate_per_producer)).start()
    try:
        work.wait_acked(FORM.warm_up_acks, timeout=120, what="before the churn")
        churn_steps(work)
        work.wait_acked(FORM.cool_down_acks, timeout=120, what="after the cluster settled")
    finally:
        work.stop()
        row.delivery_errors = len(work.errors())
        row.longest_stall_s = work.longest_stall()
        row.acked = work.acked_count()
    assert not work.stuck, f"workload threads outlived their bounds: {work.stuck}"
    verdict = check_records(acked=work.acked, log=env.read_log(topic), consumed=work.consumed)
    verdict.replicas = env.replica_differences(topic)
    row.take(verdict)
    assert verdict.ok, f"{topic}: acknowledged or served records were not kept:\n{verdict.failures()}"
    assert not work.errors(), f"{topic}: clients failed: {work.errors()[:5]}"
    hung = env.terminations.killed_at_grace(since=began) if env.terminations else []
    row.hung_stops = len(hung)
    row.notes.extend(hung)
    assert not hung, (f"{topic}: broker pod(s) hung in their graceful stop until the kubelet killed them at the "
                      f"end of the termination grace period (their logs: {env.logs.dest if env.logs else '-'}): {hung}")


def ensure_volumes(env: ChurnEnv, brokers: int) -> None:
    """Free PersistentVolumes for the claims brokers 0..n-1 do not have yet."""
    from kubernetes import client

    missing = 0
    for i in range(brokers):
        try:
            env.core.read_namespaced_persistent_volume_claim(f"data-{CLUSTER}-{i}", env.ns)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            missing += 1
    free = sum(1 for pv in env.core.list_persistent_volume().items
               if pv.spec.storage_class_name == env.storage_class and pv.status.phase == "Available")
    env.add_volumes(max(0, missing - free))


def uids(env: ChurnEnv) -> dict[str, str]:
    return {name: p.metadata.uid for name, p in env.pods().items()}


def broker_restarts(pod) -> int:
    return sum(s.restart_count for s in pod.status.container_statuses or [] if s.name == "broker")


def revision(env: ChurnEnv) -> str:
    return env.apps.read_namespaced_stateful_set(CLUSTER, env.ns).status.update_revision


def scale_to(env: ChurnEnv, row: CaseRow, brokers: int, *, before: int = 3) -> None:
    """Scale the stage's Cluster up to `brokers` (volumes for the new claims first) and wait until it settled."""
    ensure_volumes(env, brokers)
    t0 = time.monotonic()
    env.patch_cluster({"brokers": brokers})
    row.ready(f"{before}→{brokers}", env.wait_settled(brokers, since=t0, timeout=SETTLE_TIMEOUT_S,
                                                       what=f"scale-up to {brokers}"))
