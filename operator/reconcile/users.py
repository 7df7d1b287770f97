"""KelpUser resources: a Secret with the user's credentials, the credentials on the brokers, and its ACLs
made exactly the spec's.

Why: Strimzi's User Operator is what its users praise: declare a user and its ACLs, get a Secret an
application mounts. The KelpUser is the source of truth for its principal: each pass makes the brokers'
ACLs of that principal exactly `spec.authorization.acls` (adding the missing, deleting the extra — ACLs
of other principals are never touched) and keeps the SCRAM credential equal to the Secret's password
(pushed salted, never in clear, only when it changed or the brokers lack it). A `tls` user's certificate
comes from the clients CA (renewed as the cluster's certificates are, `pki.py`) or from cert-manager.

Every write to the brokers follows a fence (`KubeClient.fence`), as the Topic handlers' do: a replica that
lost the Lease changes no credential and no ACL. Deleting a KelpUser removes its credential and ACLs
first: the operator's own finalizer `kelp.dev/user-cleanup` (not kopf's) holds the resource until then,
and lets go when the Cluster is gone or being deleted.

Like every reconciler here it returns `(status fields, conditions)` and never raises for a condition a
user can act on.
"""

from __future__ import annotations

import logging
from typing import Protocol

from kelp.clock import WallClockMs, wall_clock_ms

from ..kube.client import CLUSTER, KELP_USER, SECRET, KubeApiError, KubeClient
from ..kube.events import Recorder
from ..manifests.spec import ClusterSpec
from ..manifests.tls_builders import user_certificate, user_request
from ..model.admin_types import AclBinding, AclDeleteResults
from ..model.objects import OwnerReference
from ..model.objects_kelp import Condition, KelpUserResource, KelpUserStatus
from ..model.status import condition
from ..security.certificates import KeyPair
from ..security.pki import CaInvalid, Policy, authority_from_data, plan_leaf, secret_values
from ..security.user_builders import (
    FINGERPRINT_ANNOTATION,
    SCRAM_ITERATIONS,
    SCRAM_MECHANISM,
    USER_FINALIZER,
    AclSpecError,
    UserIdentity,
    acl_bindings,
    acl_diff,
    bootstrap_for,
    client_properties,
    credential_fingerprint,
    identity_of,
    jaas_config,
    listener_of,
    new_password,
    principal_filter,
    scram_upsert,
    user_secret,
)
from .brokers import AdminError, BrokerAdmin
from .cluster_tls import USER_CREDENTIALS_LABEL
from .resources import AdminFactory, Result, cluster_of, paused

__all__ = ["reconcile_user", "finalize_user", "USER_FINALIZER"]

log = logging.getLogger("kelp.operator")


class _Pending(Exception):
    """The user's credentials cannot be made yet (no CA, cert-manager not done); the message says why."""


def owner_of(body: KelpUserResource) -> OwnerReference:
    meta = body["metadata"]
    return {"apiVersion": body.get("apiVersion") or "kelp.dev/v1alpha1", "kind": "KelpUser", "name": meta["name"],
            "uid": meta.get("uid", ""), "controller": True, "blockOwnerDeletion": True}


def _labels(cluster: ClusterSpec, user: UserIdentity) -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": "kelp-operator", "kelp.dev/cluster": cluster.name,
            "kelp.dev/user": user.name, USER_CREDENTIALS_LABEL: "tls" if user.authentication == "tls" else "scram"}


async def _ensure_finalizer(body: KelpUserResource, kube: KubeClient) -> None:
    meta = body["metadata"]
    finalizers = list(meta.get("finalizers") or [])
    if USER_FINALIZER not in finalizers:
        await kube.merge_patch(KELP_USER, meta["namespace"], meta["name"],
                               {"metadata": {"finalizers": [*finalizers, USER_FINALIZER]}})
        meta["finalizers"] = [*finalizers, USER_FINALIZER]


async def _cluster_ca_bundle(cluster: ClusterSpec, kube: KubeClient) -> bytes:
    """What the user's clients trust the brokers by: the cluster CA bundle (or cert-manager's issuer CA)."""
    if cluster.security is not None and cluster.security.cert_manager:
        secret = await kube.get(SECRET, cluster.namespace, cluster.broker_tls_secret)
        name = cluster.broker_tls_secret
    else:
        secret = await kube.get(SECRET, cluster.namespace, cluster.ca_cert_secret("cluster"))
        name = cluster.ca_cert_secret("cluster")
    bundle = secret_values(secret).get("ca.crt")
    if not bundle:
        raise _Pending(f"the cluster CA certificate (Secret {name}, ca.crt) does not exist yet; it is made by the "
                       f"Cluster {cluster.name}'s reconciliation")
    return bundle


