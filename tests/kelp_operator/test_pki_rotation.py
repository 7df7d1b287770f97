"""The CA and certificate lifecycle as pure state transitions, the clock moved by hand (operator/pki.py).

What a running cluster relies on (docs/operator.md, "Certificates and their rotation"): a leaf is renewed
`renewalDays` before its end and never sooner; `renewalDays` before the CA's end a new CA (a new key) is
trusted beside it but signs nothing for a grace, so every party learns it first; then it signs and every
leaf is issued again by it; the old CA leaves the trust bundle only once every leaf of its family is signed
by the new one and a grace has passed, or once it has expired; the trust floor (what rolls the pods) rises
only then.
"""

from __future__ import annotations

import pytest

from kelp.operator.manifests.tls_builders import keystore_pem
from kelp.operator.security.certificates import DAY_MS, issued_by, read_cert, read_certs
from kelp.operator.security.pki import (
    TRUST_GRACE_MS,
    Authority,
    CaInvalid,
    KeyPair,
    LeafRequest,
    Policy,
    authority_data,
    authority_from_data,
    leaf_reason,
    plan_authority,
    plan_leaf,
    split_pem,
)

T0 = 1_800_000_000_000
POLICY = Policy(validity_days=100, renewal_days=10)
BROKER = LeafRequest("demo-broker", "kelp.dev", ("serverAuth", "clientAuth"), ("demo-0.demo-brokers.ns.svc",))


class Cluster:
    """One CA family as the Secrets hold it from pass to pass: the CA and its leaves."""

    def __init__(self) -> None:
        self.ca: Authority | None = None
        self.leaves: dict[str, KeyPair] = {}
        self.history: list[tuple[int, str]] = []

    def pass_at(self, now: int, requests: dict[str, LeafRequest]) -> tuple[str, list[str]]:
        """One reconciliation: the CA first, then every leaf; returns (the trust floor, the leaves issued)."""
        plan = plan_authority(self.ca, kind="cluster", cluster="demo", now_ms=now, policy=POLICY,
                              leaves=[leaf.cert_pem for leaf in self.leaves.values()])
        self.ca = plan.authority
        for what, happened in (("created", plan.created), ("activated", plan.activated)):
            if happened:
                self.history.append((now, f"{what} v{plan.authority.generation}"))
        if plan.renewed:
            assert plan.authority.pending is not None
            self.history.append((now, f"trusted v{read_cert(plan.authority.pending.cert_pem).generation}"))
        for gen in plan.retired:
            self.history.append((now, f"retired v{gen}"))
        issued = []
        for name, request in requests.items():
            self.leaves[name], why = plan_leaf(self.leaves.get(name), request, self.ca, now_ms=now, policy=POLICY)
            if why is not None:
                issued.append(name)
        return f"floor={self.ca.floor}", issued

    def generations(self) -> list[int]:
        assert self.ca is not None
        return [c.generation or 0 for c in read_certs(self.ca.bundle)]


def test_first_pass_makes_generation_zero_and_every_leaf() -> None:
    c = Cluster()
    floor, issued = c.pass_at(T0, {"broker-0": BROKER, "operator": LeafRequest("kelp-operator", "kelp.dev",
                                                                                 ("clientAuth",))})
    assert (floor, sorted(issued)) == ("floor=0", ["broker-0", "operator"])
    assert c.history == [(T0, "created v0")] and c.generations() == [0]
    assert c.pass_at(T0 + 1000, {"broker-0": BROKER})[1] == []  # nothing changes on the next pass


def test_a_leaf_is_renewed_renewal_days_before_its_end_and_not_sooner() -> None:
    c = Cluster()
    c.pass_at(T0, {})
    assert c.ca is not None
    # A leaf issued later than the CA, so its own end (validity) comes before the CA's.
    issued_at = T0 + 5 * DAY_MS
    c.pass_at(issued_at, {"b": BROKER})
    end = read_cert(c.leaves["b"].cert_pem).not_after_ms
    assert end == read_cert(c.ca.signer.cert_pem).not_after_ms  # capped at the CA's end
    # The CA's renewal comes at the same moment (the leaf ends with it): test the leaf alone with a fresh CA.
    fresh = Policy(validity_days=30, renewal_days=5)
    leaf, _ = plan_leaf(None, BROKER, c.ca, now_ms=issued_at, policy=fresh)
    leaf_end = read_cert(leaf.cert_pem).not_after_ms
    assert leaf_end == issued_at + 30 * DAY_MS
    assert leaf_reason(leaf, BROKER, c.ca, now_ms=leaf_end - 5 * DAY_MS - 1, policy=fresh) is None
    assert leaf_reason(leaf, BROKER, c.ca, now_ms=leaf_end - 5 * DAY_MS, policy=fresh) == "it expires within 5 days"


