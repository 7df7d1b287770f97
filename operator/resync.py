"""The periodic pass over every Cluster, Topic and ConsumerGroup, and the status patch both paths write.

Why: events alone are not enough — a watch can miss one, a broker's answer
changes without any event (lag grows, a broker dies, someone alters a topic
by hand), and children can drift. Like controller-runtime's resync period,
one loop re-reconciles every resource every `KELP_OPERATOR_RESYNC_SECONDS`
(15 by default) and writes status through the status subresource. It is a
plain task rather than kopf timers because kopf adds a finalizer to every
object with a timer, and finalizers that outlive the operator strand
namespaces. Each object's failure is logged and isolated; the loop itself
only stops when the operator does.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Mapping

import aiohttp

from .brokers import BrokerAdmin, broker_urls
from .kube import KubeClient
from .rack import BINDING_LABEL, orphaned_bindings
from .reconcile import AdminFactory, reconcile_cluster, reconcile_group, reconcile_topic
from .spec import ClusterSpec
from .status import merge_conditions, now_rfc3339

__all__ = ["resync_loop", "resync_once", "collect_rack_bindings", "status_patch", "admin_factory", "RESYNC_S"]

log = logging.getLogger("kelp.operator")

RESYNC_S = float(os.environ.get("KELP_OPERATOR_RESYNC_SECONDS", "15"))
RECONCILERS = (("Cluster", reconcile_cluster), ("Topic", reconcile_topic), ("ConsumerGroup", reconcile_group))


def admin_factory(kube: KubeClient, http: aiohttp.ClientSession) -> AdminFactory:
    async def admin_for(spec: ClusterSpec) -> BrokerAdmin:
        return BrokerAdmin(http, await broker_urls(kube, spec))
    return admin_for


def status_patch(body: Mapping[str, Any], result: tuple[dict[str, Any], list[dict[str, Any]]]) -> dict[str, Any]:
    """The status fields of a reconciliation, with conditions merged into the object's current ones."""
    fields, conds = result
    generation = int(body["metadata"].get("generation") or 0)
    return {**fields, "conditions": merge_conditions((body.get("status") or {}).get("conditions"), conds,
                                                     generation=generation, now=now_rfc3339())}


async def resync_once(kube: KubeClient, http: aiohttp.ClientSession, namespaces: list[str] | None) -> int:
    """One pass; returns how many objects failed to reconcile."""
    admin_for = admin_factory(kube, http)
    failed = 0
    for kind, reconcile in RECONCILERS:
        for body in await kube.list_everywhere(kind, namespaces):
            meta = body["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            try:
                patch = status_patch(body, await reconcile(body, kube, admin_for))
                await kube.patch_status(kind, meta["namespace"], meta["name"], patch)
            except Exception:
                failed += 1
                log.exception("resync of %s %s/%s failed", kind, meta["namespace"], meta["name"])
    try:
        await collect_rack_bindings(kube, namespaces)
    except Exception:
        failed += 1
        log.exception("cleaning up rack ClusterRoleBindings failed")
    return failed


async def collect_rack_bindings(kube: KubeClient, namespaces: list[str] | None) -> list[str]:
    """Delete rack ClusterRoleBindings whose Cluster is gone (they cannot have an owner reference to it)."""
    bindings = await kube.list("ClusterRoleBinding", "", labels={BINDING_LABEL: "true"})
    if not bindings:
        return []
    gone = orphaned_bindings(bindings, await kube.list_everywhere("Cluster", namespaces), namespaces)
    for name in gone:
        log.info("deleting ClusterRoleBinding %s: its Cluster is gone or no longer sets rack.topologyKey", name)
        await kube.delete("ClusterRoleBinding", "", name)
    return gone


async def resync_loop(kube: KubeClient, http: aiohttp.ClientSession, namespaces: list[str] | None) -> None:
    while True:
        await asyncio.sleep(RESYNC_S)
        try:
            await resync_once(kube, http, namespaces)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("resync pass failed; the next one runs in %.0fs", RESYNC_S)
