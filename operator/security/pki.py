"""The operator's Certificate Authorities and the certificates they sign, as state that moves with the clock.

Why: a secured Cluster without `spec.tls.issuerRef` trusts two CAs the operator runs (Strimzi's model):
the *cluster CA* signs the brokers' certificates (every name clients use) and the operator's client
certificate; the *clients CA* signs KelpUsers' certificates. Certificates expire, so each pass decides,
from what the Secrets hold and the time, what they must hold next. Every decision is a pure function
here, so the whole rotation is tested as state transitions with an injected clock.

The rules (docs/operator.md, "Certificates and their rotation"); `grace` is min(24 hours, renewalDays/3):

1. No CA yet: generation 0 is made (a new key), valid `certificateValidityDays`.
2. A leaf (broker, operator, user certificate) is issued when missing, and issued again when it is not
   signed by the current signer, its subject or names changed (a scale-up, a load balancer's address, a
   new pod IP with `advertise: podIP`), or it is within `renewalDays` of its end and a new one would end
   later (a leaf never outlives its CA, so one capped by its CA's end waits for the next CA). Brokers
   re-read their certificate files without a restart, so a leaf renewal rolls no pod.
3. Within `renewalDays` of the signer's end, a new CA (generation n+1, a NEW key) is made and added to the
   trust bundle — *trusted, not yet signing* — so every party learns it before any certificate needs it.
4. A grace later the new CA becomes the signer (the old one stays trusted) and every leaf is issued again
   by it (rule 2: not signed by the current signer).
5. An old CA leaves the trust bundle once every leaf of its family is signed by the current signer and the
   newest of them (and the signer itself, as signer) is at least a grace old — time for the kubelet to
   refresh mounted Secrets, for brokers to reload them, and for users' applications to pick up their new
   certificate — or as soon as it has expired. Brokers only ever add CAs to a live truststore, so the
   pods restart (one at a time, under the usual rule) when an old CA leaves: the pod template carries
   the lowest generation still trusted (`floor`).

Pure: time and the Secrets' contents come in as arguments; nothing here talks to Kubernetes.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..model.objects import Secret
from .certificates import (
    BACKDATE_MS,
    DAY_MS,
    CertInfo,
    KeyPair,
    issued_by,
    key_matches,
    make_ca,
    make_leaf,
    pem_blocks,
    read_cert,
    read_certs,
)
from .listener_security import ORGANIZATION

__all__ = ["Authority", "Policy", "CaPlan", "LeafRequest", "plan_authority", "leaf_reason", "plan_leaf",
           "authority_from_data", "authority_data", "TRUST_GRACE_MS", "CA_KINDS", "split_pem", "secret_bytes",
           "secret_data", "secret_values", "issued_ms", "CaInvalid"]

TRUST_GRACE_MS = 24 * 3_600_000
CA_KINDS = ("cluster", "clients")
CA_KEY = "ca.key"
NEXT_KEY = "next-ca.key"  # the key of a new CA that is trusted but not signing yet (rule 3)
CA_CERT = "ca.crt"


class CaInvalid(ValueError):
    """A CA's Secrets that do not make a CA (one missing, a key matching no certificate): the operator will not
    replace them by itself, since every certificate they signed would stop being trusted."""


def secret_bytes(data: Mapping[str, str] | None) -> dict[str, bytes]:
    """A Secret's `data` (base64) as bytes."""
    return {k: base64.b64decode(v) for k, v in (data or {}).items()}


def secret_values(secret: Secret | None) -> dict[str, bytes]:
    """A Secret's values as bytes ({} when there is no Secret)."""
    return secret_bytes(secret.get("data") if secret is not None else None)


def secret_data(values: Mapping[str, bytes]) -> dict[str, str]:
    """Bytes as a Secret's `data` (base64)."""
    return {k: base64.b64encode(v).decode("ascii") for k, v in sorted(values.items())}


def issued_ms(cert: CertInfo) -> int:
    """When the operator issued a certificate (its notBefore is backdated by BACKDATE_MS)."""
    return cert.not_before_ms + BACKDATE_MS


