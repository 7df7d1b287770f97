"""The external listener (`spec.listeners.external`): one Service per broker, and what each broker advertises.

Why: a Kafka client outside the cluster bootstraps from any broker, then
connects to each partition leader at the address *that broker* advertises,
so every broker needs its own reachable address (Strimzi does the same):

- `NodePort`: Service `<cluster>-external-<n>` selects pod `<cluster>-<n>`
  only, with `externalTrafficPolicy: Local`; the broker advertises the
  address of the node it runs on (`status.hostIP`, the node's InternalIP)
  and the Service's node port (pinned by `nodePorts`, else allocated by the
  API server and read back here);
- `LoadBalancer`: the same Service of type LoadBalancer; the broker
  advertises the load balancer's address once the cloud has assigned one.
  Brokers are not created (nor added by a scale-up) before their address is
  known, so they start advertising the right one.

Each broker reads its own config file (`<pod>.yaml` in the broker
ConfigMap: the shared config plus `advertised.*`). A broker whose
registered address differs from the one it should advertise (its load
balancer changed address, or its file reached it late) is marked
`kelp.dev/manual-rolling-update` and restarts under the usual rule.

Kelp brokers have one Kafka listener, so in-cluster clients and replica
fetching use the advertised external address too (Kafka would give them a
second, internal listener); inter-broker HTTP stays on pod IPs.
"""

from __future__ import annotations

from typing import Mapping

from ..kube.client import POD, SERVICE
from ..manifests.builders import BROKER_LABEL, EXTERNAL_LABEL, Address, external_address, external_service, labels_for
from ..model.objects_kelp import Condition
from ..model.status import condition
from ..plans.restarts import MANUAL_ROLL, ordinal, pod_ready
from .resources import ClusterPass, apply_child

__all__ = ["apply_external", "remove_external", "mark_moved_addresses", "advertised"]


REFUSED_HINT = ("fix spec.listeners.external (a pinned nodePort must be free and within the API server's "
                "service-node-port-range); the broker keeps the Service it had, a broker without one waits")


async def apply_external(ctx: ClusterPass, brokers: int, current: int
                         ) -> tuple[dict[int, Address], int, Condition | None]:
    """(addresses by ordinal, brokers that may run, Progressing condition or None) after applying the Services.

    A Service the API server refuses (a node port already allocated, out of range) stays as it was: its
    broker keeps advertising the address it had; a broker that has no Service yet does not start (nor do
    the ones above it), since it would advertise an address nobody can reach — the other brokers replicate
    from it through that address too.
    """
    addresses: dict[int, Address] = {}
    refusals: list[Condition] = []
    missing: set[int] = set()
    for n in range(max(brokers, current)):
        manifest = external_service(ctx.spec, n)
        applied, refused = await apply_child(ctx, manifest, hint=REFUSED_HINT)
        if refused is not None:
            refusals.append(refused)
            applied = await ctx.kube.get(SERVICE, ctx.spec.namespace, manifest["metadata"]["name"])
            if applied is None:
                missing.add(n)
        addresses[n] = external_address(ctx.spec, applied)
    lb = ctx.spec.external_type == "LoadBalancer"
    known = 0
    while known < brokers and known not in missing and (addresses[known]["host"] or not lb):
        known += 1
    allowed = brokers if known >= brokers else max(known, current)
    if refusals:
        message = "; ".join(r["message"] for r in refusals)
        return addresses, allowed, condition("Progressing", False, "ApplyRefused", message)
    if known >= brokers:
        return addresses, brokers, None
    waiting = [f"{ctx.spec.name}-external-{n}" for n in range(allowed, brokers) if not addresses[n]["host"]]
    return addresses, allowed, condition(
        "Progressing", True, "ExternalAddressWaiting",
        f"broker pod(s) {allowed}..{brokers - 1} start once their load balancer has an address: "
        f"{', '.join(waiting)} (status.loadBalancer.ingress is empty)")


async def remove_external(ctx: ClusterPass, keep: int) -> None:
    """Delete external Services of ordinals >= keep (all of them when the listener is off)."""
    selector = {**labels_for(ctx.spec), EXTERNAL_LABEL: "external"}
    for svc in await ctx.kube.list(SERVICE, ctx.spec.namespace, labels=selector):
        n = int((svc["metadata"].get("labels") or {}).get(BROKER_LABEL, "-1"))
        if not ctx.spec.external_type or n >= keep:
            await ctx.kube.fence()  # external clients of that broker lose their address
            await ctx.kube.delete(SERVICE, ctx.spec.namespace, svc["metadata"]["name"])
            await ctx.emit("ExternalServiceRemoved", f"{svc['metadata']['name']} deleted (broker {n} "
                           + ("is gone)" if ctx.spec.external_type else "no longer has an external listener)"))


def advertised(ctx: ClusterPass, addresses: Mapping[int, Address]) -> dict[int, tuple[str, int]]:
    """The (host, port) each broker should advertise, where known (NodePort: its pod's node)."""
    out = {}
    host_ips = {ordinal(p["metadata"]["name"]): (p.get("status") or {}).get("hostIP") for p in ctx.pods}
    for n, address in addresses.items():
        host = address.get("host") if ctx.spec.external_type == "LoadBalancer" else host_ips.get(n)
        port = address.get("port")
        if host and port:
            out[n] = (str(host), int(port))
    return out


async def mark_moved_addresses(ctx: ClusterPass, wanted: Mapping[int, tuple[str, int]]) -> None:
    """Mark for restart each Ready broker whose registered Kafka address is not the one it should advertise."""
    registered = {int(b["id"]): (str(b.get("host")), int(b.get("port") or 0))
                  for b in (ctx.observed.cluster or {}).get("brokers", [])}
    for pod in ctx.pods:
        meta = pod["metadata"]
        n = ordinal(meta["name"])
        if n not in wanted or n not in registered or registered[n] == wanted[n]:
            continue
        if not pod_ready(pod) or meta.get("deletionTimestamp") or (meta.get("annotations") or {}).get(MANUAL_ROLL):
            continue
        await ctx.kube.merge_patch(POD, ctx.spec.namespace, meta["name"],
                                   {"metadata": {"annotations": {MANUAL_ROLL: "true"}}})
        meta.setdefault("annotations", {})[MANUAL_ROLL] = "true"
        await ctx.emit("AdvertisedAddressChanged", f"broker {n} advertises {registered[n][0]}:{registered[n][1]} "
                       f"but its external address is {wanted[n][0]}:{wanted[n][1]}; {meta['name']} restarts")
