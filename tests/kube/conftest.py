"""Session fixture for the kube tier: a real Kubernetes control plane as local processes.

Why this exists: Kelp's operator must be checked against real API-server
behaviour (CRD schema and CEL transition rules, the status subresource,
resourceVersion conflicts, Leases, garbage collection, the StatefulSet
controller). kind needs Docker and image pulls, which this environment lacks,
so ``build-control-plane.sh`` builds kube-apiserver, kube-controller-manager
and kube-scheduler from the published Go modules (cached per machine) and this
fixture runs them, with etcd, on 127.0.0.1 with ephemeral ports.

What it must never do: fail the suite because the binaries cannot be built
(the tier skips with the failing command and its message instead), bind fixed
ports, wait without a bound, or leave a process behind (every component runs
in its own process group, which teardown kills).

Environment:
  KELP_KUBE_BUILD=0            do not build; skip unless the binaries are cached
  KELP_KUBE_BUILD_TIMEOUT      seconds allowed for a first build (default 3600)
  KELP_KUBE_BIN                use binaries from this directory instead
  KELP_KUBE_KEEP=1             keep the temporary directory (logs, PKI, etcd data)
"""

from __future__ import annotations

import base64
import ipaddress
import os
import random
import shlex
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

# A real node (module scope) and Kelp's image (session scope) for the modules that run Pods.
from tests.kube.node_fixture import kelp_image, kube_node  # noqa: F401
from tests.kube.processes import Component, free_port, last_line, start_component

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build-control-plane.sh"
READY_TIMEOUT_S = 120.0
ADMIN_USER = "kelp-test-admin"

