"""Partition moves during scaling: drain before a scale-down, spread after a scale-up, and watch every move.

Why: a StatefulSet scale-down deletes the highest-numbered pods, so the
brokers that go must hold no replica first, and must stay so: topics created
while the drain runs (an application auto-creating them, a Topic growing)
are placed on every live broker. So the scale-down **decommissions first**
(Redpanda's and KRaft's way): the controller marks the brokers that go
(`POST /admin/v1/brokers/{id}/decommission`, a mark in the metadata log) and
from then on places no new replica or leader on them; the drain moves their
replicas away; and right before the StatefulSet shrinks, the controller is
asked again what each still holds (`confirm_drained`), so a replica placed
before the mark, or a move the observation missed, keeps the pod. Broker ids
below `spec.brokers` are recommissioned (a scale-down undone, a scale-up
reusing ids). Brokers added by a scale-up hold
nothing until replicas move to them (the plans are in `plans/moves.py`). A move
the controller accepted can still stop making progress — its new replica's
broker died, its disk is full, its fetcher is stuck — and a drain waiting on
it waits forever. So every pass with moves in flight reads their progress
(`/admin/v1/partitions/reassignments`: each new replica's log end offset);
when neither a move completed nor any new replica's log grew for
`spec.reassignment.stallTimeoutSeconds`, the Cluster says so
(Progressing=False, `ReassignmentStalled`, with the partitions and why) and
waits for the user's way out, the Cluster annotation `kelp.dev/reassignment`:

- `cancel`: every move in flight is cancelled (`"replicas": null`: the
  partitions keep their original replicas); a pending drain plans again on
  the next pass, avoiding the brokers the cancelled moves were adding
  replicas to (the annotation `kelp.dev/drain-avoid`, removed once the
  drain is done), a rebalance is dropped;
- `retry`: cancelled, then the same targets submitted again (a fetcher that
  was stuck starts over).

Nothing here raises for a refusal a user can act on: a controller refusing a
move, or a staying broker that is dead, becomes a condition and an Event.
"""

from __future__ import annotations

from ..kube.client import PERSISTENT_VOLUME_CLAIM
from ..model.admin_types import PartitionMove, Reassignment
from ..model.objects_kelp import Condition, ReassignmentStatus
from ..model.status import Observed, condition, rfc3339, rfc3339_ms
from ..plans.moves import DrainBlocked, Placement, drain_plan, rebalance_plan
from .brokers import AdminError, BrokerAdmin
from .resources import ClusterPass
from .storage import parse_quantity
from .throttles import clear_throttles, throttle_moves

__all__ = ["drain", "confirm_drained", "recommission", "rebalance", "watch_reassignments", "partitions_of",
           "racks_of", "REBALANCE_ANNOTATION", "REASSIGNMENT_ANNOTATION"]

REBALANCE_ANNOTATION = "kelp.dev/rebalance"
REASSIGNMENT_ANNOTATION = "kelp.dev/reassignment"
AVOID_ANNOTATION = "kelp.dev/drain-avoid"  # brokers a cancelled move stalled on: the drain's last choice
MAX_LISTED = 8


class PartitionReplicas(Placement):
    """A partition's replicas, and whether a move of them is in flight."""

    moving: bool


def partitions_of(observed: Observed) -> list[PartitionReplicas]:
    return [{"topic": t["name"], "partition": p["partition"], "replicas": list(p["replicas"]),
             "moving": bool(p.get("adding") or p.get("removing")), "size_bytes": p.get("size_bytes")}
            for t in observed.topics for p in t.get("partitions", [])]


def avoided(ctx: ClusterPass) -> set[int]:
    raw = ctx.annotations.get(AVOID_ANNOTATION) or ""
    return {int(b) for b in raw.split(",") if b.strip().isdigit()}


