"""Secured listeners: produce and consume over PLAINTEXT, SSL and SASL_SSL, Kelp beside Apache Kafka, and ACL cost.

Why: issue 20 asks what security costs — TLS and SASL_SSL throughput beside Apache Kafka with the same
security in the same run (goal: Kelp >= 1.0x Kafka), the CPU TLS costs each broker per GB, and what ACL
checks cost against none. One Kelp broker and one Kafka KRaft node each serve three client listeners —
PLAINTEXT, SSL (TLS, server authentication) and SASL_SSL (SCRAM-SHA-512) — with the same certificate and
key (bench/security/pki.py, made in a temporary directory), SCRAM users created before the first start the way
each documents it (`kelp storage format --add-scram`, `kafka-storage format --add-scram`). For each
listener the same workload runs against both, alternating which goes first, `runs` times (medians):
produce `records` records of `size` bytes with acks=1 and with acks=all (confluent-kafka, the settings of
bench/clients.py, a topic of one partition per run, deleted once measured), then consume `consume_records`
from offset 0 of a topic produced once per broker (untimed, over PLAINTEXT). Client settings come from
Kafka's client properties (the path `--client-config` takes: `security.protocol`, `sasl.mechanism`,
`sasl.jaas.config`, `ssl.truststore.location`, ...), translated to librdkafka's.

Printed per listener and case: MB/s (10^6 bytes of record values per second), records/s, Kelp/Kafka,
broker CPU-seconds (utime+stime of the broker's process tree from /proc) per GB of values, and the
client's (this process: librdkafka's threads) per GB; then TLS's CPU cost per GB (SSL and SASL_SSL minus
PLAINTEXT) for each broker, and the TLS version and cipher each broker negotiated.

ACL cost: two more Kelp brokers, alike (one SASL_PLAINTEXT listener, SCRAM-SHA-512, the same users and
`super.users=User:admin`; no TLS, so the authorizer's share is not hidden under encryption) but for
`authorizer.class.name` (Kafka's StandardAuthorizer name) and `acls` ACLs on the second — `acls - 1`
LITERAL WRITE ACLs of other users on other topics and one PREFIXED WRITE ACL that allows alice — take
alice's acks=1 produce, alternating, `acl_runs` times; the delta of the medians (time and broker CPU per
GB) is printed with the paired per-run time deltas (the noise to read it against).

`run_external` runs the produce/consume workload against an existing cluster with the client properties
given (`make bench BENCH_ARGS="--bootstrap-server HOST:PORT --client-config client.properties"`): no
broker CPU then (the brokers are not this machine's processes).

`python -m bench.security` runs this alone; `make bench` runs it after the broker cases (`--security`,
empty skips; `--acl-count 0` skips the ACL cost).

It must never report a figure without its reference measured in the same run, nor count a record before
the broker acknowledged or delivered it.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from .. import clients, probe, section_main
from ..broker import BenchBroker
from .report import ACL_PREFIX, CASES, print_report

__all__ = ["MODES", "read_client_properties", "librdkafka_config", "run", "run_external", "print_report", "main"]

MODES = ("PLAINTEXT", "SSL", "SASL_SSL")
MECHANISM = "SCRAM-SHA-512"
ADMIN = ("admin", "admin-secret")
USER = ("alice", "alice-secret")
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
WARMUP_RECORDS = 20_000

# Java client properties that name what librdkafka calls otherwise, or that it has no use for (PEM only).
_RENAMED = {"sasl.mechanism": "sasl.mechanisms", "ssl.truststore.location": "ssl.ca.location"}
_DROPPED = ("sasl.jaas.config", "ssl.truststore.type", "ssl.keystore.type", "ssl.truststore.password",
            "ssl.keystore.password", "ssl.keystore.location", "bootstrap.servers")


# -- client properties -------------------------------------------------------------------------------------------


def read_client_properties(path: Path | None = None, overrides: list[str] | None = None) -> dict[str, str]:
    """Kafka client properties from a Java properties file, then `KEY=VALUE` overrides (later wins)."""
    props: dict[str, str] = {}
    if path is not None:
        from kelp.config.file import read_properties_text
        from kelp.errors import ConfigError

        try:
            text = path.read_text()
        except OSError as exc:
            raise ValueError(f"client config {path}: {exc.strerror or exc}") from None
        try:
            props.update({k: str(v) for k, v in read_properties_text(text, path).items()})
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"client property {item!r}: expected KEY=VALUE")
        props[key.strip()] = value
    return props


def librdkafka_config(props: Mapping[str, str]) -> dict[str, str]:
    """librdkafka's settings for Kafka client properties (Java's names or librdkafka's), checked first.

    The security keys are checked by Kelp's own client (`kelp.kafka_client.connection_security`: the
    protocol, SASL credentials from `sasl.jaas.config` or `sasl.username`/`sasl.password`, PEM files that
    load); a PEM `ssl.keystore.location` (chain and key, mutual TLS) becomes `ssl.certificate.location` and
    `ssl.key.location`, an empty `ssl.endpoint.identification.algorithm` librdkafka's `none`. Any other key
    goes to librdkafka as it is (which refuses what it does not know, by name).
    """
    from kelp.kafka_client import connection_security

    lowered = {k.strip().lower() if k.strip().lower().startswith(("ssl.", "sasl.", "security.")) else k.strip(): v
               for k, v in props.items()}
    security = connection_security(lowered)  # ValueError naming the property
    out: dict[str, str] = {}
    for key, value in lowered.items():
        if key in _DROPPED:
            continue
        out[_RENAMED.get(key, key)] = value
    out["security.protocol"] = security.protocol
    if security.sasl is not None:
        out.update({"sasl.mechanisms": security.sasl.mechanism, "sasl.username": security.sasl.username,
                    "sasl.password": security.sasl.password})
    keystore = lowered.get("ssl.keystore.location")
    if keystore:
        out.setdefault("ssl.certificate.location", keystore)
        out.setdefault("ssl.key.location", keystore)
    algorithm = lowered.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = algorithm.strip().lower() or "none"
    return out


def _java_properties(mode: str, ca_file: Path, user: tuple[str, str] = USER) -> dict[str, str]:
    """What a user of listener `mode` writes in a client properties file (Java's names)."""
    props = {"security.protocol": mode}
    if mode.startswith("SASL_"):
        props.update({"sasl.mechanism": MECHANISM,
                      "sasl.jaas.config": f'{SCRAM_MODULE} required username="{user[0]}" password="{user[1]}";'})
    if mode.endswith("SSL"):
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca_file)})
    return props


