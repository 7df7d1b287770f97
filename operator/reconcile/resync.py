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
import hashlib
import logging
import os
import ssl

import aiohttp

from ..kube.client import CLUSTER, CLUSTER_ROLE_BINDING, KELP_KINDS, SECRET, KubeApiError, KubeClient
from ..kube.leadership import LeadershipLost
from ..manifests.rack import BINDING_LABEL, orphaned_bindings
from ..manifests.spec import ClusterSpec
from ..security.pki import secret_values
from .brokers import BrokerAdmin, address_mode, broker_urls, operator_tls_context
from .resources import AdminFactory
from .runner import Runner, status_patch
from .topics import TopicOwners

__all__ = ["resync_loop", "resync_once", "collect_rack_bindings", "status_patch", "admin_factory", "RESYNC_S"]

log = logging.getLogger("kelp.operator")

RESYNC_S = float(os.environ.get("KELP_OPERATOR_RESYNC_SECONDS", "15"))
KINDS = ("Cluster", "Topic", "ConsumerGroup", "KelpUser")


def admin_factory(kube: KubeClient, http: aiohttp.ClientSession) -> AdminFactory:
    """Broker admin clients; for a secured Cluster, with the operator's client certificate from its Secret (one
    TLS context per certificate, made again when the Secret's content changes: a renewal)."""
    contexts: dict[tuple[str, str], tuple[str, ssl.SSLContext]] = {}

    async def admin_for(spec: ClusterSpec) -> BrokerAdmin:
        urls = await broker_urls(kube, spec)
        if not spec.secured:
            return BrokerAdmin(http, urls)
        secret = await kube.get(SECRET, spec.namespace, spec.operator_tls_secret)
        data = secret_values(secret)
        digest = hashlib.sha256(b"\0".join(data.get(k, b"") for k in ("tls.crt", "tls.key", "ca.crt"))).hexdigest()
        key = (spec.namespace, spec.name)
        cached = contexts.get(key)
        if cached is None or cached[0] != digest:
            context = operator_tls_context(data, check_hostname=address_mode() == "service")
            if context is None:
                return BrokerAdmin(http, urls, unavailable=f"the operator's client certificate (Secret "
                                   f"{spec.operator_tls_secret}) is not issued yet")
            contexts[key] = cached = (digest, context)
        return BrokerAdmin(http, urls, tls=cached[1])
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
        try:
            items = await kube.list_everywhere(KELP_KINDS[kind], namespaces)
        except KubeApiError as exc:
            if exc.status != 404:
                raise
            # A CRD the API server does not have (helm never upgrades CRDs: apply crds/ after an upgrade).
            log.warning("resync: %s is not served by the API server (%s); apply its CRD from crds/", kind, exc)
            failed += 1
            continue
        owners = TopicOwners().load(t for t in items if t["kind"] == "Topic") if kind == "Topic" else None
        for body in items:
            meta = body["metadata"]
            try:
                if meta.get("deletionTimestamp"):
                    # A KelpUser's own finalizer: its credential and ACLs go first (kopf's on.event may have
                    # missed the deletion, or the brokers were unreachable then).
                    await runner.finalize(kind, meta["namespace"], meta["name"])
                    continue
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
    try:
        bindings = await kube.list(CLUSTER_ROLE_BINDING, "", labels={BINDING_LABEL: "true"})
    except KubeApiError as exc:
        if exc.status != 403:
            raise
        # The chart grants ClusterRoleBinding rights only with rbac.rackAwareness: then there are none to collect.
        log.debug("not listing rack ClusterRoleBindings: %s", exc)
        return []
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
