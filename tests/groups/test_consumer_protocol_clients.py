"""KIP-848 end to end (issue 36): Kafka's Java consumer (kafka-clients 4.3.1, through Kafka's VerifiableConsumer)
and librdkafka (confluent-kafka) with `group.protocol=consumer` against one Kelp broker.

Three members join, one leaves, another joins: partitions move incrementally, never held by two members at
once (each partition's ownership intervals, from the consumers' own assigned/revoked callbacks, do not
overlap), no record is consumed twice and none is lost; after every member is gone, a new one resumes from the
committed offsets. Commits carry the member epoch (OffsetCommit v9+; the Java consumer commits and fetches by topic id,
v10, test_offsets_v10_java.py). The Java tier skips only without `java`
(`make test` fetches the jars first, `kelp.kafka_tools`).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import threading
import time
from typing import Callable, Iterator

import pytest

from kelp import kafka_tools
from tests.support.broker_process import BrokerProcess

from .procs import ConsumerProc, wait_all
from .test_clients_share_partitions import create_topic

VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"
SETTINGS = {
    "offsets.topic.num.partitions": 3,
    "group.consumer.session.timeout.ms": 6000,
    "group.consumer.heartbeat.interval.ms": 500,
}
PARTITIONS = 6
WAIT_S = 60.0


@pytest.fixture(scope="module")
def kip848_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-kip848"), settings=SETTINGS)
    bp.start()
    yield bp
    bp.kill()


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(start, start + count):
        p.produce(topic, key=str(i).encode(), value=str(i).encode())
    assert p.flush(30) == 0


class JavaConsumer:
    """Kafka's VerifiableConsumer (kafka-clients 4.3.1) with group.protocol=consumer (or `protocol`); its JSON events
    collected."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str, protocol: str = "consumer") -> None:
        self.name = name
        self.events: list[dict] = []
        self.stderr: list[str] = []
        self._cond = threading.Condition()
        cmd = kafka_tools.java_command(VERIFIABLE_CONSUMER, "--bootstrap-server", bootstrap, "--topic", topic,
                                       "--group-id", group, "--group-protocol", protocol,
                                       "--reset-policy", "earliest", "--verbose")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr or []), daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout or []:
            if line.startswith("{"):
                with self._cond:
                    self.events.append(json.loads(line))
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def owned(self) -> set[int]:
        out: set[int] = set()
        with self._cond:
            for e in self.events:
                if e["name"] == "partitions_assigned":
                    out |= {p["partition"] for p in e["partitions"]}
                elif e["name"] in ("partitions_revoked", "partitions_lost"):
                    out -= {p["partition"] for p in e["partitions"]}
        return out

    def records(self) -> list[tuple[int, int]]:
        with self._cond:
            return [(e["partition"], e["offset"]) for e in self.events if e["name"] == "record_data"]

    def intervals(self) -> dict[int, list[tuple[int, int]]]:
        """Per partition, the [assigned, revoked] times (ms) of this consumer's ownership (revoked: now if held)."""
        out: dict[int, list[tuple[int, int]]] = {}
        since: dict[int, int] = {}
        with self._cond:
            for e in self.events:
                for p in (x["partition"] for x in e.get("partitions", []) if "partition" in x):
                    if e["name"] == "partitions_assigned":
                        since[p] = e["timestamp"]
                    elif e["name"] in ("partitions_revoked", "partitions_lost") and p in since:
                        out.setdefault(p, []).append((since.pop(p), e["timestamp"]))
        now = int(time.time() * 1000)
        for p, start in since.items():
            out.setdefault(p, []).append((start, now))
        return out

    def failed_commits(self) -> list[dict]:
        with self._cond:
            return [e for e in self.events if e["name"] == "offsets_committed" and not e["success"]]

    def stop(self) -> None:
        """SIGTERM: the tool closes its consumer (revoking, committing, leaving with epoch -1)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise AssertionError(f"{self.name} did not close within 30 s: {''.join(self.stderr)[-2000:]}") from None


def groups_command(bootstrap: str, *args: str) -> str:
    """Kafka's kafka-consumer-groups (ConsumerGroupCommand); its standard output."""
    done = subprocess.run(kafka_tools.java_command("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                                                   "--bootstrap-server", bootstrap, *args),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def wait_for(consumers: list, predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            state = {c.name: (sorted(c.owned()), len(c.records()), c.proc.poll(), "".join(c.stderr)[-600:])
                     for c in consumers}
            raise AssertionError(f"timed out after {WAIT_S}s waiting for {what}: {state}")
        for c in consumers:
            with c._cond:
                c._cond.wait(0.05)


def split(consumers: list[JavaConsumer]) -> bool:
    """Every partition owned by exactly one of `consumers`, each owning some."""
    owned = [c.owned() for c in consumers]
    return all(owned) and sum(len(o) for o in owned) == PARTITIONS and set().union(*owned) == set(range(PARTITIONS))


@pytest.fixture(scope="module")
def java() -> None:
    if shutil.which("java") is None:
        pytest.skip("java is not installed: Kafka's Java consumer cannot run")
    kafka_tools.fetch()  # a no-op after `make test`'s bootstrap


@pytest.mark.timeout(420)
def test_java_consumers_rebalance_incrementally_without_duplicates_or_loss(kip848_broker, java) -> None:
    bs, topic, group = kip848_broker.bootstrap, "kip848-java", "kip848-java-g"
    create_topic(bs, topic, PARTITIONS)
    kafka_tools.ensure_archive(bs)
    produce(bs, topic, 0, 600)
    everyone: list[JavaConsumer] = []
    try:
        c1, c2, c3 = (JavaConsumer(bs, topic, group, f"c{i}") for i in (1, 2, 3))
        everyone += [c1, c2, c3]
        wait_for(everyone, lambda: split([c1, c2, c3]) and sum(len(c.records()) for c in everyone) >= 600,
                 "three members splitting the six partitions and the first 600 records consumed")
        # Kafka's kafka-consumer-groups sees a consumer-protocol group (ListGroups v5, ConsumerGroupDescribe).
        listed = groups_command(bs, "--list", "--type")
        assert re.search(rf"^{group}\s+Consumer\s*$", listed, re.M), listed
        members = groups_command(bs, "--describe", "--group", group, "--members")
        assert len([line for line in members.splitlines() if line.startswith(group)]) == 3, members
        c3.stop()  # a member goes: its partitions move to the others
        wait_for(everyone, lambda: split([c1, c2]), "the two remaining members owning all six partitions")
        produce(bs, topic, 600, 600)
        wait_for(everyone, lambda: sum(len(c.records()) for c in everyone) >= 1200, "1200 records consumed")
        before = {c.name: c.owned() for c in (c1, c2)}
        c4 = JavaConsumer(bs, topic, group, "c4")  # a member comes: it takes partitions from the others only
        everyone.append(c4)
        wait_for(everyone, lambda: split([c1, c2, c4]), "three members splitting the partitions again")
        assert c1.owned() <= before["c1"] and c2.owned() <= before["c2"], "incremental: the others only gave up"
        produce(bs, topic, 1200, 600)
        wait_for(everyone, lambda: sum(len(c.records()) for c in everyone) >= 1800, "1800 records consumed")
        for c in (c1, c2, c4):
            c.stop()
        # Commits survive: a new member resumes where the group left off, and reads only what is new.
        produce(bs, topic, 1800, 300)
        c5 = JavaConsumer(bs, topic, group, "c5")
        everyone.append(c5)
        wait_for(everyone, lambda: len(c5.records()) >= 300, "the resumed member to consume the 300 new records")
        c5.stop()
    finally:
        for c in everyone:
            if c.proc.poll() is None:
                c.proc.kill()
    consumed = [r for c in everyone for r in c.records()]
    assert len(consumed) == len(set(consumed)) == 2100, "a record consumed twice, or one lost"
    per_partition: dict[int, list[int]] = {}
    for p, o in consumed:
        per_partition.setdefault(p, []).append(o)
    assert all(sorted(os) == list(range(len(os))) for os in per_partition.values()), "a gap in some partition"
    assert not [c.failed_commits() for c in everyone if c.failed_commits()]
    for p in range(PARTITIONS):
        spans = sorted(span for c in everyone for span in c.intervals().get(p, []))
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert end <= start, f"partition {p} owned by two members at once: {spans}"


@pytest.mark.timeout(300)
def test_librdkafka_consumers_rebalance_incrementally_and_resume(kip848_broker) -> None:
    bs, topic, group = kip848_broker.bootstrap, "kip848-rdkafka", "kip848-rdkafka-g"
    create_topic(bs, topic, PARTITIONS)
    produce(bs, topic, 0, 600)
    procs: list[ConsumerProc] = []

    def start() -> ConsumerProc:
        c = ConsumerProc(client="confluent", bootstrap=bs, group=group, topic=topic, commit=True,
                         group_protocol="consumer")
        procs.append(c)
        return c

    def owned_split(cs: list[ConsumerProc]) -> bool:
        parts = [set(c.assignment) for c in cs]
        return all(parts) and sum(map(len, parts)) == PARTITIONS and set().union(*parts) == set(range(PARTITIONS))

    try:
        a, b, c = start(), start(), start()
        wait_all(procs, lambda: owned_split([a, b, c]) and sum(len(p.records()) for p in procs) >= 600,
                 timeout=WAIT_S, what="three librdkafka members splitting six partitions, 600 records consumed")
        c.terminate()
        wait_all(procs, lambda: owned_split([a, b]), timeout=WAIT_S, what="two members owning all partitions")
        produce(bs, topic, 600, 300)
        wait_all(procs, lambda: sum(len(p.records()) for p in procs) >= 900, timeout=WAIT_S, what="900 records")
        a.terminate()
        b.terminate()
        produce(bs, topic, 900, 300)
        d = start()
        wait_all(procs, lambda: len(d.records()) >= 300, timeout=WAIT_S, what="the resumed member's 300 records")
        d.terminate()
    finally:
        for p in procs:
            p.kill()
    consumed = [(p, o) for proc in procs for p, o, _ in proc.records()]
    assert len(consumed) == len(set(consumed)) == 1200, "a record consumed twice, or one lost"
    assert not [p.errors() for p in procs if p.errors()]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(300)
def test_a_consumer_group_survives_a_coordinator_restart(tmp_path) -> None:
    """The coordinator's process restarts (a move to a new leader replays the same way): the group's records in
    `__consumer_offsets` are replayed, the members carry on at their epochs with their partitions (no new group
    epoch, no rejoin), and nothing is consumed twice or lost."""
    bp = BrokerProcess(tmp_path, settings=SETTINGS, extra_args=["--port", str(_free_port())])
    bp.start()
    procs: list[ConsumerProc] = []
    try:
        bs, topic, group = bp.bootstrap, "kip848-restart", "kip848-restart-g"
        create_topic(bs, topic, PARTITIONS)
        produce(bs, topic, 0, 300)
        a, b = (ConsumerProc(client="confluent", bootstrap=bs, group=group, topic=topic, commit=True,
                             group_protocol="consumer") for _ in range(2))
        procs += [a, b]
        wait_all(procs, lambda: len(a.assignment) == len(b.assignment) == 3
                 and sum(len(p.records()) for p in procs) >= 300, timeout=WAIT_S, what="two members, 300 records")
        before = (a.assignment, b.assignment)
        epochs = [line for line in bp.log_text().splitlines() if f"consumer group '{group}'" in line]
        bp.restart()
        produce(bs, topic, 300, 300)
        wait_all(procs, lambda: sum(len(p.records()) for p in procs) >= 600, timeout=WAIT_S, what="600 records")
        assert (a.assignment, b.assignment) == before, "the members kept their partitions across the restart"
        log = bp.log_text()
        after = [line for line in log.splitlines() if f"consumer group '{group}':" in line][len(epochs):]
        assert not after, f"members rejoined or the group epoch moved after the restart: {after}"
        loaded = [line for line in log.splitlines() if f"consumer group '{group}' loaded" in line]
        assert loaded and ", 2 member(s)" in loaded[-1], loaded
    finally:
        for p in procs:
            p.terminate()
        bp.kill()
    consumed = [(p, o) for proc in procs for p, o, _ in proc.records()]
    assert len(consumed) == len(set(consumed)) == 600, "a record consumed twice, or one lost"


@pytest.mark.timeout(300)
def test_a_static_librdkafka_member_restarts_into_its_partitions_without_a_rebalance(kip848_broker) -> None:
    """group.instance.id with the consumer protocol: the member leaves with epoch -2 on close, its partitions wait
    for it, and the restarted instance (a new member id) gets them back while the group epoch stays put."""
    bs, topic, group = kip848_broker.bootstrap, "kip848-static", "kip848-static-g"
    create_topic(bs, topic, PARTITIONS)
    produce(bs, topic, 0, 300)
    procs: list[ConsumerProc] = []

    def start(instance: str) -> ConsumerProc:
        c = ConsumerProc(client="confluent", bootstrap=bs, group=group, topic=topic, commit=True,
                         group_protocol="consumer", instance_id=instance)
        procs.append(c)
        return c

    try:
        a, b = start("inst-a"), start("inst-b")
        wait_all(procs, lambda: len(a.assignment) == len(b.assignment) == 3
                 and sum(len(p.records()) for p in procs) >= 300, timeout=WAIT_S, what="two static members")
        kept, b_parts = a.assignment, b.assignment
        lines_before = len([x for x in kip848_broker.log_text().splitlines() if f"consumer group '{group}'" in x])
        b.terminate()
        kip848_broker.wait_for_log(f"consumer group '{group}': static member", timeout=20)
        b2 = start("inst-b")
        b2.wait(lambda: b2.assignment == b_parts, timeout=WAIT_S, what=f"the restarted instance to get {b_parts}")
        produce(bs, topic, 300, 300)
        wait_all(procs, lambda: sum(len(p.records()) for p in procs) >= 600, timeout=WAIT_S, what="600 records")
        assert a.assignment == kept, "the other member kept its partitions"
        after = [x for x in kip848_broker.log_text().splitlines() if f"consumer group '{group}'" in x][lines_before:]
        assert not [x for x in after if "group epoch" in x and "left the group" in x], after
        epochs = {x.rsplit("group epoch ", 1)[-1] for x in after if "group epoch" in x}
        assert len(epochs) <= 1, f"the group epoch moved across the static restart: {after}"
    finally:
        for p in procs:
            p.terminate()
    consumed = [(p, o) for proc in procs for p, o, _ in proc.records()]
    assert len(consumed) == len(set(consumed)) == 600, "a record consumed twice, or one lost"
