"""A Cluster pass's certificates: the CAs and leaves in their Secrets brought to what `pki.py` decides, or the
cert-manager Certificates applied.

Why: the decisions are pure (`pki.py`, `tls_builders.py`); this is the thin layer that reads the Secrets as
they are, writes them as they must be — only what changed — and says so with Events. A new or renewed CA
is a decision every certificate depends on, so it follows a fence (`KubeClient.fence`): a replica that
lost the Lease never mints a CA another replica does not know. Leaf renewals and an old CA leaving the
bundle are ordinary writes (guarded like every other).

It returns the pod template's trust floor (`builders.TRUST_FLOOR_ANNOTATION`) and a Progressing condition
when something stops the certificates from being right: CA Secrets that do not make a CA (never replaced
by the operator: every certificate they signed would stop being trusted), cert-manager missing or not
done yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..kube.client import SECRET, KubeApiError
from ..manifests.builders import Address
from ..manifests.spec import TRUST_FLOOR_ANNOTATION
from ..manifests.tls_builders import (
    OPERATOR_REQUEST,
    broker_certificate,
    broker_certs_secret,
    broker_request,
    ca_secrets,
    leaf_file,
    operator_certificate,
    operator_secret,
)
from ..model.objects import Secret, StatefulSet
from ..model.objects_kelp import Condition
from ..model.status import condition
from ..plans.restarts import ordinal
from ..security.certificates import KeyPair, read_cert
from ..security.pki import (
    CA_KINDS,
    Authority,
    CaInvalid,
    CaPlan,
    Policy,
    authority_from_data,
    plan_authority,
    plan_leaf,
    secret_bytes,
    secret_values,
    split_pem,
)
from .listeners import advertised
from .resources import ClusterPass, apply_child

__all__ = ["TlsOutcome", "reconcile_tls", "USER_CREDENTIALS_LABEL", "previous_floor", "RENEW_ANNOTATION",
           "RENEW_VALUES"]

# On a KelpUser's Secret: which credentials it holds (`tls`: its certificate counts among the clients CA's leaves).
USER_CREDENTIALS_LABEL = "kelp.dev/user-credentials"
# On the Cluster, set by a user and removed once acted on: `certificates` (or `true`) issues every broker
# certificate and the operator's again now; `cluster-ca` / `clients-ca` starts that CA's rotation now (a new
# CA is trusted at once and signs a grace later, as when its renewal window opens).
RENEW_ANNOTATION = "kelp.dev/renew-certificates"
RENEW_VALUES = ("certificates", "true", "cluster-ca", "clients-ca")


@dataclass(frozen=True)
class TlsOutcome:
    trust_floor: str | None = None
    condition: Condition | None = None


def previous_floor(sts: StatefulSet | None) -> str | None:
    """The trust floor the StatefulSet's pod template has now (kept when this pass cannot decide one)."""
    spec = sts.get("spec") if sts else None
    template = spec.get("template") if spec else None
    annotations = template["metadata"].get("annotations") if template else None
    return annotations.get(TRUST_FLOOR_ANNOTATION) if annotations else None


async def reconcile_tls(ctx: ClusterPass, *, brokers: int, external: Mapping[int, Address] | None,
                        floor: str | None) -> TlsOutcome:
    """Certificates for brokers 0..brokers-1 and the operator; `floor` is kept when the CAs cannot be read."""
    security = ctx.spec.security
    if security is None:
        return TlsOutcome()
    hosts = {n: host for n, (host, _port) in advertised(ctx, external or {}).items()}
    pod_ips = {ordinal(p["metadata"]["name"]): (p.get("status") or {}).get("podIP") for p in ctx.pods}
    renew = ctx.annotations.get(RENEW_ANNOTATION)
    if renew is not None and (security.cert_manager or renew not in RENEW_VALUES):
        why = ("cert-manager issues this Cluster's certificates (spec.tls.issuerRef): renew them there (cmctl renew)"
               if security.cert_manager else f"use one of {', '.join(RENEW_VALUES)}")
        await ctx.emit("RenewalAnnotationInvalid", f"{RENEW_ANNOTATION}={renew} ignored: {why}", warning=True)
        await ctx.annotate(RENEW_ANNOTATION, None)
        renew = None
    if security.cert_manager:
        return await _cert_manager(ctx, brokers, hosts, pod_ips)
    outcome = await _own_cas(ctx, brokers, hosts, pod_ips, floor, renew=renew)
    if renew is not None and outcome.condition is None:
        await ctx.annotate(RENEW_ANNOTATION, None)  # acted on: the Secrets hold what it asked for
    return outcome


