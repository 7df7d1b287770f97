"""Pods on the test node reach the API server at the `kubernetes` Service address, as in a real cluster.

Why this exists: in-cluster clients (brokers electing through Leases, kopf,
`kubernetes.config.load_incluster_config`) dial `KUBERNETES_SERVICE_HOST`,
the first address of the service range (10.0.x.1:443, `KubeControlPlane.service_ip`), which kube-proxy
would route to the API server. The tier has no kube-proxy and its API
server listens on 127.0.0.1 only, so this puts 10.0.x.1 on a veth
interface of its own (a host-local address: pods reach it through their
default route, the node's CNI bridge) and forwards TCP from there to the
API server. The API server's certificate already names 10.0.x.1. (The
address is not put on the bridge itself: the CNI bridge plugin refuses a
bridge holding an address other than its gateway.) Each control plane picks
its own random 10.0.x.0/24 service range (conftest), so concurrent tier runs
on one machine each bind their own address instead of colliding on one.

Network rule: it listens only on that test-created address, reached only
from the test's own bridge, and connects only to the loopback API server.
Threads end when it stops; the interface is deleted.
"""

from __future__ import annotations

import socket
import subprocess
import threading

SERVICE_IP = "10.0.0.1"


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


def add_local_address(link: str, address: str) -> None:
    """Put `address` on a veth pair of its own named `link` (a host-local address pods reach through their default
    route, the node's bridge); `ip link del <link>` removes it."""
    for args in (("link", "add", link, "type", "veth", "peer", "name", link + "p"),
                 ("addr", "add", f"{address}/32", "dev", link),
                 ("link", "set", link + "p", "up"), ("link", "set", link, "up")):
        out = _ip(*args)
        if out.returncode != 0:
            _ip("link", "del", link)
            raise RuntimeError(f"`ip {' '.join(args)}` failed: {out.stderr.strip()}")


class ApiForwarder:
    def __init__(self, *, name: str, api_port: int, service_ip: str = SERVICE_IP, listen_port: int = 443) -> None:
        self.link = name
        self.target = ("127.0.0.1", api_port)
        add_local_address(name, service_ip)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((service_ip, listen_port))
        except OSError:
            self.sock.close()
            _ip("link", "del", name)
            raise
        self.sock.listen(64)
        self.sock.settimeout(0.5)
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="api-forwarder", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self) -> None:
        self._stop.set()
        self.sock.close()
        self._thread.join(5)
        with self._lock:
            for s in self._conns:
                s.close()
        _ip("link", "del", self.link)