async def _user_certificate(body: KelpUserResource, cluster: ClusterSpec, user: UserIdentity, kube: KubeClient,
                            current: dict[str, bytes], now_ms: int) -> tuple[KeyPair, bytes, str | None]:
    """(key and certificate, the chain's CA certificate, why it was (re)issued) of a tls user."""
    security = cluster.security
    assert security is not None
    ns = cluster.namespace
    if security.cert_manager:
        await kube.apply(user_certificate(cluster, user=user.name, owner=owner_of(body),
                                          labels={"kelp.dev/cluster": cluster.name, "kelp.dev/user": user.name}))
        issued = secret_values(await kube.get(SECRET, ns, f"{user.name}-tls"))
        if not (issued.get("tls.crt") and issued.get("tls.key")):
            raise _Pending(f"waiting for cert-manager to issue Secret {user.name}-tls (Certificate {user.name})")
        pair = KeyPair(issued["tls.key"], issued["tls.crt"])
        changed = None if current.get("user.crt") == issued["tls.crt"] else "issued by cert-manager"
        return pair, issued.get("ca.crt", b""), changed
    key_secret = await kube.get(SECRET, ns, cluster.ca_secret("clients"))
    cert_secret = await kube.get(SECRET, ns, cluster.ca_cert_secret("clients"))
    key_data = secret_values(key_secret) if key_secret is not None else None
    cert_data = secret_values(cert_secret) if cert_secret is not None else None
    try:
        authority = authority_from_data("clients", key_data, cert_data)
    except CaInvalid as exc:
        raise _Pending(f"{exc} (Cluster {cluster.name})") from None
    if authority is None:
        raise _Pending(f"the clients CA of Cluster {cluster.name} does not exist yet; it is made by the Cluster's "
                       "reconciliation")
    existing = KeyPair(current["user.key"], current["user.crt"]) if current.get("user.key") and \
        current.get("user.crt") else None
    pair, why = plan_leaf(existing, user_request(user.name), authority, now_ms=now_ms,
                          policy=Policy(security.validity_days, security.renewal_days))
    return pair, authority.signer.cert_pem, why


