"""The kube tier's cluster DNS answers like CoreDNS for the names the defaults use (no cluster needed).

What the quick start relies on (issue 32, item 7): a pod asking for `demo.kelp.svc.cluster.local` (the
client Service) or `demo-0.demo-brokers.kelp.svc.cluster.local` (a broker's advertised name) gets the
pod address the API server has, an AAAA question for a known name gets no address rather than an error
(clients ask both), and a name nobody has — the search-list guesses a resolver makes first — gets NXDOMAIN.
"""

from __future__ import annotations

import time

from dnslib import RCODE, DNSRecord

from tests.kube.cluster_dns import ClusterDns

RECORDS = {
    "demo.kelp.svc.cluster.local.": ["10.244.1.5", "10.244.1.6"],
    "demo-0.demo-brokers.kelp.svc.cluster.local.": ["10.244.1.5"],
    "empty.kelp.svc.cluster.local.": [],
}


def resolver() -> ClusterDns:
    dns = object.__new__(ClusterDns)  # no interface, no socket: only the answers
    dns._cache = (time.monotonic() + 3600, dict(RECORDS))
    return dns


def ask(name: str, qtype: str = "A") -> DNSRecord:
    out = resolver().answer(DNSRecord.question(name, qtype).pack())
    assert out is not None
    return DNSRecord.parse(out)


def test_cluster_names_resolve_to_pod_addresses() -> None:
    got = ask("demo.kelp.svc.cluster.local")
    assert got.header.rcode == RCODE.NOERROR
    assert sorted(str(rr.rdata) for rr in got.rr) == ["10.244.1.5", "10.244.1.6"]
    assert [str(rr.rdata) for rr in ask("DEMO-0.demo-brokers.kelp.svc.cluster.local").rr] == ["10.244.1.5"]


def test_unknown_names_are_nxdomain_and_known_ones_have_no_ipv6() -> None:
    assert ask("demo.kelp.svc.kelp.svc.cluster.local").header.rcode == RCODE.NXDOMAIN  # a search-list guess
    aaaa = ask("demo.kelp.svc.cluster.local", "AAAA")
    assert aaaa.header.rcode == RCODE.NOERROR and not aaaa.rr
    empty = ask("empty.kelp.svc.cluster.local")
    assert empty.header.rcode == RCODE.NOERROR and not empty.rr  # a Service without ready endpoints yet
    assert resolver().answer(b"not dns") is None