# -- measuring ---------------------------------------------------------------------------------------------------


@dataclass
class Endpoint:
    """One listener of one broker (or cluster), and how the workload's user and an admin reach it."""

    broker: str  # kelp, kafka, or cluster (an existing one)
    mode: str
    bootstrap: str
    config: dict[str, str]
    admin_bootstrap: str
    admin_config: dict[str, str]
    pids: Callable[[], list[int]] | None
    replication_factor: int = 1


@dataclass
class Sample:
    seconds: float
    broker_cpu_s: float
    client_cpu_s: float


@dataclass
class Cell:
    samples: list[Sample] = field(default_factory=list)


def _client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(ep: Endpoint, action: Callable[[], float]) -> Sample:
    broker0 = probe.cpu_seconds(ep.pids()) if ep.pids else float("nan")
    client0 = _client_cpu()
    seconds = action()
    client = _client_cpu() - client0
    broker = probe.cpu_seconds(ep.pids()) - broker0 if ep.pids else float("nan")
    return Sample(seconds, broker, client)


def _produce_once(ep: Endpoint, topic: str, *, count: int, size: int, acks: int) -> Sample:
    clients.create_topic(ep.admin_bootstrap, topic, replication_factor=ep.replication_factor, config=ep.admin_config)
    try:
        sample = _timed(ep, lambda: clients.produce(ep.bootstrap, topic, count=count, size=size, acks=acks,
                                                    config=ep.config))
        end = clients.end_offset(ep.admin_bootstrap, topic, config=ep.admin_config)
        if end != count:
            raise RuntimeError(f"{ep.broker} {ep.mode} {topic}: high watermark {end} after producing {count} records")
    finally:
        clients.delete_topic(ep.admin_bootstrap, topic, config=ep.admin_config)
    return sample


def _summary(samples: list[Sample], *, records: int, size: int) -> dict[str, Any]:
    seconds = statistics.median(s.seconds for s in samples)
    gb = records * size / 1e9
    broker = [s.broker_cpu_s for s in samples]
    return {"records": records, "seconds": seconds, "mb_s": records * size / 1e6 / seconds,
            "records_s": records / seconds,
            "broker_cpu_s_per_gb": statistics.median(broker) / gb if all(b == b for b in broker) else None,
            "client_cpu_s_per_gb": statistics.median(s.client_cpu_s for s in samples) / gb,
            "runs_mb_s": [round(records * size / 1e6 / s.seconds, 1) for s in samples]}