async def reconcile_user(body: KelpUserResource, kube: KubeClient, admin_for: AdminFactory, *,
                         events: Recorder | None = None, clock_ms: WallClockMs = wall_clock_ms
                         ) -> Result[KelpUserStatus]:
    meta = body["metadata"]
    spec = body.get("spec") or {}
    old: KelpUserStatus = body.get("status") or {}
    # The identity as last applied to the brokers: it changes only once the brokers have the new one, so a pass
    # that fails half-way still knows whose ACLs to remove after an authentication change.
    status: KelpUserStatus = {"observedGeneration": int(meta.get("generation") or 0),
                              "username": old.get("username"), "principal": old.get("principal"),
                              "secret": old.get("secret")}

    async def emit(reason: str, message: str, *, warning: bool = False) -> None:
        if events is not None:
            await events.emit(body, reason, message, warning=warning)

    cluster = await cluster_of(body, kube)
    if not isinstance(cluster, ClusterSpec):
        return status, [cluster]
    security = cluster.security
    if security is None:
        return status, [condition("Ready", False, "ClusterNotSecured",
                                  f"Cluster '{cluster.name}' has no spec.listeners.kafka: its brokers authenticate "
                                  "nobody, so there is no user to create; secure the Cluster first")]
    try:
        user = identity_of(body, mapping_rules=cluster.config.get("ssl.principal.mapping.rules"))
        authorization = spec.get("authorization")
        rules = (authorization.get("acls") if authorization else None) or []
        desired = acl_bindings(list(rules), user.principal)
    except AclSpecError as exc:
        await emit("InvalidAcl", str(exc), warning=True)
        return status, [condition("Ready", False, "InvalidAcl", str(exc))]
    if paused(body):
        return status, [condition("Ready", None, "ReconciliationPaused",
                                  f"KelpUser '{user.name}' is not reconciled while annotated "
                                  "kelp.dev/pause-reconciliation=true")]
    await _ensure_finalizer(body, kube)
    ns = meta["namespace"]
    secret = await kube.get(SECRET, ns, user.name)
    current = secret_values(secret)
    secret_meta = secret["metadata"] if secret is not None else None
    annotations = dict((secret_meta.get("annotations") if secret_meta else None) or {})
    listener = listener_of(security, user)
    cluster_body = await kube.get(CLUSTER, ns, cluster.name)
    cluster_status = cluster_body.get("status") if cluster_body else None
    external = list((cluster_status.get("externalAddresses") if cluster_status else None) or [])
    bootstrap = bootstrap_for(listener, cluster=cluster.name, namespace=ns, external=external)
    values: dict[str, bytes] = {}
    password: str | None = None
    try:
        values["ca.crt"] = await _cluster_ca_bundle(cluster, kube)
        if user.authentication == "tls":
            pair, chain_ca, why = await _user_certificate(body, cluster, user, kube, current, clock_ms())
            values.update({"user.crt": pair.cert_pem, "user.key": pair.key_pem,
                           "user.pem": pair.key_pem + pair.cert_pem + chain_ca})
            if why is not None and why != "new":
                await emit("UserCertificateIssued", f"the certificate of {user.principal} was issued again ({why})")
        else:
            password = current.get("password", b"").decode() or new_password()
            values.update({"password": password.encode(),
                           "sasl.jaas.config": jaas_config(user.name, password).encode()})
    except _Pending as exc:
        return status, [condition("Ready", False, "CredentialsPending", str(exc))]
    values["client.properties"] = client_properties(user=user, cluster=cluster.name, listener=listener,
                                                    bootstrap=bootstrap, password=password).encode()
    fingerprint = credential_fingerprint(password) if password is not None else None
    keep = {FINGERPRINT_ANNOTATION: annotations[FINGERPRINT_ANNOTATION]} if fingerprint is not None and \
        annotations.get(FINGERPRINT_ANNOTATION) else None
    labels = _labels(cluster, user)
    if values != current or (secret_meta.get("labels") if secret_meta else None) != labels:
        await kube.apply(user_secret(body, user=user, values=values, labels=labels, annotations=keep))
    admin = await admin_for(cluster)
    try:
        notes = await _on_brokers(admin, kube, user, desired=desired, authorization=security.super_users is not None,
                                  old_principal=old.get("principal"), password=password,
                                  pushed=annotations.get(FINGERPRINT_ANNOTATION), emit=emit)
    except AdminError as exc:
        reason = "BrokersUnreachable" if exc.status == 0 else "BrokerRefused"
        return status, [condition("Ready", False, reason, exc.message)]
    status.update({"username": user.username, "principal": user.principal, "secret": user.name})
    if fingerprint is not None and notes.pushed:
        await kube.apply(user_secret(body, user=user, values=values, labels=labels,
                                     annotations={FINGERPRINT_ANNOTATION: fingerprint}))
    if notes.problem is not None:
        return status, [notes.problem]
    if listener is None:
        return status, [condition("Ready", False, "NoListenerForAuthentication",
                                  f"the credentials of {user.principal} are in Secret {user.name}, but no listener "
                                  f"of Cluster '{cluster.name}' authenticates with {user.authentication}; add one to "
                                  "spec.listeners.kafka")]
    return status, [condition("Ready", True, "UserReady",
                              f"{user.principal}: credentials in Secret {user.name} (client.properties for listener "
                              f"{listener.name}), {len(desired)} ACL(s)")]


class Emit(Protocol):
    async def __call__(self, reason: str, message: str, *, warning: bool = False) -> None: ...


class _BrokerNotes:
    def __init__(self) -> None:
        self.pushed = False
        self.problem: Condition | None = None