# Tests of this tier may include the one-off build in the first test's setup.
_BUILD_TIMEOUT_S = float(os.environ.get("KELP_KUBE_BUILD_TIMEOUT", "3600"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """When the binaries still have to be built, give the tier's tests a timeout covering it: each one's own
    timeout (a module's `pytest.mark.timeout`) plus the build's, since whichever kube test runs first builds
    them in its session fixture. (A cold run at load 25 had the build killed by a churn test's 1500 s.)"""
    kube_items = [i for i in items if i.get_closest_marker("kube")]
    if not kube_items or os.environ.get("KELP_KUBE_BIN") or os.environ.get("KELP_KUBE_BUILD") == "0":
        return
    try:
        cached = subprocess.run([str(BUILD_SCRIPT), "--check"], capture_output=True,
                                timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        cached = False
    if not cached:
        for item in kube_items:
            own = item.get_closest_marker("timeout")
            base = float(own.args[0]) if own is not None and own.args else 300.0
            item.add_marker(pytest.mark.timeout(base + _BUILD_TIMEOUT_S), append=False)  # closest: it wins


def _run(cmd: list[str], *, cwd: Path | None = None, timeout: float = 60.0) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"`{shlex.join(cmd)}` exited {proc.returncode}: {proc.stderr.strip()}")


def _binaries() -> Path:
    """Return the directory holding the control-plane binaries, or skip the tier."""
    override = os.environ.get("KELP_KUBE_BIN")
    if override:
        return Path(override)
    cmd = [str(BUILD_SCRIPT)]
    if os.environ.get("KELP_KUBE_BUILD") == "0":
        cmd.append("--check")  # build disabled: only accept a finished cache
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.skip(f"kube tier: `{shlex.join(cmd)}` did not finish within {_BUILD_TIMEOUT_S:.0f}s")
    except OSError as exc:
        pytest.skip(f"kube tier: `{shlex.join(cmd)}` could not run: {exc}")
    if proc.returncode != 0:
        pytest.skip(
            f"kube tier: `{shlex.join(cmd)}` exited {proc.returncode}: {last_line(proc.stderr)}"
        )
    took = time.monotonic() - started
    print(f"\nkube tier: control plane binaries ready in {took:.1f}s -> {proc.stdout.strip()}")
    return Path(proc.stdout.strip().splitlines()[-1])


def _service_net() -> ipaddress.IPv4Network:
    """A /24 for this control plane's Services whose first address (the `kubernetes` Service, which pods dial
    and `api_forwarder` serves on the machine) no interface has yet: concurrent tier runs each get their own."""
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, timeout=20).stdout
    for _ in range(100):
        net = ipaddress.ip_network(f"10.0.{random.randrange(1, 200)}.0/24")
        if f" {net[1]}/" not in out:
            return net
    raise RuntimeError("no free 10.0.x.0/24 service range: every 10.0.x.1 is on some interface")


def _make_pki(tmp: Path, service_ip: str) -> dict[str, Path]:
    """CA, an API-server serving cert for 127.0.0.1, the service-account key pair."""
    pki = tmp / "pki"
    pki.mkdir()
    ca_key, ca_crt = pki / "ca.key", pki / "ca.crt"
    srv_key, srv_csr, srv_crt = pki / "apiserver.key", pki / "apiserver.csr", pki / "apiserver.crt"
    sa_key, sa_pub = pki / "sa.key", pki / "sa.pub"
    ext = pki / "apiserver.ext"
    ext.write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        f"subjectAltName=IP:127.0.0.1,IP:{service_ip},DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
    )
    openssl = "openssl"
    _run([openssl, "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(ca_key)])
    _run([openssl, "req", "-x509", "-new", "-key", str(ca_key), "-sha256", "-days", "2",
          "-subj", "/CN=kelp-test-ca", "-out", str(ca_crt)])
    _run([openssl, "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(srv_key)])
    _run([openssl, "req", "-new", "-key", str(srv_key), "-subj", "/CN=kube-apiserver",
          "-out", str(srv_csr)])
    _run([openssl, "x509", "-req", "-in", str(srv_csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
          "-CAcreateserial", "-days", "2", "-sha256", "-extfile", str(ext), "-out", str(srv_crt)])
    _run([openssl, "genrsa", "-out", str(sa_key), "2048"])
    _run([openssl, "rsa", "-in", str(sa_key), "-pubout", "-out", str(sa_pub)])
    return {"ca_crt": ca_crt, "ca_key": ca_key, "srv_crt": srv_crt, "srv_key": srv_key,
            "sa_key": sa_key, "sa_pub": sa_pub}


@dataclass
class KubeControlPlane:
    """What tests get: endpoints, credentials, a client, and the components' logs."""

    server: str
    token: str
    ca_file: Path
    kubeconfig: Path
    tmp: Path
    version: str
    bindir: Path
    components: list[Component] = field(default_factory=list)
    # The Services' range; its first address is the `kubernetes` Service (api_forwarder). Random per run.
    service_net: ipaddress.IPv4Network = ipaddress.ip_network("10.0.0.0/24")

    @property
    def service_ip(self) -> str:
        return str(self.service_net[1])

    def api_client(self):  # -> kubernetes.client.ApiClient
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.server
        cfg.api_key = {"authorization": self.token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        cfg.ssl_ca_cert = str(self.ca_file)
        cfg.verify_ssl = True
        return client.ApiClient(cfg)

    def logs(self, lines: int = 40) -> str:
        return "\n".join(
            f"----- {c.name} ({c.log}) exit={c.proc.poll()} -----\n{c.tail(lines)}"
            for c in self.components
        )

    def check_alive(self) -> None:
        dead = [c for c in self.components if c.proc.poll() is not None]
        if dead:
            raise RuntimeError(
                "control-plane component(s) exited: "
                + ", ".join(f"{c.name} (exit {c.proc.returncode})" for c in dead)
                + "\n" + self.logs()
            )


def _wait_http(url: str, *, comp: Component, timeout: float, ctx: ssl.SSLContext | None = None,
               token: str | None = None) -> None:
    deadline = time.monotonic() + timeout
    last = "no attempt"
    while time.monotonic() < deadline:
        if comp.proc.poll() is not None:
            raise RuntimeError(f"{comp.name} exited {comp.proc.returncode} while waiting for {url}:\n"
                               f"{comp.tail()}")
        req = urllib.request.Request(url)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:
                if resp.status == 200:
                    return
                last = f"HTTP {resp.status}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}: {exc.read()[:300]!r}"
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(0.25)
    raise RuntimeError(f"{comp.name}: {url} not ready within {timeout:.0f}s (last: {last}):\n{comp.tail()}")


def _etcd_speed_flags(etcd: Path) -> list[str]:
    """Skip fsync (a throwaway test store) when this etcd has the flag (3.5+)."""
    try:
        out = subprocess.run([str(etcd), "--help"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return ["--unsafe-no-fsync"] if "--unsafe-no-fsync" in out.stdout + out.stderr else []


def _start_etcd(bindir: Path, tmp: Path) -> tuple[Component, str]:
    for _attempt in range(3):
        client_port, peer_port = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
        data = tmp / f"etcd-data-{client_port}"
        comp = start_component("etcd", [
            str(bindir / "etcd"), "--name", "kelp-test", "--data-dir", str(data),
            "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"kelp-test={peer_url}", "--initial-cluster-state", "new",
            "--log-level", "warn", *_etcd_speed_flags(bindir / "etcd"),
        ], tmp)
        try:
            _wait_http(f"{client_url}/health", comp=comp, timeout=30)
            return comp, client_url
        except RuntimeError:
            comp.stop()
            if "address already in use" not in comp.tail():
                raise
    raise RuntimeError("etcd: ports kept colliding")


@pytest.fixture(scope="session")
def kube_control_plane(request: pytest.FixtureRequest) -> Iterator[KubeControlPlane]:
    """Start etcd + kube-apiserver + kube-controller-manager + kube-scheduler; yield; tear down."""
    bindir = _binaries()
    tmp = Path(tempfile.mkdtemp(prefix="kelp-kube-"))
    try:
        service_net = _service_net()
        pki = _make_pki(tmp, str(service_net[1]))
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"kube tier: certificate generation failed: {exc}")
    token = base64.urlsafe_b64encode(os.urandom(24)).decode().rstrip("=")
    tokens = tmp / "tokens.csv"
    tokens.write_text(f'{token},{ADMIN_USER},{uuid.uuid4()},"system:masters"\n')
    components: list[Component] = []
    cp: KubeControlPlane | None = None
    failed = True
    try:
        etcd, etcd_url = _start_etcd(bindir, tmp)
        components.append(etcd)
        api_port = free_port()
        server = f"https://127.0.0.1:{api_port}"
        apiserver = start_component("kube-apiserver", [
            str(bindir / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            f"--etcd-prefix=/kelp-test-{uuid.uuid4().hex[:8]}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={api_port}",
            f"--tls-cert-file={pki['srv_crt']}", f"--tls-private-key-file={pki['srv_key']}",
            f"--client-ca-file={pki['ca_crt']}",
            f"--token-auth-file={tokens}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki['sa_pub']}",
            f"--service-account-signing-key-file={pki['sa_key']}",
            f"--service-cluster-ip-range={service_net}",
            "--allow-privileged=true",
            f"--cert-dir={tmp / 'apiserver-certs'}",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            "--v=1",
        ], tmp)
        components.append(apiserver)
        ctx = ssl.create_default_context(cafile=str(pki["ca_crt"]))
        t0 = time.monotonic()
        _wait_http(f"{server}/readyz", comp=apiserver, timeout=READY_TIMEOUT_S, ctx=ctx, token=token)
        kubeconfig = tmp / "kubeconfig"
        kubeconfig.write_text(_kubeconfig(server=server, ca_file=pki["ca_crt"], token=token))
        cm_port, sched_port = free_port(), free_port()
        components.append(start_component("kube-controller-manager", [
            str(bindir / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--service-account-private-key-file={pki['sa_key']}",
            f"--root-ca-file={pki['ca_crt']}",
            "--controllers=*",
            "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={cm_port}",
            f"--cert-dir={tmp / 'controller-manager-certs'}",
            "--v=1",
        ], tmp))
        components.append(start_component("kube-scheduler", [
            str(bindir / "kube-scheduler"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={sched_port}",
            f"--cert-dir={tmp / 'scheduler-certs'}",
            "--v=1",
        ], tmp))
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        _wait_http(f"https://127.0.0.1:{cm_port}/healthz", comp=components[2], timeout=60,
                   ctx=insecure, token=token)
        _wait_http(f"https://127.0.0.1:{sched_port}/healthz", comp=components[3], timeout=60,
                   ctx=insecure, token=token)
        version = (bindir / "kube-apiserver").parent.parent.name
        cp = KubeControlPlane(server=server, token=token, ca_file=pki["ca_crt"],
                              kubeconfig=kubeconfig, tmp=tmp, version=version, bindir=bindir,
                              components=components, service_net=service_net)
        print(f"\nkube tier: control plane {version} up at {server} in "
              f"{time.monotonic() - t0:.1f}s (logs in {tmp})")
        failed = False
        yield cp
    except RuntimeError as exc:
        print("\n".join(f"----- {c.name} log ({c.log}) -----\n{c.tail(80)}" for c in components))
        raise RuntimeError(f"kube control plane failed to start: {exc}") from None
    finally:
        for comp in reversed(components):
            comp.stop()
        if failed or request.session.testsfailed or os.environ.get("KELP_KUBE_KEEP") == "1":
            print(f"\nkube tier: component logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _kubeconfig(*, server: str, ca_file: Path, token: str) -> str:
    ca = base64.b64encode(ca_file.read_bytes()).decode()
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: kelp-test\n  cluster:\n    server: {server}\n"
        f"    certificate-authority-data: {ca}\n"
        f"users:\n- name: {ADMIN_USER}\n  user:\n    token: {token}\n"
        f"contexts:\n- name: kelp-test\n  context:\n    cluster: kelp-test\n    user: {ADMIN_USER}\n"
        "current-context: kelp-test\n"
    )


@pytest.fixture(scope="session")
def kube_api(kube_control_plane: KubeControlPlane):
    """A kubernetes.client.ApiClient authenticated as a cluster admin."""
    api = kube_control_plane.api_client()
    yield api
    api.close()


@pytest.fixture
def kube_namespace(kube_api, kube_control_plane: KubeControlPlane, request: pytest.FixtureRequest):
    """A fresh namespace per test; component logs are printed when the test failed."""
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(kube_control_plane.logs(60))
    try:
        core.delete_namespace(name)
    except client.ApiException:
        pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


def pytest_terminal_summary(terminalreporter) -> None:
    """The churn suite's per-case table (tests/kube/churn_report.py), when churn cases ran."""
    from tests.kube.churn_report import ROWS, table

    if ROWS:
        terminalreporter.section("kube churn: per-case report")
        for line in table(ROWS):
            terminalreporter.write_line(line)
