"""Apache Kafka itself as the bench's reference: its broker jars from Maven, KRaft nodes on loopback.

Why: a user choosing Kelp compares it with Apache Kafka, so `make bench` runs
every case against a real Kafka broker in the same run, on the same machine,
with the same client. This module

- fetches Kafka's broker and its runtime dependencies with Maven (a throwaway
  pom, `dependency:copy-dependencies`) into
  `$KELP_CACHE_DIR/kafka-<version>/libs` (default `~/.cache/kelp`), once: a
  stamp file marks a complete fetch. 4.4.0's `kafka-tools-api` and
  `kafka-tools` are not in the registry; the broker never loads them, so they
  are excluded. Logging is log4j2 through `log4j-slf4j-impl`, as Kafka's own
  distribution ships it.
- formats KRaft storage (`kafka.tools.StorageTool format`) and starts one
  combined broker+controller node (`--standalone`, dynamic quorum) or three
  (static `controller.quorum.voters`), every setting at Kafka's default but
  the listeners, the log directory and the internal topics' replication
  factor (1 on one node), with the JVM flags of Kafka's own start scripts
  (`kafka-server-start.sh` + `kafka-run-class.sh`: 1 GiB heap, G1, 20 ms
  pause target, GC log, local JMX).

`python -m bench.kafka_ref` fetches (if needed) and prints the libs directory.

It must never fetch from anywhere but the repository Maven is configured
with (its default), listen on anything but 127.0.0.1, or leave a JVM running.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Mapping

from kelp.maven import fetch_runtime_jars

from . import probe

__all__ = ["KAFKA_VERSION", "kafka_home", "fetch", "KafkaCluster", "main"]

KAFKA_VERSION = "4.4.0"
SCALA_VERSION = "2.13"
# log4j2's slf4j 1.x binding, at the log4j-core version 4.4.0's broker depends on.
LOG4J_VERSION = "2.25.5"
BROKER_ARTIFACTS = (f"kafka_{SCALA_VERSION}", "kafka-server", "kafka-storage")
EXCLUDED_ARTIFACTS = ("kafka-tools-api", "kafka-tools")

# kafka-server-start.sh (KAFKA_HEAP_OPTS, -loggc) and kafka-run-class.sh (KAFKA_JVM_PERFORMANCE_OPTS,
# KAFKA_JMX_OPTS) defaults; MaxInlineLevel=15 is the JDK default since 14, kept as the script has it.
JVM_FLAGS = (
    "-Xmx1G", "-Xms1G",
    "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true",
    "-Dcom.sun.management.jmxremote", "-Dcom.sun.management.jmxremote.authenticate=false",
    "-Dcom.sun.management.jmxremote.ssl=false",
)

_LOG4J2 = """\
status = error
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
# Log loading at INFO (what recovery did, for bench/recovery.py): a few lines per log at start-up only.
logger.loader.name = org.apache.kafka.storage.internals.log.LogLoader
logger.loader.level = INFO
logger.logmanager.name = org.apache.kafka.storage.internals.log.LogManager
logger.logmanager.level = INFO
"""


def kafka_home(version: str = KAFKA_VERSION) -> Path:
    """`$KELP_CACHE_DIR/kafka-<version>` (default `~/.cache/kelp/kafka-<version>`); jars under `libs/`."""
    base = os.environ.get("KELP_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kelp")
    return Path(base) / f"kafka-{version}"


def _pom(version: str) -> str:
    exclusions = "".join(f"<exclusion><groupId>org.apache.kafka</groupId><artifactId>{a}</artifactId></exclusion>"
                         for a in EXCLUDED_ARTIFACTS)
    deps = "".join(
        f"<dependency><groupId>org.apache.kafka</groupId><artifactId>{a}</artifactId><version>{version}</version>"
        f"<exclusions>{exclusions}</exclusions></dependency>\n" for a in BROKER_ARTIFACTS)
    deps += (f"<dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>"
             f"<version>{LOG4J_VERSION}</version></dependency>\n")
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>\n'
            "<groupId>dev.kelp.bench</groupId><artifactId>kafka-broker-jars</artifactId><version>1</version>"
            f"<packaging>pom</packaging>\n<dependencies>\n{deps}</dependencies></project>\n")


def fetch(version: str = KAFKA_VERSION, *, quiet: bool = True) -> Path:
    """The libs directory of Kafka `version`, fetched with Maven unless a previous fetch completed."""
    return fetch_runtime_jars(kafka_home(version), _pom(version), marker_jar=f"kafka_{SCALA_VERSION}-{version}.jar",
                              what=f"Apache Kafka {version}'s broker jars", stamp=version, quiet=quiet,
                              hint="; try another release with --kafka-version")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class KafkaCluster:
    """One or three combined broker+controller KRaft nodes on 127.0.0.1, started in `start()`.

    `cold_start_s` is from the exec of the first `kafka.Kafka` JVM to a
    Metadata response listing every node (storage formatting, a one-off
    deployment step, is timed apart as `format_s`).
    """

    def __init__(self, work: Path, *, nodes: int = 1, version: str = KAFKA_VERSION,
                 listeners: Mapping[str, str] | None = None, properties: Mapping[str, object] | None = None,
                 format_args: tuple[str, ...] = ()) -> None:
        """`listeners`: more client listeners beside PLAINTEXT (name -> security protocol, e.g. SASL_SSL), each on
        a port of its own (`listener_bootstrap(name)`); `properties`: more server.properties (their security
        keys); `format_args`: more arguments of `kafka-storage format` (`--add-scram ...`)."""
        if nodes < 1:
            raise ValueError("a Kafka cluster needs at least one node")
        self.work, self.nodes, self.version = work, nodes, version
        self.extra_listeners = dict(listeners or {})
        self.extra_properties = dict(properties or {})
        self.format_args = format_args
        self.procs: list[subprocess.Popen[str]] = []
        self.ports = [(_free_port(), _free_port()) for _ in range(nodes)]  # (client, controller)
        self.extra_ports = [{name: _free_port() for name in self.extra_listeners} for _ in range(nodes)]
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p, _ in self.ports)
        self.log_dirs = [work / f"kafka-{i}" / "data" for i in range(nodes)]
        self.cold_start_s = self.format_s = float("nan")
        self._stderr: list[list[str]] = [[] for _ in range(nodes)]

    # -- configuration -------------------------------------------------------------------

    def _properties(self, i: int) -> str:
        client, controller = self.ports[i]
        extra = "".join(f",{name}://127.0.0.1:{port}" for name, port in self.extra_ports[i].items())
        protocols = "".join(f",{name}:{protocol}" for name, protocol in self.extra_listeners.items())
        props: dict[str, object] = {
            "process.roles": "broker,controller",
            "node.id": i + 1,
            "listeners": f"PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}{extra}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{client}{extra}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{protocols}",
            "log.dirs": self.log_dirs[i],
        }
        if self.extra_listeners:
            props["inter.broker.listener.name"] = "PLAINTEXT"
        if self.nodes == 1:
            props["controller.quorum.bootstrap.servers"] = f"127.0.0.1:{controller}"
            for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                        "transaction.state.log.min.isr", "share.coordinator.state.topic.replication.factor",
                        "share.coordinator.state.topic.min.isr"):
                props[key] = 1
        else:
            props["controller.quorum.voters"] = ",".join(f"{n + 1}@127.0.0.1:{c}"
                                                         for n, (_, c) in enumerate(self.ports))
        props.update(self.extra_properties)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def listener_bootstrap(self, name: str) -> str:
        """The bootstrap list of one of the `listeners` given (PLAINTEXT: `bootstrap`)."""
        if name == "PLAINTEXT":
            return self.bootstrap
        return ",".join(f"127.0.0.1:{ports[name]}" for ports in self.extra_ports)

    def _java(self, libs: Path, node_dir: Path, main_class: str, *args: str, jvm: tuple[str, ...] = ()) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise FileNotFoundError("a Java runtime (`java`, 17 or newer) is needed to run Apache Kafka")
        return [java, *jvm, f"-Dlog4j2.configurationFile={node_dir / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={node_dir / 'logs'}", "-cp", f"{libs}/*", main_class, *args]

    # -- lifecycle -----------------------------------------------------------------------

    def start(self, *, timeout_s: float = 120.0) -> "KafkaCluster":
        libs = fetch(self.version)
        cluster_id = "-"
        while cluster_id.startswith("-"):  # as Kafka's Uuid.randomUuid(): a leading '-' reads as an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        node_dirs = [self.work / f"kafka-{i}" for i in range(self.nodes)]
        for i, node_dir in enumerate(node_dirs):
            (node_dir / "logs").mkdir(parents=True, exist_ok=True)
            (node_dir / "server.properties").write_text(self._properties(i))
            (node_dir / "log4j2.properties").write_text(_LOG4J2)
        t0 = time.perf_counter()
        standalone = ["--standalone"] if self.nodes == 1 else []
        formats = [subprocess.Popen(self._java(libs, d, "kafka.tools.StorageTool", "format", "-t", cluster_id,
                                               "-c", str(d / "server.properties"), *standalone,
                                               *self.format_args),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                   for d in node_dirs]
        for f in formats:
            out, _ = f.communicate(timeout=120)
            if f.returncode != 0:
                raise RuntimeError(f"formatting Kafka storage failed (exit {f.returncode}):\n{out[-2000:]}")
        self.format_s = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            for i in range(self.nodes):
                self.procs.append(self._spawn(libs, i))
            ready = probe.wait_serving(self.bootstrap, brokers=self.nodes, timeout_s=timeout_s,
                                       alive=lambda: all(p.poll() is None for p in self.procs))
            self.cold_start_s = ready - t0
        except BaseException as exc:
            self.stop()
            if isinstance(exc, RuntimeError):
                tail = "".join(line for err in self._stderr for line in err[-15:])
                raise RuntimeError(f"Apache Kafka {self.version} did not start: {exc}\n{tail}") from None
            raise
        return self

    def _spawn(self, libs: Path, i: int) -> subprocess.Popen[str]:
        """Exec node `i`'s JVM on its (formatted) storage, its stderr drained into `self._stderr[i]`."""
        d = self.work / f"kafka-{i}"
        gc_log = f"-Xlog:gc*:file={d / 'logs' / 'kafkaServer-gc.log'}:time,tags:filecount=10,filesize=100M"
        proc = subprocess.Popen(self._java(libs, d, "kafka.Kafka", str(d / "server.properties"),
                                           jvm=(*JVM_FLAGS, gc_log)),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._drain, args=(proc, self._stderr[i]), daemon=True).start()
        return proc

    def restart(self, node: int) -> float:
        """Exec a stopped (or killed) node again on the same storage, same ports; the `perf_counter()` of the exec."""
        if self.procs[node].poll() is None:
            raise RuntimeError(f"Kafka node {node} is still running")
        self._stderr[node].clear()
        libs = fetch(self.version)
        t0 = time.perf_counter()
        self.procs[node] = self._spawn(libs, node)
        return t0

    def stderr_lines(self, node: int) -> list[str]:
        """The node's last stderr lines (at most 200) since its last (re)start."""
        return list(self._stderr[node])

    @staticmethod
    def _drain(proc: subprocess.Popen[str], sink: list[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            sink.append(line)
            del sink[:-200]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.poll() is None]

    def cpu_seconds(self) -> float:
        return probe.cpu_seconds(self.pids)

    def rss_bytes(self) -> int:
        return probe.rss_bytes(self.pids)

    def kill(self, node: int) -> None:
        """SIGKILL one node (index from 0): no controlled shutdown."""
        proc = self.procs[node]
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def stop(self, *, timeout_s: float = 20.0) -> None:
        """SIGTERM every node (a controlled shutdown), SIGKILL whatever has not exited after `timeout_s`."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def __enter__(self) -> "KafkaCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kafka_ref", description=__doc__.splitlines()[0])
    p.add_argument("--kafka-version", default=KAFKA_VERSION, help=f"Apache Kafka release ({KAFKA_VERSION})")
    p.add_argument("--start", action="store_true", help="also start one node, print its cold start, stop it")
    args = p.parse_args(argv)
    try:
        print(fetch(args.kafka_version, quiet=False))
        if args.start:
            with tempfile.TemporaryDirectory(prefix="kelp-kafka-") as tmp, \
                    KafkaCluster(Path(tmp), version=args.kafka_version) as kafka:
                print(f"Apache Kafka {args.kafka_version} serving at {kafka.bootstrap}: format {kafka.format_s:.2f} s, "
                      f"cold start {kafka.cold_start_s:.2f} s, RSS {kafka.rss_bytes() / 2**20:.0f} MiB")
    except (FileNotFoundError, RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"bench.kafka_ref: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