@dataclass(frozen=True)
class Policy:
    """`spec.tls`: how long certificates last and how early they are renewed."""

    validity_days: int = 365
    renewal_days: int = 30

    @property
    def grace_ms(self) -> int:
        """How long a new CA is trusted before it signs, and a retired one after the last leaf left it."""
        return min(TRUST_GRACE_MS, self.renewal_days * DAY_MS // 3)

    def renew_at(self, cert: CertInfo) -> int:
        return cert.not_after_ms - self.renewal_days * DAY_MS


@dataclass(frozen=True)
class Authority:
    """One CA: its signing key and certificate, every CA certificate still trusted (the signer first), and during a
    rotation's first phase the next CA, trusted but not signing yet (its certificate is among `trusted`)."""

    kind: str
    signer: KeyPair
    trusted: tuple[bytes, ...]
    pending: KeyPair | None = None

    @property
    def cert(self) -> CertInfo:
        return read_cert(self.signer.cert_pem)

    @property
    def generation(self) -> int:
        return self.cert.generation or 0

    @property
    def bundle(self) -> bytes:
        """The trust bundle (`ca.crt`): the current CA first, then the older ones still trusted."""
        return b"".join(self.trusted)

    @property
    def floor(self) -> int:
        """The lowest generation still trusted: the pods restart when it rises (an old CA left)."""
        return min((c.generation or 0) for c in read_certs(self.bundle))


def authority_from_data(kind: str, key_data: Mapping[str, bytes] | None,
                        cert_data: Mapping[str, bytes] | None) -> Authority | None:
    """The CA two Secrets hold (`<cluster>-<kind>-ca` with `ca.key`, `<cluster>-<kind>-ca-cert` with `ca.crt`);
    None when neither exists; CaInvalid when they do not make one."""
    if key_data is None and cert_data is None:
        return None
    names = f"{kind} CA Secrets"
    if key_data is None or cert_data is None or CA_KEY not in key_data or CA_CERT not in cert_data:
        raise CaInvalid(f"the {names} are incomplete (one is missing, or lacks {CA_KEY}/{CA_CERT}); restore them, or "
                        "delete both to have a new CA made (every certificate of the old one stops being trusted)")
    blocks = pem_blocks(cert_data[CA_CERT])
    signer = next((b for b in blocks if key_matches(key_data[CA_KEY], b)), None)
    if signer is None:
        raise CaInvalid(f"the {names}: {CA_KEY} matches no certificate in {CA_CERT}; restore them, or delete both to "
                        "have a new CA made")
    pending = None
    if NEXT_KEY in key_data:
        next_cert = next((b for b in blocks if key_matches(key_data[NEXT_KEY], b)), None)
        if next_cert is None:
            raise CaInvalid(f"the {names}: {NEXT_KEY} matches no certificate in {CA_CERT}; restore them")
        pending = KeyPair(key_data[NEXT_KEY], next_cert)
    trusted = (signer, *(b for b in blocks if b != signer))
    return Authority(kind, KeyPair(key_data[CA_KEY], signer), trusted, pending)


def authority_data(authority: Authority) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """(the key Secret's data, the certificate Secret's data) of a CA."""
    keys = {CA_KEY: authority.signer.key_pem}
    if authority.pending is not None:
        keys[NEXT_KEY] = authority.pending.key_pem
    return keys, {CA_CERT: authority.bundle}


@dataclass(frozen=True)
class CaPlan:
    """What a pass does with one CA: the CA as it must be, and what changed (for Events). `renewed`: a new CA is
    trusted (rule 3); `activated`: it became the signer (rule 4); `retired`: generations that left (rule 5)."""

    authority: Authority
    created: bool = False
    renewed: bool = False
    activated: bool = False
    retired: tuple[int, ...] = ()

    @property
    def changed(self) -> bool:
        return self.created or self.renewed or self.activated or bool(self.retired)


def _new_ca(kind: str, cluster: str, generation: int, now_ms: int, policy: Policy) -> KeyPair:
    return make_ca(common_name=f"{cluster}-{kind}-ca v{generation}", organization=ORGANIZATION, now_ms=now_ms,
                   validity_days=policy.validity_days)


def plan_authority(current: Authority | None, *, kind: str, cluster: str, now_ms: int, policy: Policy,
                   leaves: Sequence[bytes], renew: bool = False) -> CaPlan:
    """The CA after this pass (rules 1, 3, 4 and 5 above). `leaves`: every certificate of this CA's family as the
    Secrets hold it now, before this pass issues any. `renew`: a user asked for a new CA now (rule 3 at once,
    unless a new CA is already pending)."""
    if current is None:
        first = _new_ca(kind, cluster, 0, now_ms, policy)
        return CaPlan(Authority(kind, first, (first.cert_pem,)), created=True)
    authority, renewed, activated = current, False, False
    if authority.pending is None and (renew or now_ms >= policy.renew_at(authority.cert)):
        pending = _new_ca(kind, cluster, _newest_generation(authority) + 1, now_ms, policy)
        authority = Authority(kind, authority.signer, (*authority.trusted, pending.cert_pem), pending)
        renewed = True
    elif authority.pending is not None and \
            now_ms >= issued_ms(read_cert(authority.pending.cert_pem)) + policy.grace_ms:
        signer = authority.pending
        authority = Authority(kind, signer, (signer.cert_pem, *(b for b in authority.trusted if b != signer.cert_pem)))
        activated = True
    retired = []
    keep = [authority.signer.cert_pem]
    settled = authority.pending is None and not activated and _settled(authority, leaves, now_ms, policy)
    for pem in authority.trusted[1:]:
        old = read_cert(pem)
        is_pending = authority.pending is not None and pem == authority.pending.cert_pem
        if not is_pending and (old.not_after_ms <= now_ms or settled):
            retired.append(old.generation or 0)
        else:
            keep.append(pem)
    if retired:
        authority = Authority(kind, authority.signer, tuple(keep), authority.pending)
    return CaPlan(authority, renewed=renewed, activated=activated, retired=tuple(sorted(retired)))


def _newest_generation(authority: Authority) -> int:
    return max((c.generation or 0) for c in read_certs(authority.bundle))


def _settled(authority: Authority, leaves: Sequence[bytes], now_ms: int, policy: Policy) -> bool:
    """Every leaf is signed by the signer, and the newest issue (leaves, and the signer's own start as signer: its
    issue plus a grace) is older than a grace."""
    newest = issued_ms(authority.cert) + policy.grace_ms
    for pem in leaves:
        if not issued_by(pem, authority.signer.cert_pem):
            return False
        newest = max(newest, issued_ms(read_cert(pem)))
    return now_ms >= newest + policy.grace_ms


@dataclass(frozen=True)
class LeafRequest:
    """The certificate a party needs: its subject, names and usages."""

    common_name: str
    organization: str | None
    usages: tuple[str, ...]
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()

    @property
    def subject(self) -> str:
        return f"CN={self.common_name}" + (f",O={self.organization}" if self.organization else "")


def leaf_reason(existing: KeyPair | None, request: LeafRequest, authority: Authority, *, now_ms: int,
                policy: Policy) -> str | None:
    """Why `existing` must be issued again (rule 2), or None to keep it."""
    if existing is None:
        return "new"
    try:
        info = read_cert(existing.cert_pem)
    except ValueError:
        return "unreadable"
    if not key_matches(existing.key_pem, existing.cert_pem):
        return "its key does not match"
    if not issued_by(existing.cert_pem, authority.signer.cert_pem):
        return f"the {authority.kind} CA is now generation {authority.generation}"
    if info.subject != request.subject:
        return f"subject {info.subject} is now {request.subject}"
    if set(info.dns_names) != set(request.dns_names) or set(info.ip_addresses) != set(request.ip_addresses):
        return "its names changed"
    # Within the window, but only when a new one would end later: one that ends with its CA waits for the next.
    later = min(now_ms + policy.validity_days * DAY_MS, authority.cert.not_after_ms) > info.not_after_ms
    if now_ms >= policy.renew_at(info) and later:
        return f"it expires within {policy.renewal_days} days"
    return None


def plan_leaf(existing: KeyPair | None, request: LeafRequest, authority: Authority, *, now_ms: int,
              policy: Policy) -> tuple[KeyPair, str | None]:
    """(the certificate to hold, why it was issued — None when `existing` is kept)."""
    reason = leaf_reason(existing, request, authority, now_ms=now_ms, policy=policy)
    if reason is None and existing is not None:
        return existing, None
    return make_leaf(authority.signer, common_name=request.common_name, organization=request.organization,
                     dns_names=request.dns_names, ip_addresses=request.ip_addresses, usages=request.usages,
                     now_ms=now_ms, validity_days=policy.validity_days), reason


def split_pem(pem: bytes) -> KeyPair | None:
    """A keystore file (private key, then certificate chain) back into its key and its first certificate."""
    start = pem.find(b"-----BEGIN PRIVATE KEY-----")
    end = pem.find(b"-----END PRIVATE KEY-----")
    certs = pem_blocks(pem)
    if start < 0 or end < 0 or not certs:
        return None
    return KeyPair(pem[start:end + len(b"-----END PRIVATE KEY-----")] + b"\n", certs[0])
