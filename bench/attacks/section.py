"""Attacks (issue 33): honest clients' latency and loss beside each attack of the issue, Kelp beside Apache Kafka.

Why: one client must not stop a broker. For each attack the issue lists, an honest idempotent acks=all producer
and a consumer group (bench/attacks/honest.py: 1 KiB records at a fixed rate, produce and end-to-end latency per record)
run beside the attacker (bench/attacks/attackers.py, in a process of its own: its threads must not share the GIL with
the honest clients' callbacks that timestamp every record) against a broker with a SASL_PLAINTEXT listener
(SCRAM-SHA-512) and the StandardAuthorizer on: the honest user alice may produce and consume her topic; the
attacker mallory is an authenticated user who may also write that topic (items 9 and 10 need a writer),
describe every transactional id (item 1) and use groups named mallory*; the unauthenticated floods need no
identity. `--attack-txn-ids`
transactional ids of 29 characters exist for the pattern to run against.

The honest clients run once through every phase of a broker: unattacked first, each attack for `seconds`
(with a gap between, the attacker stopped), unattacked again last. A phase's figures are those of the records
sent within it: produce p99 (send to acknowledgement) and end-to-end p99 (send to the group's receipt), each over
the better of the two unattacked phases' (goal: at most 2x), and acknowledged records the
group never received (goal: none, over the whole run as well). The broker's CPU over the phase and what the
attacker got back (answers by error code or HTTP status, connections the broker closed) are printed beside.

Apache Kafka 4.4.0 (bench/kafka_ref.py, the same listener, users and ACLs; its PLAINTEXT and CONTROLLER listeners'
ANONYMOUS principal a super user, as its inter-broker traffic needs) takes the attacks it has a surface for: the
Kafka-protocol ones (items 1, 2, 5, 9, 10). Items 3, 4, 6, 7 and 8 attack Kelp's HTTP API; Kafka has none, and
the report says so. The machine's own limit here is the unattacked phase of the same broker in the same run.

`python -m bench.attacks` runs this alone; `make bench` runs it last (`--attacks`, empty skips;
`--attack-seconds`, `--attack-rate`).

It must never report an attacked figure without the same broker's unattacked one from the same run, nor count a
record acknowledged before its delivery report or delivered before the group received it.
"""

from __future__ import annotations

import argparse
import os
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Mapping

from .. import probe, section_main
from ..broker import BenchBroker
from ..security.section import (
    ADMIN,
    MECHANISM,
    SCRAM_MODULE,
    USER,
    _java_properties,
    _kelp_format,
    _scram_argument,
    kelp_settings,
    librdkafka_config,
)
from . import attackers
from .honest import HonestClients

__all__ = ["run", "print_report", "add_arguments", "run_from_args", "main"]

MALLORY = ("mallory", "mallory-secret")
TOPIC = "honest"
SECRET_TOPIC = "secret"  # nobody but admin may describe it
GROUP = "honest-group"
LISTENER = "SASL_PLAINTEXT"
GOAL_RATIO = 2.0
TXN_ID_PAD = "x" * 20
SUPER_USERS = f"User:{ADMIN[0]};User:ANONYMOUS"  # ANONYMOUS: the inter-broker PLAINTEXT listener's principal


def _security(user: tuple[str, str]) -> Any:
    from kelp.kafka_client.sasl import SaslCredentials
    from kelp.kafka_client.security import ConnectionSecurity

    return ConnectionSecurity(None, SaslCredentials(MECHANISM, user[0], user[1]))


def _client(user: tuple[str, str]) -> dict[str, str]:
    return librdkafka_config(_java_properties(LISTENER, Path("/nonexistent"), user))


def _acls() -> list[Any]:
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    allow = AclPermissionType.ALLOW
    lit, pre = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    alice, mallory = f"User:{USER[0]}", f"User:{MALLORY[0]}"
    out = [AclBinding(ResourceType.TOPIC, TOPIC, lit, alice, "*", op, allow)
           for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)]
    out.append(AclBinding(ResourceType.GROUP, GROUP, lit, alice, "*", AclOperation.READ, allow))
    out.append(AclBinding(ResourceType.TOPIC, TOPIC, lit, mallory, "*", AclOperation.WRITE, allow))
    out.append(AclBinding(ResourceType.TRANSACTIONAL_ID, "*", lit, mallory, "*", AclOperation.DESCRIBE, allow))
    out.append(AclBinding(ResourceType.GROUP, "mallory", pre, mallory, "*", AclOperation.READ, allow))
    return out