def measure(endpoints: list[Endpoint], *, records: int, consume_records: int, size: int, runs: int,
            consume_topics: Mapping[str, str], label: str = "sec") -> list[dict[str, Any]]:
    """Every case on every endpoint; endpoints of one mode alternate which goes first; medians over `runs`."""
    cells: dict[tuple[str, str, str], Cell] = {}
    modes = list(dict.fromkeys(ep.mode for ep in endpoints))
    turn = 0

    def each(mode: str) -> list[Endpoint]:
        nonlocal turn
        turn += 1
        eps = [ep for ep in endpoints if ep.mode == mode]
        return eps if turn % 2 else eps[::-1]

    for ep in endpoints:  # JIT, page cache, TLS session set-up: out of the timed runs
        warm = f"{label}-warm-{ep.mode.lower()}-{uuid.uuid4().hex[:6]}"
        _produce_once(ep, warm, count=min(WARMUP_RECORDS, records), size=size, acks=1)
        clients.consume(ep.bootstrap, consume_topics[ep.broker], count=min(WARMUP_RECORDS, consume_records),
                        config=ep.config)
    for run in range(runs):
        for mode in modes:
            for acks in ("1", "all"):
                for ep in each(mode):
                    topic = f"{label}-{mode.lower()}-acks{acks}-{run}-{uuid.uuid4().hex[:6]}"
                    sample = _produce_once(ep, topic, count=records, size=size, acks=1 if acks == "1" else -1)
                    cells.setdefault((mode, f"produce acks={acks}", ep.broker), Cell()).samples.append(sample)
            for ep in each(mode):
                sample = _timed(ep, lambda: clients.consume(
                    ep.bootstrap, consume_topics[ep.broker], count=consume_records, config=ep.config))  # noqa: B023
                cells.setdefault((mode, "consume", ep.broker), Cell()).samples.append(sample)
    rows = []
    brokers = list(dict.fromkeys(ep.broker for ep in endpoints))
    for mode in modes:
        for case in CASES:
            count = consume_records if case == "consume" else records
            rows.append({"security": mode, "case": case, **{
                b: _summary(cells[(mode, case, b)].samples, records=count, size=size)
                for b in brokers if (mode, case, b) in cells}})
    return rows


def negotiated_tls(bootstrap: str, ca_file: Path) -> str:
    """The TLS version and cipher a client (Python's OpenSSL, as librdkafka's) gets from this listener."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    context = ssl.create_default_context(cafile=str(ca_file))
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        cipher = tls.cipher()
        return f"{tls.version()} {cipher[0] if cipher else '?'}"


# -- brokers -----------------------------------------------------------------------------------------------------


def _scram_argument(user: tuple[str, str]) -> str:
    return f"{MECHANISM}=[name={user[0]},password={user[1]}]"


def _kelp_format(log_dir: Path, users: tuple[tuple[str, str], ...]) -> None:
    """`kelp storage format --add-scram ...` for a broker that will run on `log_dir` (bounded)."""
    cmd = [sys.executable, "-m", "kelp.cli.main", "storage", "format", "--log-dirs", str(log_dir)]
    for user in users:
        cmd += ["--add-scram", _scram_argument(user)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"kelp storage format failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")


def kelp_settings(pki: Any, *, listeners: tuple[str, ...], authorizer: bool = False) -> dict[str, object]:
    """A Kelp broker's `--set` settings: these listeners on ephemeral loopback ports, PLAINTEXT between brokers."""
    settings: dict[str, object] = {
        "listeners": ",".join(f"{name}://127.0.0.1:0" for name in ("PLAINTEXT", *listeners)),
        "inter.broker.listener.name": "PLAINTEXT",
    }
    if any(name.endswith("SSL") for name in listeners):
        settings.update({"ssl.keystore.location": str(pki.broker_file), "ssl.truststore.location": str(pki.ca_file)})
    for name in listeners:
        if name.startswith("SASL_"):
            settings[f"listener.name.{name.lower()}.sasl.enabled.mechanisms"] = MECHANISM
    if authorizer:
        settings.update({"authorizer.class.name": AUTHORIZER, "super.users": f"User:{ADMIN[0]}"})
    return settings