async def _data(ctx: ClusterPass, name: str) -> dict[str, bytes] | None:
    secret = await ctx.kube.get(SECRET, ctx.spec.namespace, name)
    return None if secret is None else secret_values(secret)


async def _apply_if_changed(ctx: ClusterPass, secret: Secret, current: Mapping[str, bytes] | None) -> None:
    if current is None or secret_bytes(secret.get("data")) != dict(current):
        await ctx.kube.apply(secret)


async def _own_cas(ctx: ClusterPass, brokers: int, hosts: Mapping[int, str], pod_ips: Mapping[int, str | None],
                   floor: str | None, *, renew: str | None = None) -> TlsOutcome:
    spec = ctx.spec
    assert spec.security is not None
    policy = Policy(spec.security.validity_days, spec.security.renewal_days)
    broker_data = await _data(ctx, spec.broker_tls_secret) or {}
    operator_data = await _data(ctx, spec.operator_tls_secret) or {}
    broker_leaves = {n: split_pem(pem) for n in range(brokers) if (pem := broker_data.get(leaf_file(spec, n)))}
    operator_leaf = split_pem(operator_data.get("tls.key", b"") + operator_data.get("tls.crt", b""))
    user_secrets = await ctx.kube.list(SECRET, spec.namespace, labels={"kelp.dev/cluster": spec.name,
                                                                      USER_CREDENTIALS_LABEL: "tls"})
    user_leaves = [cert for secret in user_secrets if (cert := secret_values(secret).get("user.crt"))]
    leaves = {"cluster": [leaf.cert_pem for leaf in (*broker_leaves.values(), operator_leaf) if leaf is not None],
              "clients": user_leaves}
    plans: dict[str, CaPlan] = {}
    for kind in CA_KINDS:
        key_data, cert_data = await _data(ctx, spec.ca_secret(kind)), await _data(ctx, spec.ca_cert_secret(kind))
        try:
            current = authority_from_data(kind, key_data, cert_data)
        except CaInvalid as exc:
            message = (f"{exc} (Secrets {spec.ca_secret(kind)} and {spec.ca_cert_secret(kind)}); no certificate is "
                       "issued or renewed until then")
            await ctx.emit("CertificateAuthorityInvalid", message, warning=True)
            return TlsOutcome(floor, condition("Progressing", False, "CertificateAuthorityInvalid", message))
        plans[kind] = plan = plan_authority(current, kind=kind, cluster=spec.name, now_ms=ctx.now_ms, policy=policy,
                                            leaves=leaves[kind], renew=renew == f"{kind}-ca")
        if plan.created or plan.renewed or plan.activated:
            await ctx.kube.fence()  # every certificate of the cluster will hang off this CA
        if plan.changed:
            key_secret, cert_secret = ca_secrets(spec, plan.authority)
            await _apply_if_changed(ctx, key_secret, key_data)
            await _apply_if_changed(ctx, cert_secret, cert_data)
        await _ca_events(ctx, plan)
    cluster_ca, clients_ca = plans["cluster"].authority, plans["clients"].authority
    issued: list[str] = []
    leaves_now: dict[int, KeyPair] = {}
    # Asked for by the user: every broker certificate and the operator's is issued again (same CA, new keys).
    forced = f"{RENEW_ANNOTATION}={renew}" if renew in ("certificates", "true") else None
    for n in range(brokers):
        request = broker_request(spec, n, pod_ip=pod_ips.get(n), external_host=hosts.get(n))
        leaves_now[n], why = plan_leaf(None if forced else broker_leaves.get(n), request, cluster_ca,
                                       now_ms=ctx.now_ms, policy=policy)
        if why is not None:
            issued.append(f"broker {n} ({forced or why})")
    await _apply_if_changed(ctx, broker_certs_secret(spec, leaves_now, cluster_ca, clients_ca), broker_data or None)
    leaf, why = plan_leaf(None if forced else operator_leaf, OPERATOR_REQUEST, cluster_ca, now_ms=ctx.now_ms,
                          policy=policy)
    why = forced or why
    if why is not None:
        issued.append(f"operator ({why})")
    await _apply_if_changed(ctx, operator_secret(spec, leaf, cluster_ca), operator_data or None)
    if issued:
        await ctx.emit("CertificatesIssued", f"issued by the cluster CA (generation {cluster_ca.generation}): "
                       f"{', '.join(issued)}; the brokers reload them without a restart")
    return TlsOutcome(_floor(cluster_ca, clients_ca))


