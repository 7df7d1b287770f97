"""What each party's certificate must say, and the Secrets and cert-manager Certificates that hold them.

Why: a broker certificate must name every address a client may use to reach that broker — its per-pod
DNS name on the headless Service, the client Service's and `<cluster>-http`'s names (short, namespaced, `.svc`,
fully qualified), its external address once known, its pod IP with `advertise: podIP` — or clients checking
host names refuse it; the operator's and users' certificates must carry subjects that map to the
principals ACLs and `super.users` name. These are facts of the spec, built here without I/O, and
handed either to the operator's own CAs (`pki.py`, Secrets below) or to cert-manager (`Certificate`s
below, with `spec.tls.issuerRef`).

Secrets (own CAs), all owned by the Cluster:

- `<cluster>-cluster-ca` (`ca.key`) and `<cluster>-cluster-ca-cert` (`ca.crt`, the trust bundle clients
  mount), the same two for `clients`;
- `<cluster>-broker-certs`, mounted by every broker at /etc/kelp/tls: `<cluster>-<n>.pem` (broker n's key,
  certificate and CA certificate, its `ssl.keystore.location`), `cluster-ca.crt`, `clients-ca.crt`, and
  `trusted-ca.crt` (both bundles: the HTTP listener accepts the operator's and users' certificates);
- `<cluster>-operator-tls` (`tls.crt`, `tls.key`, `ca.crt`): the operator's client certificate.

With cert-manager: Certificates `<cluster>-broker` (one for every broker: a StatefulSet's pods share one
pod template, so they mount one Secret; its names cover every pod, a wildcard for pods to come) into
`<cluster>-broker-tls` with cert-manager's CombinedPEM output (`tls-combined.pem`: Kafka's PEM keystore),
and `<cluster>-operator` into `<cluster>-operator-tls`; KelpUsers get `<user>` into `<user>-tls`.

Pure: no Kubernetes client, no network.
"""

from __future__ import annotations

from typing import Mapping

from ..model.objects import Certificate, ObjectMeta, OwnerReference, Secret
from ..security.certificates import CLIENT_ONLY, SERVER_AND_CLIENT, KeyPair
from ..security.listener_security import DNS_DOMAIN, ORGANIZATION, Security
from ..security.pki import Authority, LeafRequest, authority_data, secret_data
from .builders import child_meta
from .spec import ClusterSpec

__all__ = ["broker_dns_names", "broker_request", "OPERATOR_REQUEST", "user_request", "ca_secrets",
           "broker_certs_secret", "operator_secret", "broker_certificate", "operator_certificate", "user_certificate",
           "keystore_pem", "leaf_file"]

OPERATOR_REQUEST = LeafRequest("kelp-operator", ORGANIZATION, CLIENT_ONLY)
CERT_MANAGER_GROUP = "cert-manager.io"


def _service_names(spec: ClusterSpec) -> list[str]:
    ns, c = spec.namespace, spec.name
    names = [c, f"{c}.{ns}", f"{c}.{ns}.svc", f"{c}.{ns}.svc.{DNS_DOMAIN}",
             f"{c}-brokers.{ns}.svc", f"{c}-brokers.{ns}.svc.{DNS_DOMAIN}"]
    if spec.http_service_wanted:  # REST Proxy and Schema Registry clients reach the brokers at `<cluster>-http`
        h = spec.http_service
        names += [h, f"{h}.{ns}", f"{h}.{ns}.svc", f"{h}.{ns}.svc.{DNS_DOMAIN}"]
    return names


def broker_dns_names(spec: ClusterSpec, ordinal: int, *, external_host: str | None = None) -> tuple[str, ...]:
    """Every DNS name clients use for broker `ordinal`: its pod's, the Services', its external host name."""
    pod = spec.pod_dns(ordinal)
    names = [pod, f"{pod}.{DNS_DOMAIN}", *_service_names(spec)]
    if external_host and not _is_ip(external_host):
        names.append(external_host)
    return tuple(names)


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def broker_request(spec: ClusterSpec, ordinal: int, *, pod_ip: str | None = None,
                   external_host: str | None = None) -> LeafRequest:
    """Broker `ordinal`'s certificate: server and client (it calls the other brokers), subject
    `CN=<cluster>-broker,O=kelp.dev` (the brokers' principal, a super user)."""
    ips = [pod_ip] if pod_ip and spec.advertise == "podIP" else []
    if external_host and _is_ip(external_host):
        ips.append(external_host)
    return LeafRequest(f"{spec.name}-broker", ORGANIZATION, SERVER_AND_CLIENT,
                       broker_dns_names(spec, ordinal, external_host=external_host), tuple(dict.fromkeys(ips)))


def user_request(username: str) -> LeafRequest:
    """A KelpUser's client certificate: subject `CN=<user>` only (never `O=kelp.dev`: that is the operator's and
    the brokers'), so its principal is `User:CN=<user>` under Kafka's default mapping."""
    return LeafRequest(username, None, CLIENT_ONLY)


def keystore_pem(leaf: KeyPair, ca_cert: bytes) -> bytes:
    """A PEM keystore as Kafka reads it: the private key, then the certificate chain."""
    return leaf.key_pem + leaf.cert_pem + ca_cert


def leaf_file(spec: ClusterSpec, ordinal: int) -> str:
    """Broker `ordinal`'s keystore file in `<cluster>-broker-certs` (and at /etc/kelp/tls)."""
    return f"{spec.name}-{ordinal}.pem"


def _secret(spec: ClusterSpec, name: str, values: Mapping[str, bytes], *, labels: Mapping[str, str] | None = None,
            annotations: Mapping[str, str] | None = None) -> Secret:
    meta = child_meta(spec, name, annotations=dict(annotations) if annotations else None)
    if labels:
        meta["labels"] = {**meta["labels"], **labels}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": meta, "data": secret_data(values)}


