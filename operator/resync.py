"""The periodic pass over every Cluster, Topic and ConsumerGroup.

Why: events alone are not enough — a watch can miss one, a broker's answer
changes without any event (lag grows, a broker dies, someone alters a topic
by hand), and children can drift. Like controller-runtime's resync period,
one loop re-reconciles every resource every `KELP_OPERATOR_RESYNC_SECONDS`
(15 by default), through the same `Runner` as kopf's handlers (one pass per
object at a time). It is a plain task rather than kopf timers because kopf
adds a finalizer to every object with a timer, and finalizers that outlive
the operator strand namespaces. Each object's failure is logged and
isolated; a lost Lease ends the pass (this replica must not act); the loop
itself only stops when the operator does.

Topic ownership (the oldest Topic resource naming a topic owns it) is
decided from one index per pass for all Topics (`topics.TopicOwners`),
linear in their number.
"""

from __future__ import annotations

import asyncio
import logging
import os

import aiohttp

from .brokers import BrokerAdmin, broker_urls
from .kube import CLUSTER, CLUSTER_ROLE_BINDING, KELP_KINDS, KubeClient
from .leadership import LeadershipLost
from .rack import BINDING_LABEL, orphaned_bindings
from .resources import AdminFactory
from .runner import Runner, status_patch
from .spec import ClusterSpec
from .topics import TopicOwners

__all__ = ["resync_loop", "resync_once", "collect_rack_bindings", "status_patch", "admin_factory", "RESYNC_S"]

log = logging.getLogger("kelp.operator")

RESYNC_S = float(os.environ.get("KELP_OPERATOR_RESYNC_SECONDS", "15"))
KINDS = ("Cluster", "Topic", "ConsumerGroup")


def admin_factory(kube: KubeClient, http: aiohttp.ClientSession) -> AdminFactory:
    async def admin_for(spec: ClusterSpec) -> BrokerAdmin:
        return BrokerAdmin(http, await broker_urls(kube, spec))
    return admin_for


async def resync_once(kube: KubeClient, http: aiohttp.ClientSession | None, namespaces: list[str] | None, *,
                      runner: Runner | None = None) -> int:
    """One pass; returns how many objects failed to reconcile. Without a `runner`, `http` makes one."""
    if runner is None:
        if http is None:
            raise ValueError("resync_once: give a runner, or an HTTP session to reach the brokers with")
        runner = Runner(kube, admin_factory(kube, http))
    failed = 0
    for kind in KINDS:
        mark = runner.mark()
        items = await kube.list_everywhere(KELP_KINDS[kind], namespaces)
        owners = TopicOwners().load(t for t in items if t["kind"] == "Topic") if kind == "Topic" else None
        for body in items:
            meta = body["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            try:
                await runner.reconcile(kind, meta["namespace"], meta["name"], listed=body, listed_after=mark,
                                       owners=owners)
            except (LeadershipLost, asyncio.CancelledError):
                raise
            except Exception:
                failed += 1
                log.exception("resync of %s %s/%s failed", kind, meta["namespace"], meta["name"])
        runner.forget(kind, {(b["metadata"]["namespace"], b["metadata"]["name"]) for b in items})
    try:
        await collect_rack_bindings(kube, namespaces)
    except LeadershipLost:
        raise
    except Exception:
        failed += 1
        log.exception("cleaning up rack ClusterRoleBindings failed")
    return failed


async def collect_rack_bindings(kube: KubeClient, namespaces: list[str] | None) -> list[str]:
    """Delete rack ClusterRoleBindings whose Cluster is gone (they cannot have an owner reference to it)."""
    bindings = await kube.list(CLUSTER_ROLE_BINDING, "", labels={BINDING_LABEL: "true"})
    if not bindings:
        return []
    gone = orphaned_bindings(bindings, await kube.list_everywhere(CLUSTER, namespaces), namespaces)
    for name in gone:
        log.info("deleting ClusterRoleBinding %s: its Cluster is gone or no longer sets rack.topologyKey", name)
        await kube.delete(CLUSTER_ROLE_BINDING, "", name)
    return gone


async def resync_loop(runner: Runner, namespaces: list[str] | None) -> None:
    while True:
        await asyncio.sleep(RESYNC_S)
        try:
            await resync_once(runner.kube, None, namespaces, runner=runner)
        except asyncio.CancelledError:
            raise
        except LeadershipLost as exc:
            log.error("resync pass stopped: %s", exc)
        except Exception:
            log.exception("resync pass failed; the next one runs in %.0fs", RESYNC_S)