def prepare(bootstrap: str, *, txn_ids: int) -> None:
    """The honest and the secret topics, the ACLs and `txn_ids` transactional ids (each initialised once), as
    admin."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from .. import clients

    admin_config = _client(ADMIN)
    clients.create_topic(bootstrap, TOPIC, config=admin_config)
    clients.create_topic(bootstrap, SECRET_TOPIC, config=admin_config)
    admin = AdminClient({"bootstrap.servers": bootstrap, **admin_config})
    for future in admin.create_acls(_acls(), request_timeout=60).values():
        future.result(60)
    for i in range(txn_ids):
        producer = Producer({"bootstrap.servers": bootstrap, **admin_config,
                             "transactional.id": f"txn-{i:04d}-{TXN_ID_PAD}"})
        producer.init_transactions(60)
        producer.flush(10)


def run_broker(name: str, *, bootstrap: str, http_url: str | None, pids: Callable[[], list[int]], work: Path,
               attacks: list[str], seconds: float, gap_s: float, rate: float, txn_ids: int) -> dict[str, Any]:
    """Every phase against one running broker, the honest clients running throughout."""
    prepare(bootstrap, txn_ids=txn_ids)
    target = attackers.Target(name, bootstrap, http_url, _security(MALLORY), MALLORY, USER[0], TOPIC,
                              SECRET_TOPIC)
    honest = HonestClients({"bootstrap.servers": bootstrap, **_client(USER)}, TOPIC, GROUP, work / "honest",
                           rate=rate)
    honest.start()
    phases: list[dict[str, Any]] = []
    try:
        time.sleep(gap_s)  # the clients' first records (connections, the idempotent producer's id) before any phase
        for attack in ["unattacked", *attacks, "unattacked, again"]:
            # the attacker's process starts (imports done) before the phase's clock does
            attacker = None if attack.startswith("unattacked") else attackers.Attacker(attack, target)
            cpu0 = probe.cpu_seconds(pids())
            t0 = time.monotonic_ns()
            if attacker is None:
                time.sleep(seconds)  # the phase's measurement window
                got: dict[str, Any] = {"got": {}}
            else:
                got = attacker.run(seconds)
            t1 = time.monotonic_ns()
            phases.append({"attack": attack, "start_ns": t0, "end_ns": t1, "seconds": (t1 - t0) / 1e9,
                           "broker_cpu_pct": 100 * (probe.cpu_seconds(pids()) - cpu0) / ((t1 - t0) / 1e9), **got})
            attackers.wait_listening(bootstrap)
            time.sleep(gap_s)  # between phases: what one attack leaves behind is not the next one's
    finally:
        run = honest.stop()
    for phase in phases:
        phase.update(run.window(phase.pop("start_ns"), phase.pop("end_ns")))
    # The reference: the better of the two unattacked phases (the first and the last), so noise that made one of
    # them slow does not flatter the attacked ones.
    base = {kind: min(phases[0][kind]["p99_ms"], phases[-1][kind]["p99_ms"]) for kind in ("produce", "end_to_end")}
    for phase in phases:
        for kind in ("produce", "end_to_end"):
            phase[kind]["vs_unattacked"] = phase[kind]["p99_ms"] / base[kind]
    return {"phases": phases, "sent": run.sent, "acked": len(run.acked), "received": len(run.received),
            "lost": len(run.lost), "producer_errors": run.producer_errors, "consumer_errors": run.consumer_errors}


def _kelp(stack: ExitStack, work: Path, pki: Any) -> tuple[str, str, Callable[[], list[int]]]:
    log_dir = work / "kelp"
    log_dir.mkdir(parents=True, exist_ok=True)
    _kelp_format(log_dir, (USER, ADMIN, MALLORY))
    settings = kelp_settings(pki, listeners=(LISTENER,), authorizer=True)
    settings["super.users"] = SUPER_USERS  # the PLAINTEXT listener's ANONYMOUS: brokers (and the REST consumers)
    broker = stack.enter_context(BenchBroker(log_dir, settings=settings))
    assert broker.proc is not None
    proc = broker.proc
    return broker.listeners[LISTENER], broker.http_url, lambda: [proc.pid] if proc.poll() is None else []


def _kafka(stack: ExitStack, work: Path, version: str) -> tuple[str, Callable[[], list[int]]]:
    from ..kafka_ref import KafkaCluster

    properties: Mapping[str, object] = {
        f"listener.name.{LISTENER.lower()}.sasl.enabled.mechanisms": MECHANISM,
        f"listener.name.{LISTENER.lower()}.{MECHANISM.lower()}.sasl.jaas.config": f"{SCRAM_MODULE} required;",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": SUPER_USERS,
    }
    fmt = tuple(a for user in (USER, ADMIN, MALLORY) for a in ("--add-scram", _scram_argument(user)))
    kafka = KafkaCluster(work / "kafka", version=version, listeners={LISTENER: LISTENER}, properties=properties,
                         format_args=fmt)
    stack.callback(kafka.stop)
    try:
        kafka.start()
    except (FileNotFoundError, RuntimeError) as exc:
        raise RuntimeError(f"{exc}\n(`--no-kafka` runs without Apache Kafka)") from None
    return kafka.listener_bootstrap(LISTENER), lambda: kafka.pids


def run(*, attacks: list[str], seconds: float, gap_s: float, rate: float, txn_ids: int, work: Path,
        kafka_version: str | None) -> dict[str, Any]:
    """Kelp, then Kafka (unless `kafka_version` is None) with the attacks it has a surface for; each alone."""
    from ..security.pki import make_pki

    unknown = [a for a in attacks if a not in attackers.ATTACKS]
    if unknown:
        raise ValueError(f"unknown attack(s) {', '.join(unknown)}; expected {', '.join(attackers.ATTACKS)}")
    ordered = [a for a in attackers.ATTACKS if a in attacks]
    load0 = os.getloadavg()[0]
    pki = make_pki(work / "pki")
    out: dict[str, Any] = {"seconds": seconds, "rate": rate, "size": 1024, "txn_ids": txn_ids, "brokers": {},
                           "attacks": {a: attackers.ATTACKS[a][0] for a in ordered},
                           "kafka_applies": sorted(attackers.KAFKA_APPLIES & set(ordered)), "kafka": False}
    with ExitStack() as stack:
        bootstrap, http_url, pids = _kelp(stack, work, pki)
        out["brokers"]["kelp"] = run_broker("kelp", bootstrap=bootstrap, http_url=http_url, pids=pids,
                                            work=work / "kelp-run", attacks=ordered, seconds=seconds, gap_s=gap_s,
                                            rate=rate, txn_ids=txn_ids)
    if kafka_version is not None:
        with ExitStack() as stack:
            bootstrap, pids = _kafka(stack, work, kafka_version)
            out["brokers"]["kafka"] = run_broker(
                "kafka", bootstrap=bootstrap, http_url=None, pids=pids, work=work / "kafka-run",
                attacks=[a for a in ordered if a in attackers.KAFKA_APPLIES], seconds=seconds, gap_s=gap_s,
                rate=rate, txn_ids=txn_ids)
        out["kafka"] = True
    out.update(cpus=os.cpu_count(), load_average=[round(load0, 2), round(os.getloadavg()[0], 2)])
    return out


def _got(phase: dict[str, Any]) -> str:
    if "error" in phase:
        return f"ATTACK FAILED: {phase['error']}"
    return ", ".join(f"{k}: {v:,}" for k, v in sorted(phase["got"].items(), key=lambda kv: -kv[1])[:4]) or "-"


def print_report(res: dict[str, Any]) -> None:
    from kelp.cli.output import print_table

    print(f"\nattacks (issue 33): an idempotent acks=all producer ({res['rate']:,.0f} records/s of {res['size']:,} B) "
          f"and a consumer group beside each attack for {res['seconds']:.0f} s; SASL_PLAINTEXT (SCRAM-SHA-512), "
          f"StandardAuthorizer, {res['txn_ids']:,} transactional ids; each broker alone")
    if not res["kafka"]:
        print("Apache Kafka reference skipped (--no-kafka)")
    rows = []
    for name, side in res["brokers"].items():
        for ph in side["phases"]:
            label = res["attacks"].get(ph["attack"], ph["attack"])
            rows.append([label, name, f"{ph['produce']['p50_ms']:.1f} / {ph['produce']['p99_ms']:.1f}",
                         f"{ph['produce']['vs_unattacked']:.2f}x",
                         f"{ph['end_to_end']['p50_ms']:.1f} / {ph['end_to_end']['p99_ms']:.1f}",
                         f"{ph['end_to_end']['vs_unattacked']:.2f}x", f"{ph['produce']['records']:,}",
                         f"{ph['lost']:,}", f"{ph['broker_cpu_pct']:.0f}", _got(ph)])
    print_table(rows, ["ATTACK", "BROKER", "PRODUCE p50 / p99 ms", "p99 / UNATTACKED", "END-TO-END p50 / p99 ms",
                       "p99 / UNATTACKED", "ACKED", "LOST", "BROKER CPU %", "THE ATTACKER GOT"])
    not_kafka = [a for a in res["attacks"] if a not in res["kafka_applies"]]
    if res["kafka"] and not_kafka:
        print("not run against Kafka (Kelp's HTTP API; Kafka has none): "
              + "; ".join(res["attacks"][a] for a in not_kafka))
    for name, side in res["brokers"].items():
        worst = max((ph for ph in side["phases"][1:-1]), key=lambda ph: max(
            ph["produce"]["vs_unattacked"], ph["end_to_end"]["vs_unattacked"]))
        ratio = max(worst["produce"]["vs_unattacked"], worst["end_to_end"]["vs_unattacked"])
        ok = ratio <= GOAL_RATIO
        label = res["attacks"].get(worst["attack"], worst["attack"])
        print(f"{name}: goal honest p99 within {GOAL_RATIO:.0f}x of unattacked under every attack: "
              f"{'met' if ok else 'MISSED'} (worst {ratio:.2f}x, {label})")
        print(f"{name}: goal nothing acknowledged lost: {'met' if side['lost'] == 0 else 'MISSED'} "
              f"({side['acked']:,} acknowledged of {side['sent']:,} sent, {side['received']:,} received by the group, "
              f"{side['lost']:,} lost; producer errors {len(side['producer_errors'])})")
    print(f"load average {res['load_average'][0]} before, {res['load_average'][1]} after, {res['cpus']} CPUs; "
          "p99 / UNATTACKED is over the better of the two unattacked phases (first and last)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options `python -m bench.attacks` and `python -m bench` share."""
    p.add_argument("--attacks", default=",".join(attackers.ATTACKS),
                   help=f"attacks run, in the issue's order but the regex last ({','.join(attackers.ATTACKS)}; "
                        "empty skips)")
    p.add_argument("--attack-seconds", type=float, default=10.0, help="seconds of each phase (10)")
    p.add_argument("--attack-gap-seconds", type=float, default=3.0, help="seconds between phases (3)")
    p.add_argument("--attack-rate", type=float, default=500.0,
                   help="the honest producer's records/s of 1 KiB (500)")
    p.add_argument("--attack-txn-ids", type=int, default=50,
                   help="transactional ids present for the pattern to run against (50)")


def run_from_args(args: argparse.Namespace, *, work: Path, kafka_version: str | None) -> dict[str, Any] | None:
    attacks = [a.strip() for a in args.attacks.split(",") if a.strip()]
    if not attacks:
        return None
    if args.attack_seconds <= 0 or args.attack_rate <= 0:
        raise ValueError("--attack-seconds and --attack-rate must be positive")
    if args.attack_txn_ids < 0:
        raise ValueError("--attack-txn-ids must be at least 0")
    return run(attacks=attacks, seconds=args.attack_seconds, gap_s=max(0.0, args.attack_gap_seconds),
               rate=args.attack_rate, txn_ids=args.attack_txn_ids, work=work, kafka_version=kafka_version)


def main(argv: list[str] | None = None) -> int:
    return section_main("attacks", __doc__ or "", argv, add_arguments=add_arguments, run_from_args=run_from_args,
                        report=print_report)


if __name__ == "__main__":
    raise SystemExit(main())