def test_names_and_subject_changes_issue_again() -> None:
    c = Cluster()
    c.pass_at(T0, {"b": BROKER})
    assert c.ca is not None
    more = LeafRequest(BROKER.common_name, BROKER.organization, BROKER.usages, (*BROKER.dns_names, "kafka.example"))
    assert leaf_reason(c.leaves["b"], more, c.ca, now_ms=T0, policy=POLICY) == "its names changed"
    other = LeafRequest("other", "kelp.dev", BROKER.usages, BROKER.dns_names)
    assert "subject" in str(leaf_reason(c.leaves["b"], other, c.ca, now_ms=T0, policy=POLICY))
    wrong_key = KeyPair(c.leaves["b"].key_pem, c.ca.signer.cert_pem)
    assert leaf_reason(wrong_key, BROKER, c.ca, now_ms=T0, policy=POLICY) == "its key does not match"


def test_the_whole_ca_rotation_sequence() -> None:
    c = Cluster()
    requests = {"broker-0": BROKER, "broker-1": BROKER}
    c.pass_at(T0, requests)
    assert c.ca is not None
    old_ca, old_key = c.ca.signer.cert_pem, c.ca.signer.key_pem
    renew_at = read_cert(old_ca).not_after_ms - 10 * DAY_MS
    grace = POLICY.grace_ms
    assert grace == TRUST_GRACE_MS  # min(24 h, renewalDays / 3)

    # Just before the CA's renewal window nothing happens; the leaves end with their CA and wait for the next one
    # (a leaf capped by its CA's end is not issued again by the same CA, pass after pass).
    assert c.pass_at(renew_at - 1, requests) == ("floor=0", [])
    assert c.pass_at(renew_at - DAY_MS // 2, requests) == ("floor=0", [])

    # 1. The window opens: generation 1 (a NEW key) is trusted beside generation 0, which keeps signing: no leaf
    #    changes, so nobody meets a certificate from a CA they have not learnt yet. The floor does not move.
    assert c.pass_at(renew_at, requests) == ("floor=0", [])
    assert c.generations() == [0, 1] and c.ca.pending is not None and c.ca.signer.key_pem == old_key
    assert c.ca.pending.key_pem != old_key

    # 2. A grace later generation 1 signs: every leaf is issued again by it in that pass; both stay trusted.
    assert c.pass_at(renew_at + grace - 1, requests) == ("floor=0", [])
    floor, issued = c.pass_at(renew_at + grace, requests)
    assert (floor, sorted(issued)) == ("floor=0", ["broker-0", "broker-1"])
    assert c.generations() == [1, 0] and c.ca.pending is None
    assert not issued_by(c.ca.signer.cert_pem, old_ca)
    assert all(issued_by(leaf.cert_pem, c.ca.signer.cert_pem) for leaf in c.leaves.values())

    # 3. During the next grace the old CA stays (clients still presenting old certificates are trusted).
    assert c.pass_at(renew_at + 2 * grace - 1, requests) == ("floor=0", [])
    assert c.generations() == [1, 0]

    # 4. Every leaf re-issued and the grace over: the old CA leaves the bundle; the floor rises (the pods restart).
    assert c.pass_at(renew_at + 2 * grace, requests) == ("floor=1", [])
    assert c.generations() == [1]
    assert [event for _t, event in c.history] == ["created v0", "trusted v1", "activated v1", "retired v0"]
    assert renew_at + 2 * grace < read_cert(old_ca).not_after_ms, "all before the old CA ends"


def test_a_short_renewal_window_shortens_the_grace() -> None:
    policy = Policy(validity_days=10, renewal_days=1)
    assert policy.grace_ms == DAY_MS // 3
    plan = plan_authority(None, kind="cluster", cluster="demo", now_ms=T0, policy=policy, leaves=[])
    end = read_cert(plan.authority.signer.cert_pem).not_after_ms
    ca = plan_authority(plan.authority, kind="cluster", cluster="demo", now_ms=end - DAY_MS, policy=policy,
                        leaves=[]).authority
    ca = plan_authority(ca, kind="cluster", cluster="demo", now_ms=end - DAY_MS + policy.grace_ms, policy=policy,
                        leaves=[]).authority
    assert ca.generation == 1 and ca.pending is None, "the new CA signs well before the old one ends"


def test_the_old_ca_stays_while_a_leaf_is_still_signed_by_it() -> None:
    c = Cluster()
    c.pass_at(T0, {"user": BROKER})
    assert c.ca is not None
    renew_at = read_cert(c.ca.signer.cert_pem).not_after_ms - 10 * DAY_MS
    grace = POLICY.grace_ms
    c.pass_at(renew_at, {})
    c.pass_at(renew_at + grace, {})  # the CA switches; the user's leaf is not re-issued here (another reconciler's)
    assert c.generations() == [1, 0]
    c.pass_at(renew_at + 3 * grace, {})
    assert c.generations() == [1, 0], "a leaf of the old CA is still in use: the old CA stays"
    c.pass_at(renew_at + 4 * grace, {"user": BROKER})  # the leaf is issued again...
    assert c.generations() == [1, 0]
    c.pass_at(renew_at + 5 * grace, {"user": BROKER})  # ...and a grace later the old CA goes
    assert c.generations() == [1]


def test_an_expired_old_ca_goes_whatever_the_leaves() -> None:
    c = Cluster()
    c.pass_at(T0, {"user": BROKER})
    assert c.ca is not None
    old_end = read_cert(c.ca.signer.cert_pem).not_after_ms
    c.pass_at(old_end - 10 * DAY_MS, {})
    c.pass_at(old_end - 10 * DAY_MS + POLICY.grace_ms, {})
    assert c.generations() == [1, 0]
    c.pass_at(old_end, {})
    assert c.generations() == [1]


def test_secrets_round_trip_and_broken_secrets_are_refused() -> None:
    plan = plan_authority(None, kind="clients", cluster="demo", now_ms=T0, policy=POLICY, leaves=[])
    key_data, cert_data = authority_data(plan.authority)
    assert authority_from_data("clients", key_data, cert_data) == plan.authority
    assert authority_from_data("clients", None, None) is None
    with pytest.raises(CaInvalid, match="incomplete"):
        authority_from_data("clients", key_data, None)
    other = plan_authority(None, kind="clients", cluster="demo", now_ms=T0, policy=POLICY, leaves=[]).authority
    with pytest.raises(CaInvalid, match="matches no certificate"):
        authority_from_data("clients", {"ca.key": other.signer.key_pem}, cert_data)
    # A rotation's first phase read back: the next CA's key beside the signer's, its certificate in the bundle.
    renewed = plan_authority(plan.authority, kind="clients", cluster="demo", now_ms=T0 + 95 * DAY_MS, policy=POLICY,
                             leaves=[]).authority
    key_data, cert_data = authority_data(renewed)
    assert set(key_data) == {"ca.key", "next-ca.key"}
    assert authority_from_data("clients", key_data, cert_data) == renewed
    # Then the signer is whichever certificate ca.key matches, put first, in whatever order the bundle is.
    switched = plan_authority(renewed, kind="clients", cluster="demo", now_ms=T0 + 96 * DAY_MS, policy=POLICY,
                              leaves=[]).authority
    key_data, cert_data = authority_data(switched)
    back = authority_from_data("clients", key_data, {"ca.crt": b"".join(reversed(switched.trusted))})
    assert back is not None and back.generation == 1 and back.signer == switched.signer and back.pending is None


def test_keystore_files_split_back() -> None:
    c = Cluster()
    c.pass_at(T0, {"b": BROKER})
    assert c.ca is not None
    pem = keystore_pem(c.leaves["b"], c.ca.signer.cert_pem)
    assert split_pem(pem) == c.leaves["b"]
    assert split_pem(b"garbage") is None
