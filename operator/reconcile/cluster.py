"""What one reconciliation of a Cluster does, apart from kopf: children, scaling, restarts, status.

Why: the handlers and the resync loop only decide *when* to reconcile
(`runner.py`); what to do lives here, where a test drives it with a fake
API client and a fake or real broker admin. It returns `(status fields,
conditions)` and never raises for a condition a user can act on — a wrong
spec, unreachable or dead brokers, a refused move, a storage change
Kubernetes cannot make: each becomes a condition with a reason, and each
decision an Event (`events.py`). Only unexpected errors propagate (the
runner then sets Ready=Unknown: status never claims health it did not see).

One pass, in order: read the spec (with the replication defaults pinned at
creation, `spec.replication_defaults`) → storage changes (`storage.py`) →
scale-down drain or scale-up mark (`scaling.py`) → apply every child
(server-side apply: unchanged ones are no-ops; the NetworkPolicy and `<cluster>-http` are deleted when
switched off) → the dynamic broker config
(`dynamic_config.py`: no restart needed) → watch reassignments in
flight → rebalance after a scale-up → mark a manual roll, restart the next
outdated pod (`rolling.py`) → preferred-leader election after a roll →
status. With `kelp.dev/pause-reconciliation: "true"` only the observation
and the status remain.
"""

from __future__ import annotations

import asyncio
from typing import Mapping

from kelp.clock import WallClockMs, wall_clock_ms

from ..kube.client import CONFIG_MAP, NETWORK_POLICY, POD, SERVICE, STATEFUL_SET, TOPIC, KubeClient
from ..kube.events import Recorder
from ..manifests.builders import Address, Manifest, cluster_children, selector_for
from ..manifests.network_policy import network_policy, policy_name
from ..manifests.rack import rack_condition
from ..manifests.spec import DEFAULTS_ANNOTATION, ClusterSpec, SpecError, parse_defaults
from ..model.admin_types import TopicDescription, TopicListing
from ..model.objects import Pod, StatefulSet, StatefulSetStatus
from ..model.objects_kelp import ClusterResource, ClusterStatus, Condition, KelpResource
from ..model.status import Observed, cluster_status, condition
from ..plans.restarts import ordinal, pod_ready
from .brokers import AdminError, BrokerAdmin
from .cluster_tls import previous_floor, reconcile_tls
from .dynamic_config import apply_dynamic_config
from .groups import reconcile_group
from .listeners import advertised, apply_external, mark_moved_addresses, remove_external
from .resources import PAUSE_ANNOTATION, AdminFactory, ClusterPass, Result, apply_child, paused
from .rolling import elect_after_roll, mark_manual_roll, roll
from .scaling import REBALANCE_ANNOTATION, confirm_drained, drain, rebalance, recommission, watch_reassignments
from .storage import reconcile_storage
from .topics import TopicOwners, delete_topic, reconcile_topic, topic_name_of
from .users import reconcile_user

__all__ = ["reconcile", "reconcile_cluster", "reconcile_topic", "reconcile_group", "delete_topic", "topic_name_of",
           "observe", "REBALANCE_ANNOTATION"]

DESCRIBE_CONCURRENCY = 8
RACK_HINT = ("spec.rack.topologyKey needs cluster-wide RBAC (its brokers read their node's labels): install the "
             "operator's chart with rbac.rackAwareness=true, or remove spec.rack")


async def observe(admin: BrokerAdmin) -> Observed:
    """The brokers' view: the cluster (brokers, controller) and every topic described; or why not."""
    try:
        view = await admin.cluster()
        listed = await admin.list_topics()
        sem = asyncio.Semaphore(DESCRIBE_CONCURRENCY)

        async def describe(name: str) -> TopicDescription | None:
            async with sem:
                try:
                    return await admin.describe_topic(name)
                except AdminError as exc:
                    if exc.status == 404:
                        return None  # deleted between the list and the describe
                    raise

        described = await asyncio.gather(*(describe(t["name"]) for t in listed))
        topics = [_listed_as(t, d) for t, d in zip(listed, described, strict=True) if d]
        return Observed(cluster=view, topics=topics)
    except AdminError as exc:
        return Observed(error=exc.message)


