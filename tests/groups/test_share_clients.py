"""KIP-932 end to end (issue 36): Kafka's own share consumer (`KafkaShareConsumer`, kafka-clients 4.3.1 as
`make test` fetches it) reads from Kelp with acknowledgement and redelivery.

One consumer reads every record and accepts it; one that releases each record on its first delivery gets every
record again with delivery count 2; two consumers on one single-partition topic each get records, none twice
accepted, together all of them; after a broker restart, nothing accepted comes back; `kafka-configs
--entity-type groups` sets `share.auto.offset.reset=earliest` and a new group reads what the topic already held;
`kafka-share-groups --delete-offsets` and `--delete` make a group read everything again.
The Java tier skips only without `java` (`make test` fetches the jars first, `kelp.kafka_tools`).
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from kelp import kafka_tools
from tests.broker.helpers import create_topic_wire, produce
from tests.support.broker_process import BrokerProcess
from tests.support.kafka_wire import WireClient, make_batch

from .share_wire import ShareMember

JAVA_SOURCE = Path(__file__).with_name("ShareConsume.java")
SETTINGS = {"offsets.topic.num.partitions": 1, "share.coordinator.state.topic.num.partitions": 3,
            "group.share.heartbeat.interval.ms": 500}
WAIT_S = 90.0
N = 40


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    if shutil.which("java") is None:
        pytest.skip("java is not installed: Kafka's Java share consumer cannot run")
    kafka_tools.fetch()
    bp = BrokerProcess(tmp_path_factory.mktemp("kelp-share-java"), settings=SETTINGS)
    bp.start()
    yield bp
    bp.kill()


class JavaShareConsumer:
    """ShareConsume.java: one line per record delivered, (offset, delivery count, value)."""

    def __init__(self, bootstrap: str, topic: str, group: str, *, release: bool = False,
                 max_records: int = 500) -> None:
        cmd = kafka_tools.java_command(str(JAVA_SOURCE), bootstrap, topic, group, str(release).lower(),
                                       str(max_records))
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.records: list[tuple[int, int, str]] = []
        self.committed = 0  # how many of `records` were committed (acknowledged, answered) so far
        self.stderr: list[str] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr or []), daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout or []:
            parts = line.rstrip("\n").split("\t")
            with self._cond:
                if len(parts) == 3:
                    self.records.append((int(parts[0]), int(parts[1]), parts[2]))
                elif parts[0] == "#committed":
                    self.committed = len(self.records)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def got(self) -> list[tuple[int, int, str]]:
        with self._cond:
            return list(self.records)

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise AssertionError(f"share consumer did not close: {''.join(self.stderr)[-2000:]}") from None


def wait_for(what: str, cond, consumers: list[JavaShareConsumer], timeout_s: float = WAIT_S) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not cond():
        for c in consumers:
            assert c.proc.poll() is None, f"share consumer exited: {''.join(c.stderr)[-3000:]}"
        assert time.monotonic() < deadline, f"{what} not within {timeout_s} s: " + " | ".join(
            f"{c.got()[-5:]} {''.join(c.stderr)[-1500:]}" for c in consumers)
        time.sleep(0.1)  # the consumers' output is read by threads; this only polls it, bounded


def members(bp: BrokerProcess, group: str) -> int:
    """How many members ShareGroupDescribe shows in the group (0 before it exists)."""
    from kelp.broker.kafka.messages import ShareGroupDescribeRequest

    with WireClient(bp.bootstrap) as c:
        g = c.request(ShareGroupDescribeRequest(group_ids=[group], include_authorized_operations=False), 1).groups[0]
    return len(g.members) if g.error_code == 0 else 0


def start_topic(bp: BrokerProcess, topic: str, group: str, count: int, first: int = 0) -> None:
    """Create the topic, start the group's share-partition at 0 (a first fetch sets it at the log end, Kafka's
    share.auto.offset.reset=latest), then write `count` records."""
    assert create_topic_wire(bp.bootstrap, topic) == 0
    m = ShareMember(bp.bootstrap, group, "init", topic)
    try:
        assert m.fetch(max_wait_ms=0).error_code == 0
        assert m.fetch(epoch=-1).error_code == 0
    finally:
        m.close()
    write(bp, topic, first, count)


def write(bp: BrokerProcess, topic: str, first: int, count: int) -> None:
    with WireClient(bp.bootstrap) as c:
        for i in range(first, first + count):
            assert produce(c, topic, make_batch([(None, f"v{i}".encode())]), acks=-1)[0] == 0


def test_the_java_share_consumer_reads_and_accepts_every_record(broker: BrokerProcess) -> None:
    start_topic(broker, "share-java-all", "sg-all", N)
    c = JavaShareConsumer(broker.bootstrap, "share-java-all", "sg-all")
    try:
        wait_for("all records", lambda: len({o for o, _n, _v in c.got()}) >= N, [c])
    finally:
        c.stop()
    got = c.got()
    assert sorted(o for o, _n, _v in got) == list(range(N))  # each once: accepted records are not redelivered
    assert {v for _o, _n, v in got} == {f"v{i}" for i in range(N)}
    assert {n for _o, n, _v in got} == {1}


def share_groups_command(bp: BrokerProcess, *args: str) -> str:
    """Kafka's kafka-share-groups (ShareGroupCommand); its standard output."""
    done = subprocess.run(kafka_tools.java_command("org.apache.kafka.tools.consumer.group.ShareGroupCommand",
                                                   "--bootstrap-server", bp.bootstrap, *args),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_kafka_share_groups_lists_and_describes_a_group(broker: BrokerProcess) -> None:
    start_topic(broker, "share-java-tool", "sg-tool", 12)
    c = JavaShareConsumer(broker.bootstrap, "share-java-tool", "sg-tool")
    try:
        wait_for("all records committed", lambda: c.committed >= 12, [c])
        assert "sg-tool" in share_groups_command(broker, "--list").split()
        members = share_groups_command(broker, "--describe", "--group", "sg-tool", "--members")
        assert "share-java-tool:0" in members.replace(" ", ""), members
        # every record accepted (commitSync before the next poll): the start offset is past all of them
        offsets = share_groups_command(broker, "--describe", "--group", "sg-tool")
        row = [line.split() for line in offsets.splitlines() if "share-java-tool" in line]
        assert row and row[0][1:5] == ["share-java-tool", "0", "12", "0"], offsets
    finally:
        c.stop()


def test_reset_offsets_to_earliest_then_the_java_share_consumer_reads_what_was_there(broker: BrokerProcess) -> None:
    """Kafka's way to read what a topic already holds with a new share group (whose start is the log end):
    `kafka-share-groups --reset-offsets --to-earliest --execute` on the empty group, then consume."""
    assert create_topic_wire(broker.bootstrap, "share-java-reset") == 0
    write(broker, "share-java-reset", 0, 8)
    out = share_groups_command(broker, "--reset-offsets", "--to-earliest", "--group", "sg-reset", "--topic",
                               "share-java-reset", "--execute")
    assert "share-java-reset" in out, out
    reads_what_was_there(broker, "share-java-reset", "sg-reset", 8)


def reads_what_was_there(bp: BrokerProcess, topic: str, group: str, count: int) -> None:
    """A Java share consumer of the new group gets the `count` records the topic held before the group existed."""
    c = JavaShareConsumer(bp.bootstrap, topic, group)
    try:
        wait_for("the records written before the group existed", lambda: len(c.got()) >= count, [c])
    finally:
        c.stop()
    assert sorted(o for o, _n, _v in c.got()) == list(range(count))


def configs_command(bp: BrokerProcess, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """Kafka's kafka-configs (ConfigCommand)."""
    done = subprocess.run(kafka_tools.java_command("kafka.admin.ConfigCommand", "--bootstrap-server", bp.bootstrap,
                                                   *args), capture_output=True, text=True, timeout=120)
    assert (done.returncode == 0) == ok, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def test_kafka_configs_sets_earliest_and_the_java_share_consumer_reads_what_was_there(broker: BrokerProcess) -> None:
    """Kafka 4's other way for a new share group to read what a topic holds: the group config
    share.auto.offset.reset=earliest (`kafka-configs --entity-type groups`), set before the group exists."""
    assert create_topic_wire(broker.bootstrap, "share-java-earliest") == 0
    write(broker, "share-java-earliest", 0, 6)
    group = ["--entity-type", "groups", "--entity-name", "sg-earliest"]
    configs_command(broker, *group, "--alter", "--add-config", "share.auto.offset.reset=earliest")
    described = configs_command(broker, *group, "--describe").stdout
    assert "share.auto.offset.reset=earliest" in described, described
    refused = configs_command(broker, *group, "--alter", "--add-config", "share.delivery.count.limit=50", ok=False)
    assert "share.delivery.count.limit must be in the range 2 to 10 inclusive" in refused.stdout + refused.stderr
    reads_what_was_there(broker, "share-java-earliest", "sg-earliest", 6)


def test_kafka_share_groups_deletes_offsets_and_the_group(broker: BrokerProcess) -> None:
    """`kafka-share-groups --delete-offsets` (DeleteShareGroupOffsets) and `--delete` (DeleteGroups) of an empty
    share group; afterwards the group is not listed and a new member of that id reads from the start again."""
    assert create_topic_wire(broker.bootstrap, "share-java-del") == 0
    write(broker, "share-java-del", 0, 4)
    configs_command(broker, "--entity-type", "groups", "--entity-name", "sg-del", "--alter", "--add-config",
                    "share.auto.offset.reset=earliest")
    reads_what_was_there(broker, "share-java-del", "sg-del", 4)
    out = share_groups_command(broker, "--delete-offsets", "--group", "sg-del", "--topic", "share-java-del")
    assert "share-java-del" in out and "Successful" in out, out
    reads_what_was_there(broker, "share-java-del", "sg-del", 4)  # its offsets gone: from the start again
    out = share_groups_command(broker, "--delete", "--group", "sg-del")
    assert "Deletion of requested share groups ('sg-del') was successful." in out, out
    assert "sg-del" not in share_groups_command(broker, "--list").split()
    reads_what_was_there(broker, "share-java-del", "sg-del", 4)


def test_a_released_record_is_delivered_again_with_a_higher_count(broker: BrokerProcess) -> None:
    start_topic(broker, "share-java-release", "sg-release", 10)
    c = JavaShareConsumer(broker.bootstrap, "share-java-release", "sg-release", release=True)
    try:
        wait_for("every record twice", lambda: len([r for r in c.got() if r[1] == 2]) >= 10, [c])
    finally:
        c.stop()
    got = c.got()
    assert sorted(o for o, n, _v in got if n == 1) == list(range(10))
    assert sorted(o for o, n, _v in got if n == 2) == list(range(10))
    assert not [r for r in got if r[1] > 2]  # accepted on the second delivery: never a third


def test_two_share_consumers_on_one_partition_split_the_records(broker: BrokerProcess) -> None:
    start_topic(broker, "share-java-two", "sg-two", 0)
    a = JavaShareConsumer(broker.bootstrap, "share-java-two", "sg-two", max_records=5)
    b = JavaShareConsumer(broker.bootstrap, "share-java-two", "sg-two", max_records=5)
    try:
        wait_for("both members joined", lambda: members(broker, "sg-two") == 2, [a, b])
        total = 400
        for start in range(0, total, 20):  # in waves, so both members are fetching while records arrive
            write(broker, "share-java-two", start, 20)
        wait_for("all records", lambda: len({o for o, _n, _v in a.got() + b.got()}) >= total, [a, b])
    finally:
        a.stop()
        b.stop()
    offsets = [o for o, _n, _v in a.got() + b.got()]
    assert sorted(offsets) == list(range(total))  # no record delivered (and accepted) twice, none lost
    assert a.got() and b.got(), (len(a.got()), len(b.got()))


def test_nothing_accepted_is_delivered_again_after_a_broker_restart(broker: BrokerProcess) -> None:
    start_topic(broker, "share-java-restart", "sg-restart", 20)
    c = JavaShareConsumer(broker.bootstrap, "share-java-restart", "sg-restart")
    try:
        wait_for("all records", lambda: len({o for o, _n, _v in c.got()}) >= 20, [c])
    finally:
        c.stop()
    broker.restart(kill=True)
    write(broker, "share-java-restart", 20, 5)
    c = JavaShareConsumer(broker.bootstrap, "share-java-restart", "sg-restart")
    try:
        wait_for("the new records", lambda: len(c.got()) >= 5, [c])
    finally:
        c.stop()
    assert sorted(o for o, _n, _v in c.got()) == list(range(20, 25))
