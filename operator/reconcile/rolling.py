"""Rolling restarts of broker pods, and leadership handed back once a roll is done.

Why: the StatefulSet uses `updateStrategy: OnDelete`; the operator deletes
one outdated pod at a time by the rule in `restarts.py` and records each
step as an Event. A pod restarted by a roll hands its leaderships to the
brokers that stayed up, so after a roll those few lead almost everything:
like Kafka's `auto.leader.rebalance.enable`, once no pod is outdated any
more the operator asks the controller for a preferred-leader election
(`POST /admin/v1/partitions/elect-leaders`), repeating while a restarted
broker's replicas are still catching up to rejoin the ISR, and reports the
leader skew in status (`leaderSkew`, `preferredLeaderImbalance`).

The election owes nothing to which condition the last pass wrote: the
first pod a roll deletes marks the Cluster `kelp.dev/elect-leaders:
pending`, and the mark goes only once no partition is off its preferred
leader for a reason an election can fix (a pass that reported a storage or
apply problem in between, or an operator restart, cannot lose it). A user
may set the same annotation to ask for an election at any time.

`kelp.dev/manual-rolling-update: "true"` on the Cluster restarts every broker
pod once under the same rule: the operator marks each pod with the same
annotation (a pod so marked counts as outdated) and removes the Cluster's,
so an operator restart in between neither loses nor repeats the request.
"""

from __future__ import annotations

from kelp.errors import ErrorCode

from ..kube.client import POD
from ..model.objects_kelp import Condition
from ..model.status import condition, leader_balance
from ..plans.restarts import IGNORE_MIN_INSYNC, MANUAL_ROLL, next_restart, ordinal, pod_ready
from .brokers import AdminError
from .resources import ClusterPass

__all__ = ["roll", "mark_manual_roll", "elect_after_roll", "ROLL_REASONS", "ELECT_ANNOTATION"]

ROLL_REASONS = frozenset({"RollingRestart", "RestartingUnready", "RestartWaiting", "RestartBlocked", "RestartStalled"})
STOPPED = frozenset({"RestartBlocked", "RestartStalled"})  # Progressing=False, a Warning Event
ELECTING = "ElectingLeaders"
ELECT_ANNOTATION = "kelp.dev/elect-leaders"


async def mark_manual_roll(ctx: ClusterPass) -> None:
    if ctx.annotations.get(MANUAL_ROLL) != "true":
        return
    for pod in ctx.pods:
        meta = pod["metadata"]
        if (meta.get("annotations") or {}).get(MANUAL_ROLL) != "true":
            await ctx.kube.merge_patch(POD, ctx.spec.namespace, meta["name"],
                                       {"metadata": {"annotations": {MANUAL_ROLL: "true"}}})
            meta.setdefault("annotations", {})[MANUAL_ROLL] = "true"
    await ctx.annotate(MANUAL_ROLL, None)
    await ctx.emit("ManualRollingUpdate", f"{MANUAL_ROLL}: {len(ctx.pods)} broker pod(s) marked to restart, one at "
                   "a time under the min.insync.replicas rule")


async def roll(ctx: ClusterPass, update_revision: str, replicas: int) -> Condition | None:
    """Restart the next outdated broker pod if the rule allows; the Progressing condition while rolling.

    `replicas` is the StatefulSet's size: a pod of it that does not exist (deleted, not created again yet) is
    waited for like a starting one."""
    observed = ctx.observed
    controller = int((observed.cluster or {}).get("controller", -1))
    override = ctx.annotations.get(IGNORE_MIN_INSYNC) == "true"
    decision = next_restart(ctx.pods, update_revision, observed.topics if observed.cluster is not None else None,
                            controller, ignore_min_insync=override, unobserved=observed.error or "",
                            now_ms=ctx.now_ms, stuck_after_s=ctx.spec.restart_ready_timeout_s, replicas=replicas)
    if decision is None:
        await _consume_override(ctx)
        return None
    if decision.pod is not None:
        await ctx.kube.fence()
        if ctx.annotations.get(ELECT_ANNOTATION) != "pending":
            await ctx.annotate(ELECT_ANNOTATION, "pending")
        await ctx.kube.delete(POD, ctx.spec.namespace, decision.pod)
        await ctx.emit(decision.reason, decision.message)
    elif decision.reason in STOPPED:
        await ctx.emit(decision.reason, decision.message, warning=True)
    return condition("Progressing", decision.reason not in STOPPED, decision.reason, decision.message)