def _listed_as(listed: TopicListing, described: TopicDescription) -> TopicDescription:
    """A described topic, internal as the topic list says."""
    return {**described, "internal": listed.get("internal", False)}


async def _observe_cluster(spec: ClusterSpec, sts: StatefulSet | None,
                           admin_for: AdminFactory) -> tuple[Observed, BrokerAdmin | None]:
    if not int(_sts_status(sts).get("readyReplicas") or 0):
        return Observed(error="no broker pod is Ready yet"), None
    admin = await admin_for(spec)
    if not admin.urls:
        return Observed(error="no ready broker pod has an IP yet"), None
    return await observe(admin), admin


def _sts_status(sts: StatefulSet | None) -> StatefulSetStatus:
    status: StatefulSetStatus = (sts.get("status") if sts else None) or {}
    return status


def _ready_brokers(pods: list[Pod]) -> set[int]:
    return {ordinal(p["metadata"]["name"]) for p in pods
            if pod_ready(p) and not p["metadata"].get("deletionTimestamp")}


async def _apply(ctx: ClusterPass, manifests: list[Manifest]) -> Condition | None:
    """Server-side apply each child in order, up to the first the API server refuses (its condition)."""
    for manifest in manifests:
        hint = RACK_HINT if manifest["kind"] in ("ClusterRole", "ClusterRoleBinding") else None
        _applied, refused = await (apply_child(ctx, manifest, hint=hint) if hint else apply_child(ctx, manifest))
        if refused is not None:
            return refused
    return None


async def _remove_network_policy(ctx: ClusterPass) -> None:
    """spec.networkPolicy switched off (or never on): no NetworkPolicy of ours narrows the brokers' ports."""
    name = policy_name(ctx.spec)
    if await ctx.kube.get(NETWORK_POLICY, ctx.spec.namespace, name) is None:
        return
    await ctx.kube.fence()
    await ctx.kube.delete(NETWORK_POLICY, ctx.spec.namespace, name)
    await ctx.emit("NetworkPolicyRemoved", f"{name} deleted: spec.networkPolicy.enabled is false")


async def _remove_http_service(ctx: ClusterPass) -> None:
    """spec.http switches both the REST Proxy and the Schema Registry off: `<cluster>-http` has nothing to serve."""
    name = ctx.spec.http_service
    if await ctx.kube.get(SERVICE, ctx.spec.namespace, name) is None:
        return
    await ctx.kube.fence()  # its clients lose their address
    await ctx.kube.delete(SERVICE, ctx.spec.namespace, name)
    await ctx.emit("HttpServiceRemoved", f"{name} deleted: spec.http switches both the REST Proxy and the Schema "
                   "Registry off")


async def _record_transition(ctx: ClusterPass, progressing: Condition) -> None:
    """Every change of what the operator is doing is an Event, also the waits no step records itself
    (ExternalAddressWaiting, ExpandingVolumes, DrainWaiting, RebalanceWaiting, RollingOut, Reconciled...)."""
    reason = progressing["reason"]
    if reason == ctx.previous_reason("Progressing") or any(r == reason for r, _ in ctx.events.emitted):
        return
    await ctx.emit(reason, progressing["message"], warning=progressing["status"] == "False")