def kafka_security(pki: Any) -> tuple[dict[str, str], dict[str, object], tuple[str, ...]]:
    """Apache Kafka's (extra listeners, server.properties, storage format arguments) for the same security."""
    listeners = {"SSL": "SSL", "SASL_SSL": "SASL_SSL"}
    properties: dict[str, object] = {
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker_file),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file),
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": MECHANISM,
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": f"{SCRAM_MODULE} required;",
    }
    return listeners, properties, ("--add-scram", _scram_argument(USER), "--add-scram", _scram_argument(ADMIN))


def _endpoints(name: str, listeners: Mapping[str, str], modes: list[str], ca_file: Path,
               pids: Callable[[], list[int]]) -> list[Endpoint]:
    return [Endpoint(name, mode, listeners[mode], librdkafka_config(_java_properties(mode, ca_file)),
                     listeners["PLAINTEXT"], {}, pids) for mode in modes]


def _acl_bindings(count: int) -> list[Any]:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    others = [AclBinding(ResourceType.TOPIC, f"other-topic-{i}", ResourcePatternType.LITERAL, f"User:user-{i % 50}",
                         "*", AclOperation.WRITE, AclPermissionType.ALLOW) for i in range(count - 1)]
    mine = AclBinding(ResourceType.TOPIC, ACL_PREFIX, ResourcePatternType.PREFIXED, f"User:{USER[0]}", "*",
                      AclOperation.WRITE, AclPermissionType.ALLOW)
    return [*others, mine]


def _create_acls(bootstrap: str, config: Mapping[str, str], count: int) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **config})
    bindings = _acl_bindings(count)
    for at in range(0, len(bindings), 500):
        for future in admin.create_acls(bindings[at:at + 500], request_timeout=60).values():
            future.result(60)


def measure_acls(base: Endpoint, acl: Endpoint, *, records: int, size: int, runs: int) -> dict[str, Any]:
    """alice's acks=1 produce on a broker without an authorizer and on one with, alternating; medians."""
    for ep in (base, acl):
        _produce_once(ep, f"{ACL_PREFIX}warm-{uuid.uuid4().hex[:6]}", count=min(WARMUP_RECORDS, records), size=size,
                      acks=1)
    got: dict[str, list[Sample]] = {"none": [], "acls": []}
    for run in range(runs):
        order = [("none", base), ("acls", acl)]
        for name, ep in order if run % 2 == 0 else order[::-1]:
            got[name].append(_produce_once(ep, f"{ACL_PREFIX}{run}-{uuid.uuid4().hex[:6]}", count=records,
                                           size=size, acks=1))
    none = _summary(got["none"], records=records, size=size)
    acls = _summary(got["acls"], records=records, size=size)
    paired = [100 * (a.seconds / n.seconds - 1) for n, a in zip(got["none"], got["acls"], strict=True)]
    return {"none": none, "acls": acls, "delta_pct": 100 * (acls["seconds"] / none["seconds"] - 1),
            "cpu_delta_pct": (100 * (acls["broker_cpu_s_per_gb"] / none["broker_cpu_s_per_gb"] - 1)
                              if acls["broker_cpu_s_per_gb"] and none["broker_cpu_s_per_gb"] else None),
            "paired_delta_pct": [round(p, 1) for p in paired]}


def _pids_of(pid: int) -> Callable[[], list[int]]:
    return lambda: [pid]


def run_acl_cost(pki: Any, work: Path, *, acls: int, records: int, size: int, runs: int) -> dict[str, Any]:
    """Two Kelp brokers alike but for the authorizer (the same SASL_PLAINTEXT listener, SCRAM users, super
    user): alice's acks=1 produce on each, alternating; the second holds `acls` ACLs, one of them hers."""
    admin = librdkafka_config(_java_properties("SASL_PLAINTEXT", pki.ca_file, ADMIN))
    user = librdkafka_config(_java_properties("SASL_PLAINTEXT", pki.ca_file))
    endpoints = []
    with ExitStack() as stack:
        for name, authorizer in (("none", False), ("acls", True)):
            log_dir = work / f"kelp-acl-{name}"
            log_dir.mkdir(parents=True, exist_ok=True)
            _kelp_format(log_dir, (USER, ADMIN))
            settings = kelp_settings(pki, listeners=("SASL_PLAINTEXT",), authorizer=authorizer)
            settings["super.users"] = f"User:{ADMIN[0]}"
            broker = stack.enter_context(BenchBroker(log_dir, settings=settings))
            assert broker.proc is not None
            pid = broker.proc.pid
            address = broker.listeners["SASL_PLAINTEXT"]
            endpoints.append(Endpoint(f"kelp-{name}", "SASL_PLAINTEXT", address, user, address, admin,
                                      _pids_of(pid)))
        _create_acls(endpoints[1].bootstrap, admin, acls)
        return measure_acls(endpoints[0], endpoints[1], records=records, size=size, runs=runs)