def _floor(cluster_ca: Authority, clients_ca: Authority) -> str:
    return f"cluster={cluster_ca.floor},clients={clients_ca.floor}"


async def _ca_events(ctx: ClusterPass, plan: CaPlan) -> None:
    kind, gen = plan.authority.kind, plan.authority.generation
    if plan.created:
        await ctx.emit("CertificateAuthorityCreated", f"the {kind} CA (generation {gen}) was created; its "
                       f"certificate is in Secret {ctx.spec.ca_cert_secret(kind)} (ca.crt)")
    if plan.renewed and plan.authority.pending is not None:
        pending = read_cert(plan.authority.pending.cert_pem).generation
        await ctx.emit("CertificateAuthorityRenewed", f"a new {kind} CA (generation {pending}, a new key) is trusted "
                       f"from now on, beside generation {gen}, which keeps signing for a while: every party learns the "
                       f"new CA (Secret {ctx.spec.ca_cert_secret(kind)}, ca.crt) before any certificate needs it")
    if plan.activated:
        await ctx.emit("CertificateAuthorityActivated", f"the {kind} CA generation {gen} signs from now on; every "
                       f"{kind} certificate is issued again, the old CA stays trusted until they all have been and "
                       "have had time to reach their users")
    if plan.retired:
        await ctx.emit("CertificateAuthorityRetired", f"{kind} CA generation(s) {list(plan.retired)} left the trust "
                       "bundle; the brokers restart one at a time to stop trusting them")


async def _cert_manager(ctx: ClusterPass, brokers: int, hosts: Mapping[int, str],
                        pod_ips: Mapping[int, str | None]) -> TlsOutcome:
    spec = ctx.spec
    ips = tuple(ip for n, ip in sorted(pod_ips.items()) if ip and n < brokers) if spec.advertise == "podIP" else ()
    external_hosts = tuple(dict.fromkeys(host for _n, host in sorted(hosts.items())))
    for certificate in (broker_certificate(spec, brokers, ips=ips, external_hosts=external_hosts),
                        operator_certificate(spec)):
        try:
            _applied, refused = await apply_child(ctx, certificate, hint="check spec.tls.issuerRef")
        except KubeApiError as exc:
            if exc.status != 404:
                raise
            message = ("spec.tls.issuerRef asks cert-manager for the certificates, but the API server has no "
                       "certificates.cert-manager.io/v1: install cert-manager, or remove spec.tls.issuerRef to let the "
                       "operator run its own CAs")
            await ctx.emit("CertManagerMissing", message, warning=True)
            return TlsOutcome(None, condition("Progressing", False, "CertManagerMissing", message))
        if refused is not None:
            return TlsOutcome(None, refused)
    secret = await _data(ctx, spec.broker_tls_secret)
    if secret is None or "tls-combined.pem" not in secret or "ca.crt" not in secret:
        return TlsOutcome(None, condition(
            "Progressing", True, "CertificatesPending",
            f"waiting for cert-manager to issue Secret {spec.broker_tls_secret} with tls-combined.pem and ca.crt "
            f"(Certificate {spec.name}-broker; the Issuer must be ready and cert-manager's CombinedPEM output "
            "enabled); broker pods start once it exists"))
    return TlsOutcome()