async def _capacities(ctx: ClusterPass, brokers: list[int]) -> dict[int, int]:
    """Each broker's volume in bytes (its claim's capacity, else its request); brokers without a claim are left out."""
    out: dict[int, int] = {}
    for b in brokers:
        claim = await ctx.kube.get(PERSISTENT_VOLUME_CLAIM, ctx.spec.namespace, f"data-{ctx.spec.name}-{b}")
        if claim is None:
            continue
        size = ((claim.get("status") or {}).get("capacity") or {}).get("storage") \
            or ((claim.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
        try:
            out[b] = int(parse_quantity(size)) if size else 0
        except ValueError:
            continue
        if not out[b]:
            del out[b]
    return out


def racks_of(observed: Observed) -> dict[int, str | None]:
    return {int(b["id"]): b.get("rack") for b in (observed.cluster or {}).get("brokers", [])}


def decommissioned_of(observed: Observed) -> set[int]:
    return {int(b) for b in (observed.cluster or {}).get("decommissioned") or []}


async def _decommission(ctx: ClusterPass, admin: BrokerAdmin, leaving: list[int]) -> str | None:
    """Mark the brokers that go (those not marked yet); the controller's refusal as a message, None when done."""
    unmarked = [b for b in leaving if b not in decommissioned_of(ctx.observed)]
    if not unmarked:
        return None
    await ctx.kube.fence()
    try:
        for b in unmarked:
            await admin.decommission(b)
    except AdminError as exc:
        return exc.message
    await ctx.emit("BrokersDecommissioned", f"broker(s) {unmarked} decommissioned before the scale-down: the "
                   "controller places no new replica or leader on them; their replicas move away next")
    return None


async def recommission(ctx: ClusterPass) -> None:
    """Broker ids the Cluster keeps (below spec.brokers) that are marked decommissioned take replicas again."""
    admin = ctx.admin
    back = sorted(b for b in decommissioned_of(ctx.observed) if b < ctx.spec.brokers)
    if admin is None or not back:
        return
    await ctx.kube.fence()
    try:
        for b in back:
            await admin.decommission(b, decommissioned=False)
    except AdminError as exc:
        await ctx.emit("RecommissionFailed", f"broker(s) {back} are below spec.brokers but still decommissioned, "
                       f"and recommissioning them failed: {exc.message}; retried next pass", warning=True)
        return
    await ctx.emit("BrokersRecommissioned", f"broker(s) {back} recommissioned: spec.brokers keeps them, so they take "
                   "new replicas and leaderships again")


async def confirm_drained(ctx: ClusterPass, leaving: list[int]) -> Condition | None:
    """Right before the StatefulSet shrinks: the controller's own answer that each broker that goes is
    decommissioned and holds nothing. None when it is so; otherwise the condition that keeps the pods."""
    admin = ctx.admin
    if admin is None:
        return condition("Progressing", True, "DrainWaiting", f"broker(s) {leaving} are removed once the controller "
                         f"confirms they hold nothing: {ctx.observed.error or 'no ready broker'}")
    held: list[str] = []
    try:
        for b in leaving:
            answer = await admin.holdings(b)
            if not answer.get("decommissioned"):
                held.append(f"broker {b} is not decommissioned (recommissioned meanwhile?); the drain marks it again")
            elif answer.get("replicas"):
                listed = ", ".join(answer.get("partitions") or [])
                held.append(f"broker {b} still holds {answer['replicas']} replica(s) ({listed})")
    except AdminError as exc:
        return condition("Progressing", True, "DrainWaiting", f"broker(s) {leaving} are removed once the controller "
                         f"confirms they hold nothing: {exc.message}")
    if not held:
        return None
    return condition("Progressing", True, "Draining", f"scale-down to {ctx.spec.brokers} broker(s) waits: the "
                     f"controller says {'; '.join(held)}; they move on the next pass")


async def _submit(ctx: ClusterPass, admin: BrokerAdmin, plan: list[PartitionMove]) -> str | None:
    """Submit moves (after proving leadership); the controller's refusal as a message, None when accepted."""
    if not plan:
        return None
    await ctx.kube.fence()
    current = {(p["topic"], p["partition"]): list(p["replicas"]) for p in partitions_of(ctx.observed)}
    try:
        await throttle_moves(ctx, admin, plan, current, racks_of(ctx.observed))
        await admin.reassign(plan)
    except AdminError as exc:
        return exc.message
    ctx.submitted += len(plan)
    listed = ", ".join(f"{m['topic']}-{m['partition']}->{m['replicas']}" for m in plan[:MAX_LISTED])
    more = f" and {len(plan) - MAX_LISTED} more" if len(plan) > MAX_LISTED else ""
    await ctx.emit("ReassignmentSubmitted", f"moving {len(plan)} partition(s): {listed}{more}")
    return None


async def drain(ctx: ClusterPass, current: int) -> tuple[int, Condition | None]:
    """(replicas to apply, Progressing condition) while scaling down from `current` brokers."""
    spec, observed, admin = ctx.spec, ctx.observed, ctx.admin
    leaving = list(range(spec.brokers, current))
    if admin is None or observed.cluster is None:
        return current, condition("Progressing", True, "DrainWaiting",
                                  f"scale-down to {spec.brokers} waits for the brokers to answer, so that broker(s) "
                                  f"{leaving} can be drained first: {observed.error or 'no ready broker'}")
    refused = await _decommission(ctx, admin, leaving)
    if refused is not None:
        message = (f"scale-down to {spec.brokers} broker(s) waits: decommissioning broker(s) {leaving} (so that no new "
                   f"replica lands on them while they drain) was refused: {refused}; retried next pass")
        await ctx.emit("DrainRefused", message, warning=True)
        return current, condition("Progressing", False, "DrainRefused", message)
    parts = partitions_of(observed)
    holding = [p for p in parts if set(p["replicas"]) & set(leaving)]
    if not holding:
        if AVOID_ANNOTATION in ctx.annotations:
            await ctx.annotate(AVOID_ANNOTATION, None)
        return spec.brokers, None  # the caller asks the controller again right before the shrink
    live = set(racks_of(observed))
    dead = [b for b in range(spec.brokers) if b not in live]
    if dead:
        message = (f"scale-down to {spec.brokers} broker(s) waits: staying broker(s) {dead} are not registered with "
                   f"the controller, so the replicas of {len(holding)} partition(s) on broker(s) {leaving} have "
                   "nowhere safe to go; the drain resumes once they are back (check their pods)")
        await ctx.emit("DrainBlocked", message, warning=True)
        return current, condition("Progressing", False, "DrainBlocked", message)
    try:
        keep = list(range(spec.brokers))
        plan = drain_plan([p for p in holding if not p["moving"]], keep=keep, racks=racks_of(observed),
                          capacity=await _capacities(ctx, keep), avoid=avoided(ctx), placed=parts)
    except DrainBlocked as exc:
        message = (f"cannot scale down to {spec.brokers} broker(s): {exc}; lower the topic's replication factor "
                   "or keep more brokers")
        await ctx.emit("ScaleDownBlocked", message, warning=True)
        return current, condition("Progressing", False, "ScaleDownBlocked", message)
    refused = await _submit(ctx, admin, plan)
    if refused is not None:
        message = f"draining broker(s) {leaving} before scale-down: the controller refused the moves: {refused}"
        await ctx.emit("DrainRefused", message, warning=True)
        return current, condition("Progressing", False, "DrainRefused", message)
    return current, condition("Progressing", True, "Draining",
                              f"moving replicas of {len(holding)} partition(s) off broker(s) {leaving} before their "
                              f"pods are removed ({len(plan)} reassignment(s) submitted now)")


async def rebalance(ctx: ClusterPass, admin: BrokerAdmin) -> Condition | None:
    """After a scale-up, once every broker is registered: spread replicas onto the new brokers, once."""
    spec, observed = ctx.spec, ctx.observed
    live = set(racks_of(observed))
    if not set(range(spec.brokers)) <= live:
        return condition("Progressing", True, "RebalanceWaiting",
                         f"replicas move to the new brokers once all {spec.brokers} are registered ({sorted(live)})")
    parts = partitions_of(observed)
    if any(p["moving"] for p in parts):
        return condition("Progressing", True, "Rebalancing", "partition reassignments are in progress")
    plan = rebalance_plan(parts, list(range(spec.brokers)), racks=racks_of(observed))
    refused = await _submit(ctx, admin, plan)
    if refused is not None:
        message = f"spreading replicas onto the new brokers: the controller refused the moves: {refused}"
        await ctx.emit("RebalanceRefused", message, warning=True)
        return condition("Progressing", False, "RebalanceRefused", message)
    await ctx.annotate(REBALANCE_ANNOTATION, None)
    if plan:
        return condition("Progressing", True, "Rebalancing",
                         f"moving {len(plan)} partition replica(s) onto the new brokers")
    return None


def _progress(moves: list[Reassignment]) -> int:
    """Sum of the new replicas' log end offsets: grows while any of them fetches."""
    total = 0
    for m in moves:
        offsets = m.get("log_end_offsets") or {}
        total += sum(int(offsets.get(str(r)) or 0) for r in m.get("adding", []))
    return total


def _describe(move: Reassignment, live: set[int]) -> str:
    offsets = move.get("log_end_offsets") or {}
    leader_end = offsets.get(str(move.get("leader")))
    parts = []
    for r in move.get("adding", []):
        why = "not registered" if r not in live else f"log end {offsets.get(str(r), 'unknown')} of {leader_end}"
        parts.append(f"broker {r} {why}")
    return f"{move['topic']}-{move['partition']} ({'; '.join(parts) or 'removing ' + str(move.get('removing'))})"


async def _cancel(ctx: ClusterPass, admin: BrokerAdmin, moves: list[Reassignment], *, retry: bool) -> str:
    await ctx.kube.fence()
    await admin.reassign([{"topic": m["topic"], "partition": m["partition"], "replicas": None} for m in moves])
    if not retry:
        return f"cancelled {len(moves)} partition move(s); their replicas are back where they were"
    targets: list[PartitionMove] = [
        {"topic": m["topic"], "partition": m["partition"],
         "replicas": [r for r in m["replicas"] if r not in m.get("removing", [])]} for m in moves]
    await admin.reassign(targets)
    return f"cancelled and resubmitted {len(moves)} partition move(s)"


async def watch_reassignments(ctx: ClusterPass) -> tuple[ReassignmentStatus | None, Condition | None]:
    """(status.reassignment, Progressing condition or None) for the moves in flight; cancel/retry on request."""
    action = ctx.annotations.get(REASSIGNMENT_ANNOTATION)
    admin = ctx.admin
    if admin is None or ctx.observed.cluster is None:
        return ctx.old_status.get("reassignment"), None
    if not any(p["moving"] for p in partitions_of(ctx.observed)):
        if ctx.submitted:  # moves submitted by this very pass: their deadline starts now
            return {"partitions": ctx.submitted, "progress": 0, "lastProgressTime": rfc3339(ctx.now_ms),
                    "stalledPartitions": []}, None
        try:
            cleared = await clear_throttles(ctx, admin)
        except AdminError as exc:
            await ctx.emit("ReplicationThrottleNotCleared", f"removing the replication throttles of the finished "
                           f"moves failed: {exc.message}; retried next pass", warning=True)
        else:
            if cleared:
                await ctx.emit("ReplicationThrottleCleared", cleared)
        if action:
            await ctx.annotate(REASSIGNMENT_ANNOTATION, None)
            await ctx.emit("ReassignmentIdle", f"{REASSIGNMENT_ANNOTATION}={action}: no reassignment in progress")
        return None, None
    try:
        moves = await admin.reassignments()
    except AdminError:
        return ctx.old_status.get("reassignment"), None
    if action in ("cancel", "retry"):
        try:
            done = await _cancel(ctx, admin, moves, retry=action == "retry")
        except AdminError as exc:
            message = (f"{REASSIGNMENT_ANNOTATION}={action} failed: {exc.message}; the annotation stays, "
                       "the next pass tries again")
            await ctx.emit("ReassignmentCancelFailed", message, warning=True)
            return ctx.old_status.get("reassignment"), condition("Progressing", False, "ReassignmentStalled", message)
        await ctx.annotate(REASSIGNMENT_ANNOTATION, None)
        stalled_on = sorted({int(r) for m in moves for r in m.get("adding", [])} | avoided(ctx))
        draining = any(int(r) >= ctx.spec.brokers for m in moves for r in m.get("removing", []))
        if action == "cancel" and draining and stalled_on:
            # The drain plans again on the next pass: not onto the brokers these moves stalled on, if it can.
            await ctx.annotate(AVOID_ANNOTATION, ",".join(str(b) for b in stalled_on))
            done += f"; the drain avoids broker(s) {stalled_on} when it plans again ({AVOID_ANNOTATION})"
        reason = "ReassignmentRetried" if action == "retry" else "ReassignmentCancelled"
        await ctx.emit(reason, done)
        return None, condition("Progressing", True, reason, done)
    if action:
        await ctx.emit("ReassignmentAnnotationInvalid", f"{REASSIGNMENT_ANNOTATION}={action!r} is not understood; "
                       "use cancel or retry", warning=True)
    previous: ReassignmentStatus = ctx.old_status.get("reassignment") or {}
    progress = _progress(moves)
    unchanged = previous.get("partitions") == len(moves) and previous.get("progress") == progress
    since = previous["lastProgressTime"] if unchanged and previous.get("lastProgressTime") else rfc3339(ctx.now_ms)
    idle_ms = ctx.now_ms - rfc3339_ms(since)
    field: ReassignmentStatus = {"partitions": len(moves), "progress": progress, "lastProgressTime": since,
                                 "stalledPartitions": []}
    if idle_ms < ctx.spec.reassignment_stall_s * 1000:
        return field, None
    live = set(racks_of(ctx.observed))
    field["stalledPartitions"] = [f"{m['topic']}-{m['partition']}" for m in moves]
    listed = ", ".join(_describe(m, live) for m in moves[:MAX_LISTED])
    more = f" and {len(moves) - MAX_LISTED} more" if len(moves) > MAX_LISTED else ""
    message = (f"{len(moves)} partition move(s) made no progress for {int(idle_ms / 1000)}s (since {since}; "
               f"spec.reassignment.stallTimeoutSeconds is {ctx.spec.reassignment_stall_s}): {listed}{more}. "
               f"Annotate the Cluster {REASSIGNMENT_ANNOTATION}=cancel to cancel them (replicas stay where they "
               f"were) or {REASSIGNMENT_ANNOTATION}=retry to cancel and submit them again")
    await ctx.emit("ReassignmentStalled", message, warning=True)
    return field, condition("Progressing", False, "ReassignmentStalled", message)