def run(*, modes: list[str], records: int, consume_records: int, size: int, runs: int, work: Path,
        kafka_version: str | None, acls: int = 1000, acl_runs: int = 5) -> dict[str, Any]:
    """Kelp (and Kafka unless `kafka_version` is None) over each of `modes`; the ACL cost unless `acls` is 0."""
    from .pki import make_pki

    load0 = os.getloadavg()
    modes = [m.upper() for m in modes]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown security mode(s) {', '.join(unknown)}; expected {', '.join(MODES)}")
    pki = make_pki(work / "pki")
    result: dict[str, Any] = {"size": size, "records": records, "consume_records": consume_records, "runs": runs,
                              "modes": modes, "cpus": os.cpu_count(), "tls": {}, "acl": None}
    kelp_dir = work / "kelp-secure"
    kelp_dir.mkdir(parents=True, exist_ok=True)
    _kelp_format(kelp_dir, (USER, ADMIN))
    listeners = ("SSL", "SASL_SSL")
    kafka = None
    with BenchBroker(kelp_dir, settings=kelp_settings(pki, listeners=listeners)) as kelp:
        assert kelp.proc is not None
        kelp_proc = kelp.proc
        endpoints = _endpoints("kelp", kelp.listeners, modes, pki.ca_file, lambda: [kelp_proc.pid])
        try:
            if kafka_version is not None:
                from ..kafka_ref import KafkaCluster

                extra, properties, format_args = kafka_security(pki)
                kafka = KafkaCluster(work / "kafka-secure", version=kafka_version, listeners=extra,
                                     properties=properties, format_args=format_args)
                kafka.start()
                kafka_listeners = {m: kafka.listener_bootstrap(m) for m in ("PLAINTEXT", *extra)}
                kafka_eps = _endpoints("kafka", kafka_listeners, modes, pki.ca_file,
                                       lambda: kafka.pids if kafka else [])
                endpoints = [e for pair in zip(endpoints, kafka_eps, strict=True) for e in pair]
            consume_topics = {}
            for ep in endpoints:
                if ep.broker not in consume_topics:
                    topic = consume_topics[ep.broker] = f"sec-consume-{size}"
                    clients.create_topic(ep.admin_bootstrap, topic)
                    clients.produce(ep.admin_bootstrap, topic, count=consume_records, size=size)
            result["tls"]["kelp"] = negotiated_tls(kelp.listeners["SSL"], pki.ca_file)
            if kafka is not None:
                result["tls"]["kafka"] = negotiated_tls(kafka.listener_bootstrap("SSL"), pki.ca_file)
            result["rows"] = measure(endpoints, records=records, consume_records=consume_records, size=size,
                                     runs=runs, consume_topics=consume_topics)
        finally:
            if kafka is not None:
                kafka.stop()
    if acls > 0:
        result["acl"] = {"acl_count": acls, "runs": acl_runs,
                         **run_acl_cost(pki, work, acls=acls, records=records, size=size, runs=acl_runs)}
    result["load_average"] = [round(load0[0], 2), round(os.getloadavg()[0], 2)]
    return result