async def _consume_override(ctx: ClusterPass) -> None:
    """`kelp.dev/restart-ignore-min-insync` is one-shot: once the roll it let through is done, it goes.

    A roll was running if this pass follows one (the previous Progressing reason is a roll's) or its
    election is still owed (`kelp.dev/elect-leaders: pending`, set by a roll's first restart). An override set
    while no roll runs stays for the next one (the roll a spec change is about to start)."""
    if IGNORE_MIN_INSYNC not in ctx.annotations:
        return
    if ctx.previous_reason("Progressing") not in ROLL_REASONS and ctx.annotations.get(ELECT_ANNOTATION) != "pending":
        return
    await ctx.annotate(IGNORE_MIN_INSYNC, None)
    await ctx.emit("RestartOverrideRemoved", f"the roll is done: {IGNORE_MIN_INSYNC} removed, so the next roll "
                   "checks availability again before each restart")


async def elect_after_roll(ctx: ClusterPass) -> Condition | None:
    """Once a roll has finished: preferred-leader election until the restarted brokers lead their share again."""
    pending = ctx.annotations.get(ELECT_ANNOTATION) == "pending"
    if not pending and ctx.previous_reason("Progressing") not in ROLL_REASONS | {ELECTING}:
        return None
    observed = ctx.observed
    if observed.cluster is None or ctx.admin is None:
        message = ("the roll is done; leaders move back to their preferred replicas once the brokers answer: "
                   f"{observed.error}")
        if ctx.previous_reason("Progressing") != ELECTING:
            await ctx.emit(ELECTING, message)
        return condition("Progressing", True, ELECTING, message)
    live = {int(b["id"]) for b in observed.cluster.get("brokers", [])}
    # The last pod of a roll is on the new revision before its broker is back: those brokers are awaited too.
    returning = {ordinal(p["metadata"]["name"]) for p in ctx.pods
                 if not pod_ready(p) or p["metadata"].get("deletionTimestamp")} & set(range(ctx.spec.brokers))
    skew, imbalance = leader_balance(observed.topics, live)
    electable, catching_up = 0, 0
    for t in observed.topics:
        for p in t.get("partitions", []):
            replicas, leader = p.get("replicas") or [], p.get("leader", -1)
            if not replicas or leader == replicas[0]:
                continue
            if replicas[0] in (p.get("isr") or []) and replicas[0] in live:
                electable += 1
            elif replicas[0] in live or replicas[0] in returning:
                catching_up += 1
    elected = 0
    if electable:
        await ctx.kube.fence()
        try:
            answer = await ctx.admin.elect_leaders()
        except AdminError as exc:
            message = f"preferred-leader election after the roll refused: {exc.message}; retried next pass"
            await ctx.emit("LeaderElectionFailed", message, warning=True)
            return condition("Progressing", True, ELECTING, message)
        elected = sum(1 for code in (answer.get("results") or {}).values() if code == ErrorCode.NONE)
        if elected:
            await ctx.emit("PreferredLeaderElection", f"after the roll: leadership of {elected} partition(s) moved "
                           f"back to their preferred replica (leader skew was {skew}, {imbalance} partition(s) off "
                           "their preferred leader)")
    if catching_up:
        message = (f"{catching_up} partition(s) wait for their preferred leader to rejoin the ISR before leadership "
                   "moves back to it")
        if ctx.previous_reason("Progressing") != ELECTING and not elected:
            await ctx.emit(ELECTING, message)
        return condition("Progressing", True, ELECTING, message)
    if elected:
        return condition("Progressing", True, ELECTING, f"leadership of {elected} partition(s) moved back to their "
                         "preferred replicas")
    if pending:
        await ctx.annotate(ELECT_ANNOTATION, None)
    return None