async def _on_brokers(admin: BrokerAdmin, kube: KubeClient, user: UserIdentity, *, desired: list[AclBinding],
                      authorization: bool, old_principal: str | None, password: str | None, pushed: str | None,
                      emit: Emit) -> _BrokerNotes:
    """The credential and the ACLs on the brokers; every write after a fence."""
    notes = _BrokerNotes()
    users = {u["name"]: {c["mechanism"]: c["iterations"] for c in u.get("credentials", [])}
             for u in await admin.list_users()}
    has = users.get(user.name, {})
    if password is not None:
        fingerprint = credential_fingerprint(password)
        if has.get(SCRAM_MECHANISM) != SCRAM_ITERATIONS or pushed != fingerprint:
            await kube.fence()  # a credential decides who may connect
            await admin.put_scram_credential(user.name, scram_upsert(password))
            notes.pushed = True
            await emit("ScramCredentialSet", f"{SCRAM_MECHANISM} credential of {user.principal} stored on the brokers "
                       f"({SCRAM_ITERATIONS} iterations; salted by the operator, the password never leaves the Secret)")
    elif SCRAM_MECHANISM in has:
        # A tls user has no password: a SCRAM credential left from its scram-sha-512 days would still let it in.
        await kube.fence()
        await _delete_credential(admin, user.name)
        await emit("ScramCredentialDeleted", f"{SCRAM_MECHANISM} credential of {user.name} removed: the user now "
                   "authenticates with its certificate")
    if not authorization:
        if desired:
            notes.problem = condition("Ready", False, "AuthorizationDisabled",
                                      f"{len(desired)} ACL(s) asked for {user.principal}, but the Cluster has no "
                                      "spec.authorization: its brokers allow everyone everything and keep no ACLs")
        return notes
    if old_principal and old_principal != user.principal:
        await kube.fence()
        await _check(await admin.delete_acls([principal_filter(old_principal)]), "deleting the ACLs of "
                     f"{old_principal}")
        await emit("AclsDeleted", f"the ACLs of {old_principal} were deleted: the user is {user.principal} now")
    current = await admin.list_acls({"principal": user.principal})
    create, delete = acl_diff(desired, [b for b in current if b["principal"] == user.principal])
    if create:
        await kube.fence()  # ACLs decide what the principal may do
        results = await admin.create_acls(create)
        refused = [f"{_show(b)}: {r['error']}" for b, r in zip(create, results["results"], strict=False) if r["error"]]
        if refused:
            message = f"the brokers refused ACL(s) of {user.principal}: {'; '.join(refused)}"
            await emit("AclsRefused", message, warning=True)
            notes.problem = condition("Ready", False, "BrokerRefused", message)
        else:
            await emit("AclsCreated", f"{user.principal}: {', '.join(_show(b) for b in create)}")
    if delete:
        await kube.fence()
        await _check(await admin.delete_acls([{**b} for b in delete]), f"deleting ACLs of {user.principal}")
        await emit("AclsDeleted", f"{user.principal}: {', '.join(_show(b) for b in delete)} (not in the KelpUser)")
    return notes


def _show(binding: AclBinding) -> str:
    return (f"{binding['permission']} {binding['operation']} on {binding['resourceType']} "
            f"{binding['resourceName']!r} ({binding['patternType']}, host {binding['host']})")


async def _check(results: AclDeleteResults, what: str) -> None:
    errors = [r["error"] for r in results["results"] if r.get("error")]
    if errors:
        raise AdminError(400, f"{what}: {'; '.join(str(e) for e in errors)}")


async def _delete_credential(admin: BrokerAdmin, name: str) -> None:
    try:
        await admin.delete_scram_credential(name, SCRAM_MECHANISM)
    except AdminError as exc:
        if exc.status != 404:
            raise


async def finalize_user(body: KelpUserResource, kube: KubeClient, admin_for: AdminFactory, *,
                        events: Recorder | None = None) -> str:
    """Remove a deleted KelpUser's credential and ACLs, then its finalizer; returns what happened.

    Lets go without touching the brokers when the Cluster is gone, being deleted or not secured (nothing to
    remove, or no one to ask); raises AdminError while the brokers cannot be reached (the finalizer stays, the
    next pass tries again).
    """
    meta = body["metadata"]
    finalizers = list(meta.get("finalizers") or [])
    if USER_FINALIZER not in finalizers:
        return "no finalizer of the operator's"
    cluster = await cluster_of(body, kube)
    done: str
    if not isinstance(cluster, ClusterSpec) or cluster.security is None:
        done = f"Cluster '{(body.get('spec') or {}).get('cluster')}' is gone or not secured; nothing to remove"
    else:
        try:
            user: UserIdentity | None = identity_of(body, mapping_rules=cluster.config.get(
                "ssl.principal.mapping.rules"))
        except AclSpecError:
            user = None  # rules that map no CN: the principal status recorded is what was applied
        admin = await admin_for(cluster)
        await kube.fence()  # removing credentials and ACLs: only the replica that holds the Lease
        await _delete_credential(admin, meta["name"])
        principals = list(dict.fromkeys(p for p in (user.principal if user else None,
                                                     (body.get("status") or {}).get("principal")) if p))
        if cluster.security.super_users is not None:
            await _check(await admin.delete_acls([principal_filter(p) for p in principals]),
                         f"deleting the ACLs of {', '.join(principals)}")
        done = f"the credential and ACLs of {', '.join(principals)} were removed from Cluster '{cluster.name}'"
        if events is not None:
            await events.emit(body, "UserDeleted", done)
    try:
        await kube.merge_patch(KELP_USER, meta["namespace"], meta["name"], {"metadata": {
            "finalizers": [f for f in finalizers if f != USER_FINALIZER],
            "resourceVersion": meta.get("resourceVersion")}})
    except KubeApiError as exc:
        if exc.status != 409:
            raise
        log.info("KelpUser %s/%s changed while its finalizer was removed; the next pass removes it", meta["namespace"],
                 meta["name"])
    return done