def check_reachable(bootstrap: str, config: Mapping[str, str], *, timeout_s: float = 30.0) -> int:
    """Brokers a Metadata request through these settings lists; RuntimeError at the first authentication or
    TLS error librdkafka reports (instead of every later call waiting out its timeout), or after `timeout_s`."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[KafkaError] = []
    settings: dict[str, Any] = {"bootstrap.servers": bootstrap, **config, "error_cb": errors.append}
    admin = AdminClient(settings)
    fatal = (KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return len(admin.list_topics(timeout=1.0).brokers)
        except KafkaException as exc:
            last: object = exc
        admin.poll(0)  # serves error_cb
        refused = [e for e in errors if e.code() in fatal]
        if refused:
            raise RuntimeError(f"{bootstrap}: {refused[-1].str()} (check the client properties)")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{bootstrap}: no Metadata answer within {timeout_s:.0f} s "
                               f"({errors[-1].str() if errors else last})")


def run_external(bootstrap: str, props: Mapping[str, str], *, records: int, consume_records: int, size: int,
                 runs: int) -> dict[str, Any]:
    """The produce/consume workload against an existing cluster, reached with these client properties."""
    load0 = os.getloadavg()
    config = librdkafka_config(props)
    check_reachable(bootstrap, config)
    mode = config["security.protocol"]
    ep = Endpoint("cluster", mode, bootstrap, config, bootstrap, config, None, replication_factor=-1)
    label = f"kelp-bench-{uuid.uuid4().hex[:8]}"
    consume_topic = f"{label}-consume"
    clients.create_topic(bootstrap, consume_topic, replication_factor=-1, config=config)
    try:
        clients.produce(bootstrap, consume_topic, count=consume_records, size=size, config=config)
        rows = measure([ep], records=records, consume_records=consume_records, size=size, runs=runs,
                       consume_topics={"cluster": consume_topic}, label=label)
    finally:
        clients.delete_topic(bootstrap, consume_topic, config=config)
    return {"bootstrap": bootstrap, "size": size, "records": records, "consume_records": consume_records,
            "runs": runs, "modes": [mode], "cpus": os.cpu_count(), "tls": {}, "acl": None, "rows": rows,
            "load_average": [round(load0[0], 2), round(os.getloadavg()[0], 2)]}


def main(argv: list[str] | None = None) -> int:
    return section_main("security", __doc__ or "", argv, add_arguments=add_arguments, run_from_args=run_from_args,
                        report=print_report, workdir=False)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options `python -m bench.security` and `python -m bench` share."""
    p.add_argument("--security", default=",".join(m.lower() for m in MODES),
                   help="listeners measured, Kelp beside Kafka: plaintext,ssl,sasl_ssl (all three; empty skips)")
    p.add_argument("--security-records", type=int, default=200_000,
                   help="records produced per run of each security case (200000)")
    p.add_argument("--security-consume-records", type=int, default=500_000,
                   help="records consumed per run of each security case (500000)")
    p.add_argument("--security-size", type=int, default=1024, help="record value size, bytes (1024)")
    p.add_argument("--acl-count", type=int, default=1000,
                   help="ACLs held by the authorizer of the ACL cost case (1000; 0 skips it)")
    p.add_argument("--acl-runs", type=int, default=5, help="alternating runs of the ACL cost case (5)")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT",
                   help="measure this existing cluster (with --client-config / -X) instead of starting brokers; "
                        "nothing else runs")
    p.add_argument("--client-config", type=Path, metavar="FILE",
                   help="Kafka client properties for --bootstrap-server: security.protocol, sasl.mechanism, "
                        "sasl.jaas.config or sasl.username/sasl.password, ssl.truststore.location or "
                        "ssl.ca.location, ...")
    p.add_argument("-X", "--client-property", action="append", metavar="KEY=VALUE", default=[],
                   help="a client property (repeatable; after --client-config's)")


def run_from_args(args: argparse.Namespace, *, kafka_version: str | None) -> dict[str, Any] | None:
    """The security section as the options say: an existing cluster, the brokers this starts, or nothing."""
    props = read_client_properties(args.client_config, args.client_property)
    bootstrap = args.bootstrap_server or props.pop("bootstrap.servers", None)
    runs = max(1, args.runs)
    if bootstrap:
        return run_external(bootstrap, props, records=args.security_records,
                            consume_records=args.security_consume_records, size=args.security_size, runs=runs)
    if props:
        raise ValueError("--client-config / -X are for an existing cluster: give --bootstrap-server (or "
                         "bootstrap.servers in the file)")
    modes = [m.strip() for m in args.security.split(",") if m.strip()]
    if not modes:
        return None
    with tempfile.TemporaryDirectory(prefix="kelp-bench-security-") as tmp:
        return run(modes=modes, records=args.security_records, consume_records=args.security_consume_records,
                   size=args.security_size, runs=runs, work=Path(tmp), kafka_version=kafka_version,
                   acls=args.acl_count, acl_runs=max(1, args.acl_runs))


if __name__ == "__main__":
    sys.exit(main())