async def reconcile_cluster(body: ClusterResource, kube: KubeClient, admin_for: AdminFactory, *,
                            events: Recorder | None = None, clock_ms: WallClockMs = wall_clock_ms
                            ) -> Result[ClusterStatus]:
    """One pass over a Cluster; `clock_ms` (wall-clock milliseconds, kelp.clock) times reassignment progress."""
    meta = body["metadata"]
    generation = int(meta.get("generation") or 0)
    events = events or Recorder(kube, clock_ms=clock_ms)
    desired = int((body.get("spec") or {}).get("brokers", 3))
    name, namespace = meta["name"], meta["namespace"]
    config_map = await kube.get(CONFIG_MAP, namespace, f"{name}-config")
    annotations = (config_map["metadata"].get("annotations") if config_map else None) or {}
    pinned = parse_defaults(annotations.get(DEFAULTS_ANNOTATION))
    try:
        spec = ClusterSpec.from_resource(body, pinned_defaults=pinned or None)
    except SpecError as exc:
        await events.emit(body, "InvalidSpec", str(exc), warning=True)
        return cluster_status(desired=desired, ready_brokers=(), observed=Observed(), managed_topics=set(),
                              bootstrap="", generation=generation, sts_generation_current=False,
                              spec_error=str(exc))
    before = await kube.get(STATEFUL_SET, namespace, name)
    current = int(((before.get("spec") if before else None) or {}).get("replicas") or 0)
    pods = await kube.list(POD, namespace, labels=selector_for(spec))
    observed, admin = await _observe_cluster(spec, before, admin_for)
    ctx = ClusterPass(body=body, spec=spec, kube=kube, events=events, now_ms=clock_ms(), observed=observed,
                      admin=admin, pods=pods)
    notes: list[Condition] = []
    extra: ClusterStatus = {}
    sts: StatefulSet | None
    if paused(body):
        notes.append(condition("Progressing", False, "ReconciliationPaused",
                               f"the Cluster is annotated {PAUSE_ANNOTATION}=true: nothing is applied, restarted or "
                               "moved; status still shows what the brokers report"))
        if ctx.previous_reason("Progressing") != "ReconciliationPaused":
            await ctx.emit("ReconciliationPaused", f"{PAUSE_ANNOTATION}=true: reconciliation stopped")
        replicas = current or spec.brokers
        sts = before
    else:
        if ctx.previous_reason("Progressing") == "ReconciliationPaused":
            await ctx.emit("ReconciliationResumed", f"{PAUSE_ANNOTATION} removed: reconciling again")
        claim_size, claim_class, storage_note = await reconcile_storage(ctx, before, max(current, spec.brokers))
        await recommission(ctx)
        replicas = spec.brokers
        if before is not None and spec.brokers < current:
            replicas, note = await drain(ctx, current)
            notes += [note] if note else []
        elif before is not None and spec.brokers > current and not ctx.annotations.get(REBALANCE_ANNOTATION):
            await ctx.annotate(REBALANCE_ANNOTATION, f"{current}->{spec.brokers}")
            await ctx.emit("ScaleUp", f"{current} -> {spec.brokers} broker(s): replicas move to the new brokers once "
                           "they have registered")
            meta = {**meta, "annotations": {**ctx.annotations, REBALANCE_ANNOTATION: "pending"}}
            ctx.body = {**body, "metadata": meta}
        external: dict[int, Address] | None = None
        external_note: Condition | None = None
        extra["externalAddresses"] = None
        if spec.external_type:
            external, allowed, external_note = await apply_external(ctx, replicas, current)
            replicas = min(replicas, allowed)
        if before is not None and replicas < current:
            # The StatefulSet deletes the highest pods once it shrinks: the controller confirms first that
            # they hold nothing (asked now, not from the pass's observation), then leadership is proven (an
            # availability decision like a pod delete), and it is an Event like every other decision.
            waiting = await confirm_drained(ctx, list(range(replicas, current)))
            if waiting is not None:
                replicas = current
                notes.append(waiting)
            else:
                await ctx.kube.fence()
                await ctx.emit("ScaleDown", f"{current} -> {replicas} broker(s): the controller confirms broker(s) "
                               f"{list(range(replicas, current))} are decommissioned and hold no replica; their "
                               "pods are removed")
        tls = await reconcile_tls(ctx, brokers=max(replicas, current, spec.brokers), external=external,
                                  floor=previous_floor(before))
        children = cluster_children(spec, replicas=replicas, claim=(claim_size, claim_class), external=external,
                                    trust_floor=tls.trust_floor)
        refused = await _apply(ctx, [*children, network_policy(spec)] if spec.network_policy else children)
        await remove_external(ctx, keep=len(external or {}))
        if not spec.network_policy:
            await _remove_network_policy(ctx)
        if not spec.http_service_wanted:
            await _remove_http_service(ctx)
        sts = await kube.get(STATEFUL_SET, namespace, name)
        ctx.pods = await kube.list(POD, namespace, labels=selector_for(spec))
        dynamic_note = await apply_dynamic_config(ctx)
        field, stalled = await watch_reassignments(ctx)
        extra["reassignment"] = field
        if stalled is not None:
            notes.insert(0, stalled)
        if not notes and admin is not None and observed.cluster is not None \
                and ctx.annotations.get(REBALANCE_ANNOTATION):
            note = await rebalance(ctx, admin)
            notes += [note] if note else []
        update_revision = _sts_status(sts).get("updateRevision") or ""
        if external is not None:
            wanted = advertised(ctx, external)
            extra["externalAddresses"] = [f"{h}:{p}" for n, (h, p) in sorted(wanted.items()) if n < spec.brokers]
        if not notes:
            if external is not None and not spec.secured:
                # The secured layout registers an address per listener, which the admin API does not list yet.
                await mark_moved_addresses(ctx, wanted)
            await mark_manual_roll(ctx)
            note = await roll(ctx, update_revision, replicas)
            if note is None:
                note = await elect_after_roll(ctx)
            notes += [note] if note else []
        for extra_note in (dynamic_note, external_note, tls.condition, refused, storage_note):
            if extra_note is None:
                continue
            if extra_note["reason"] == "ExpandingVolumes":
                notes.append(extra_note)  # a wait on the storage driver never hides a blocked roll or drain
            else:
                notes.insert(0, extra_note)
    sts_status = _sts_status(sts)
    sts_generation = (sts["metadata"].get("generation") if sts else None) or 0
    current_gen = (int(sts_status.get("observedGeneration") or 0) >= int(sts_generation)
                   and int(sts_status.get("updatedReplicas") or 0) >= spec.brokers)
    managed = {topic_name_of(t) for t in await kube.list(TOPIC, namespace)
               if (t.get("spec") or {}).get("cluster") == spec.name}
    status, conds = cluster_status(desired=spec.brokers, ready_brokers=_ready_brokers(ctx.pods), observed=observed,
                                   managed_topics=managed, bootstrap=spec.bootstrap, generation=generation,
                                   sts_generation_current=current_gen and replicas == spec.brokers)
    status.update(extra)
    status["listeners"] = None if spec.security is None else spec.security.listener_status(
        name=spec.name, namespace=spec.namespace, external=list(status.get("externalAddresses") or []))
    status["httpUrl"] = spec.http_url
    if notes:
        conds = [c for c in conds if c["type"] != "Progressing"] + [notes[0]]
    await _record_transition(ctx, next(c for c in conds if c["type"] == "Progressing"))
    rack = rack_condition(spec, observed)
    if rack is not None:
        conds.append(rack)
    return status, conds


async def reconcile(body: KelpResource, kube: KubeClient, admin_for: AdminFactory, *, events: Recorder,
                    clock_ms: WallClockMs = wall_clock_ms,
                    owners: TopicOwners | None = None) -> Result[Mapping[str, object]]:
    """One pass over any Kelp resource, by its kind: (status fields, conditions)."""
    if body["kind"] == "Cluster":
        return await reconcile_cluster(body, kube, admin_for, events=events, clock_ms=clock_ms)
    if body["kind"] == "Topic":
        return await reconcile_topic(body, kube, admin_for, owners=owners, events=events)
    if body["kind"] == "KelpUser":
        return await reconcile_user(body, kube, admin_for, events=events, clock_ms=clock_ms)
    return await reconcile_group(body, kube, admin_for, events=events)
