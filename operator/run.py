"""`kelp operator`: one active replica elected through a Lease, kopf running only while it holds it.

Why: the chart runs two replicas so a node loss does not stop
reconciliation, but two active operators would fight over status and
children. The replicas compete for the Lease `kelp-operator` in the
operator's namespace with the same elector the brokers use for their
controller (`kelp.leases`, over `kelp.kube.leases`); the holder runs kopf
(standalone: kopf's own peering objects are not needed), the others wait.
A holder that cannot renew within the lease duration stops kopf and exits
non-zero, so the kubelet restarts it as a stand-by — never two writers.
Between renewals every write through the operator's client is guarded
(`leadership.Leadership`): none once the last renewal is older than the
lease duration minus one renew interval (leadership in doubt), and actions
that cost availability, and every write to the brokers' admin API, first
renew the Lease on the resourceVersion this replica last wrote (a fence).
kopf's own bookkeeping writes (progress annotations, the Topic finalizer)
are not guarded; a replica that lost the Lease stops kopf at its next
renewal round.

Every replica serves the liveness endpoint (`--liveness`), active or not:
the kubelet must not restart a healthy stand-by. The active replica's
endpoint also fails when kopf has stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import time
import uuid
from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger("kelp.operator")

LEASE_NAME = "kelp-operator"


class _Health:
    def __init__(self) -> None:
        self.active = False
        self.kopf_task: asyncio.Task[None] | None = None

    def ok(self) -> tuple[bool, str]:
        if self.kopf_task is not None and self.kopf_task.done():
            return False, "kopf stopped"
        return True, "active" if self.active else "standby"


async def _serve_health(url: str, health: _Health) -> web.AppRunner:
    from aiohttp import web

    parsed = urlparse(url)

    async def handle(_request: web.Request) -> web.Response:
        ok, what = health.ok()
        return web.json_response({"status": "ok" if ok else "failing", "role": what}, status=200 if ok else 503)

    app = web.Application()
    app.router.add_get(parsed.path or "/healthz", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, parsed.hostname or "0.0.0.0", parsed.port or 8081).start()
    return runner


async def run(*, namespaces: list[str], all_namespaces: bool, liveness: str | None, lease_namespace: str,
              identity: str, lease_duration_s: float) -> int:
    import kopf

    from kelp.kube.api import api_client_from
    from kelp.kube.leases import KubeLeaseBackend
    from kelp.leases import LeaseElector

    from . import handlers  # noqa: F401  (registers the handlers)
    from .kube.leadership import Leadership

    health = _Health()
    runner = await _serve_health(liveness, health) if liveness else None
    api = api_client_from(kubeconfig=os.environ.get("KUBECONFIG") or None)
    elector = LeaseElector(KubeLeaseBackend(api, namespace=lease_namespace,
                                            labels={"app.kubernetes.io/name": "kelp",
                                                    "app.kubernetes.io/component": "operator"}),
                           name=LEASE_NAME, identity=identity, duration_ms=int(lease_duration_s * 1000))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    renew_every = max(lease_duration_s / 3, 0.5)
    leadership = Leadership(elector, duration_s=lease_duration_s, margin_s=renew_every)
    code = 0
    try:
        log.info("operator %s: waiting for the Lease %s/%s", identity, lease_namespace, LEASE_NAME)
        while not stop.is_set():
            try:
                if await leadership.acquire_or_renew():
                    break
            except Exception as exc:  # the API server may be briefly away; keep competing
                log.warning("operator %s: Lease %s not readable: %s", identity, LEASE_NAME, exc)
            try:
                await asyncio.wait_for(stop.wait(), renew_every)
            except asyncio.TimeoutError:
                pass
        if stop.is_set():
            return 0
        log.info("operator %s: holds the Lease %s/%s; reconciling %s", identity, lease_namespace, LEASE_NAME,
                 "all namespaces" if all_namespaces else ", ".join(namespaces))
        health.active = True
        kopf_stop = asyncio.Event()
        health.kopf_task = asyncio.create_task(kopf.operator(
            standalone=True, clusterwide=all_namespaces, namespaces=namespaces, stop_flag=kopf_stop,
            memo=kopf.Memo(namespaces=None if all_namespaces else list(namespaces), leadership=leadership)))
        renewed = time.monotonic()
        while not stop.is_set() and not health.kopf_task.done():
            try:
                await asyncio.wait_for(stop.wait(), renew_every)
            except asyncio.TimeoutError:
                pass
            try:
                if await leadership.acquire_or_renew():
                    renewed = time.monotonic()
                    continue
                log.error("operator %s: the Lease %s was taken (%s); stopping", identity, LEASE_NAME,
                          leadership.lost or "?")
            except Exception as exc:
                if time.monotonic() - renewed < lease_duration_s - renew_every:
                    log.warning("operator %s: Lease renewal failed (%s); retrying", identity, exc)
                    continue
                log.error("operator %s: could not renew the Lease %s within %.0fs (%s); stopping",
                          identity, LEASE_NAME, lease_duration_s, exc)
            code = 1
            break
        kopf_stop.set()
        try:
            await asyncio.wait_for(health.kopf_task, 30)
        except asyncio.TimeoutError:
            health.kopf_task.cancel()
        except Exception:
            log.exception("kopf stopped with an error")
            code = 1
        # kopf installs its own SIGTERM/SIGINT handlers and returns normally when they fire;
        # a kopf failure is an exception (code 1 above), a lost Lease set code 1 in the loop.
        return code
    finally:
        if elector.held:
            try:
                await elector.release()
            except Exception as exc:
                log.warning("operator %s: Lease not released: %s", identity, exc)
        if runner is not None:
            await runner.cleanup()
        api.close()


def lease_identity() -> str:
    """This process's Lease holder identity: the pod's name (or host name) and a suffix new per process.

    Never the pod name alone: the kubelet restarts a killed container in the same pod, and a process
    that found its own identity in the Lease would take it as its renewal and act at once, on nothing
    it observed — a stand-by must be able to take over (client-go's leader election does the same).
    """
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}-{uuid.uuid4().hex[:6]}"


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, os.environ.get("KELP_LOG_LEVEL", "INFO").upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.all_namespaces and not args.namespace:
        raise SystemExit("kelp operator: give --all-namespaces or at least one --namespace NS")
    identity = lease_identity()
    lease_ns = args.lease_namespace or os.environ.get("KELP_OPERATOR_NAMESPACE") or (
        args.namespace[0] if args.namespace else "default")
    return asyncio.run(run(namespaces=list(args.namespace or []), all_namespaces=args.all_namespaces,
                           liveness=args.liveness, lease_namespace=lease_ns, identity=identity,
                           lease_duration_s=args.lease_duration))
