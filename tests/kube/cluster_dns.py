"""Cluster DNS for the kube tier's pods: `<svc>.<ns>.svc.cluster.local` and per-pod names, from the API server.

Why this exists: the chart's and the Cluster's defaults — the operator reaching the brokers at their
client Service `http://<cluster>.<ns>.svc:8080` (`brokerAddress: service`), brokers advertising their
per-pod names `<pod>.<cluster>-brokers.<ns>.svc` (`advertise: dns`), clients bootstrapping from
`<cluster>:9092` — need cluster DNS, which the tier (no CoreDNS, no kube-proxy) did not have, so every
kube test used pod IPs and the default path never ran (issue 32, item 7). This is the per-test
resolver: a DNS server on a test-made address of the service range (`<net>.10`, kube-dns's usual
address), which the node's kubelet gives every pod as its nameserver (`clusterDNS`), answering from
the API server's Services and EndpointSlices:

- `<pod hostname>.<service>.<ns>.svc.cluster.local`: that endpoint's address (StatefulSet pods of a
  headless Service; not-ready ones too when the Service publishes them, as CoreDNS does);
- `<service>.<ns>.svc.cluster.local`: a headless Service's endpoints, as CoreDNS answers; a ClusterIP
  Service's **ready endpoints** too — the one difference from a real cluster, where the name is the
  Service's virtual IP and kube-proxy picks an endpoint (the tier has no kube-proxy); the `kubernetes`
  Service answers the API forwarder's address (`api_forwarder`);
- AAAA for a known name: no addresses (NOERROR); any other name: NXDOMAIN.

Network rule: it listens only on that address (UDP 53), which only the test's own bridge reaches;
it reads the API server through the tier's client. Its thread ends when it stops; the interface is
deleted.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from tests.kube.api_forwarder import _ip, add_local_address

__all__ = ["ClusterDns", "DOMAIN"]

DOMAIN = "cluster.local"
CACHE_S = 0.5  # answers follow the API server within half a second (a pod turning Ready, a new pod IP)


class ClusterDns:
    def __init__(self, *, name: str, kube_api: Any, address: str, api_service_ip: str) -> None:
        from kubernetes import client

        self.link, self.address, self.api_service_ip = name, address, api_service_ip
        self.core, self.discovery = client.CoreV1Api(kube_api), client.DiscoveryV1Api(kube_api)
        add_local_address(name, address)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.bind((address, 53))
        except OSError:
            self.sock.close()
            _ip("link", "del", name)
            raise
        self.sock.settimeout(0.5)
        self.queries = 0
        self._cache: tuple[float, dict[str, list[str]]] = (0.0, {})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="cluster-dns", daemon=True)
        self._thread.start()

    # -- what names mean ----------------------------------------------------------------
    def records(self) -> dict[str, list[str]]:
        """Every name this resolver knows (fully qualified, lower case, trailing dot) -> its IPv4 addresses."""
        at, cached = self._cache
        if time.monotonic() - at < CACHE_S:
            return cached
        names: dict[str, list[str]] = {}
        services = {(s.metadata.namespace, s.metadata.name): s
                    for s in self.core.list_service_for_all_namespaces().items}
        for sl in self.discovery.list_endpoint_slice_for_all_namespaces().items:
            svc_name = (sl.metadata.labels or {}).get("kubernetes.io/service-name")
            svc = services.get((sl.metadata.namespace, svc_name))
            if svc is None:
                continue
            publish = bool(svc.spec.publish_not_ready_addresses)
            base = f"{svc_name}.{sl.metadata.namespace}.svc.{DOMAIN}."
            for ep in sl.endpoints or []:
                ready = ep.conditions is None or ep.conditions.ready is not False
                if not (ready or publish):
                    continue
                names.setdefault(base, []).extend(ep.addresses or [])
                if ep.hostname:
                    names.setdefault(f"{ep.hostname}.{base}", []).extend(ep.addresses or [])
        for ns, name in services:
            names.setdefault(f"{name}.{ns}.svc.{DOMAIN}.", [])  # known, if without endpoints yet
        names[f"kubernetes.default.svc.{DOMAIN}."] = [self.api_service_ip]
        self._cache = (time.monotonic(), names)
        return names

    def answer(self, packet: bytes) -> bytes | None:
        from dnslib import QTYPE, RCODE, RR, A, DNSRecord

        try:
            query = DNSRecord.parse(packet)
        except Exception:  # not DNS: no answer, as a server would drop it
            return None
        reply = query.reply()
        qname = str(query.q.qname).lower()
        try:
            known = self.records()
        except Exception:  # the API server did not answer: SERVFAIL, the client retries
            reply.header.rcode = RCODE.SERVFAIL
            return reply.pack()
        if qname not in known:
            reply.header.rcode = RCODE.NXDOMAIN
        elif query.q.qtype in (QTYPE.A, QTYPE.ANY):
            for ip in dict.fromkeys(known[qname]):
                reply.add_answer(RR(qname, QTYPE.A, rdata=A(ip), ttl=1))
        return reply.pack()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                packet, peer = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.queries += 1
            out = self.answer(packet)
            if out is not None:
                try:
                    self.sock.sendto(out, peer)
                except OSError:
                    pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
        _ip("link", "del", self.link)