def ca_secrets(spec: ClusterSpec, authority: Authority) -> tuple[Secret, Secret]:
    """The CA's key Secret and its certificate Secret (the trust bundle, current CA first)."""
    gen = {"kelp.dev/ca-generation": str(authority.generation)}
    key_values, cert_values = authority_data(authority)
    key = _secret(spec, spec.ca_secret(authority.kind), key_values, annotations=gen)
    cert = _secret(spec, spec.ca_cert_secret(authority.kind), cert_values, annotations=gen)
    return key, cert


def broker_certs_secret(spec: ClusterSpec, leaves: Mapping[int, KeyPair], cluster_ca: Authority,
                        clients_ca: Authority) -> Secret:
    values = {leaf_file(spec, n): keystore_pem(leaf, cluster_ca.signer.cert_pem) for n, leaf in leaves.items()}
    values.update({"cluster-ca.crt": cluster_ca.bundle, "clients-ca.crt": clients_ca.bundle,
                   "trusted-ca.crt": cluster_ca.bundle + clients_ca.bundle})
    return _secret(spec, spec.broker_tls_secret, values)


def operator_secret(spec: ClusterSpec, leaf: KeyPair, cluster_ca: Authority) -> Secret:
    return _secret(spec, spec.operator_tls_secret, {"tls.crt": leaf.cert_pem + cluster_ca.signer.cert_pem,
                                                    "tls.key": leaf.key_pem, "ca.crt": cluster_ca.bundle})


# -- cert-manager (spec.tls.issuerRef) ------------------------------------------------------------------------

def _hours(days: int) -> str:
    return f"{days * 24}h"


def _certificate(meta: ObjectMeta, security: Security, *, secret: str, common_name: str, organization: str | None,
                 usages: list[str], dns: list[str] | None = None, ips: list[str] | None = None,
                 combined: bool = False, labels: Mapping[str, str] | None = None) -> Certificate:
    issuer = security.issuer
    if issuer is None:
        raise ValueError("a cert-manager Certificate needs spec.tls.issuerRef")
    cert: Certificate = {"apiVersion": f"{CERT_MANAGER_GROUP}/v1", "kind": "Certificate", "metadata": meta, "spec": {
        "secretName": secret,
        "issuerRef": {"name": issuer.name, "kind": issuer.kind, "group": issuer.group},
        "commonName": common_name,
        "duration": _hours(security.validity_days),
        "renewBefore": _hours(security.renewal_days),
        "usages": ["digital signature", *usages],
        "privateKey": {"algorithm": "ECDSA", "size": 256, "encoding": "PKCS8", "rotationPolicy": "Always"},
    }}
    if organization:
        cert["spec"]["subject"] = {"organizations": [organization]}
    if dns:
        cert["spec"]["dnsNames"] = dns
    if ips:
        cert["spec"]["ipAddresses"] = ips
    if combined:
        # Kafka's PEM keystore is one file, the key then the chain: cert-manager's CombinedPEM output.
        cert["spec"]["additionalOutputFormats"] = [{"type": "CombinedPEM"}]
    if labels:
        cert["spec"]["secretTemplate"] = {"labels": dict(labels)}
    return cert


def broker_certificate(spec: ClusterSpec, brokers: int, *, ips: tuple[str, ...] = (),
                       external_hosts: tuple[str, ...] = ()) -> Certificate:
    """One Certificate for every broker: each pod's names (and a wildcard for pods to come), the Services',
    external host names and addresses, pod IPs with `advertise: podIP`."""
    security = spec.security
    if security is None:
        raise ValueError(f"Cluster {spec.name} has no spec.listeners.kafka: no broker certificate")
    dns = [f"*.{spec.headless_service}.{spec.namespace}.svc", f"*.{spec.headless_service}.{spec.namespace}.svc."
           f"{DNS_DOMAIN}"]
    for n in range(brokers):
        dns += [name for name in broker_dns_names(spec, n) if name not in dns]
    dns += [h for h in external_hosts if not _is_ip(h) and h not in dns]
    addresses = list(dict.fromkeys([*ips, *(h for h in external_hosts if _is_ip(h))]))
    return _certificate(child_meta(spec, f"{spec.name}-broker"), security, secret=spec.broker_tls_secret,
                        common_name=f"{spec.name}-broker", organization=ORGANIZATION,
                        usages=["server auth", "client auth"], dns=dns, ips=addresses, combined=True)


def operator_certificate(spec: ClusterSpec) -> Certificate:
    security = spec.security
    if security is None:
        raise ValueError(f"Cluster {spec.name} has no spec.listeners.kafka: no operator certificate")
    return _certificate(child_meta(spec, f"{spec.name}-operator"), security, secret=spec.operator_tls_secret,
                        common_name=OPERATOR_REQUEST.common_name, organization=ORGANIZATION, usages=["client auth"])


def user_certificate(spec: ClusterSpec, *, user: str, owner: OwnerReference,
                     labels: Mapping[str, str]) -> Certificate:
    """A KelpUser's Certificate (owned by the KelpUser), into `<user>-tls`, which the user reconciler copies."""
    security = spec.security
    if security is None:
        raise ValueError(f"Cluster {spec.name} has no spec.listeners.kafka: no user certificate")
    meta: ObjectMeta = {"name": user, "namespace": spec.namespace, "labels": dict(labels),
                        "ownerReferences": [owner]}
    return _certificate(meta, security, secret=f"{user}-tls", common_name=user, organization=None,
                        usages=["client auth"], labels=labels)
