"""Apache Kafka's own tools (kafka-tools 4.3.1) work against Kelp, as they do against Apache Kafka.

kafka-topics, the console producer and consumer, kafka-consumer-groups
(including describe after a topic of the group was deleted), kafka-configs
(`kafka.admin.ConfigCommand`) --alter/--describe with the change taking
effect, of a topic and of the cluster-wide broker default,
kafka-delete-records, kafka-get-offsets --time -1/-2/-3/-4, the
verifiable producer and consumer, kafka-log-dirs; and no Java client falls
back from ApiVersions v4.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.broker.helpers import create_topic_wire, produce
from tests.support.kafka_wire import WireClient, make_batch

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

TOPICS = "org.apache.kafka.tools.TopicCommand"
PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS = "kafka.admin.ConfigCommand"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"


def offsets(run) -> dict[int, int]:
    """GetOffsetShell's `topic:partition:offset` lines."""
    out = {}
    for line in run.ok().stdout.split():
        _topic, partition, offset = line.rsplit(":", 2)
        out[int(partition)] = int(offset)
    return out


def group_rows(run) -> dict[tuple[str, int], list[str]]:
    """kafka-consumer-groups --describe/--reset-offsets rows by (topic, partition)."""
    rows = {}
    for line in run.ok().stdout.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[2].isdigit():
            rows[(cols[1], int(cols[2]))] = cols
    return rows


def _served(broker, api: str) -> float:
    """How many `api` requests the broker answered (its request-latency histogram's count)."""
    import urllib.request

    with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=10) as page:
        for line in page.read().decode().splitlines():
            if line.startswith(f'kelp_request_latency_seconds_count{{api="{api}"}}'):
                return float(line.split()[-1])
    return 0.0


def test_topics_create_list_describe_alter_and_delete(tools, tools_broker) -> None:
    created = tools.run_parallel((TOPICS, "--create", "--topic", "tt-a", "--partitions", "2"),
                                 (TOPICS, "--create", "--topic", "tt-b", "--partitions", "1",
                                  "--config", "retention.ms=3600000"))
    assert all("Created topic" in r.ok().stdout for r in created)
    listed, grown = tools.run_parallel((TOPICS, "--list"), (TOPICS, "--alter", "--topic", "tt-a", "--partitions", "4"))
    assert {"tt-a", "tt-b"} <= set(listed.ok().stdout.split())
    grown.ok()
    described, dup = tools.run_parallel((TOPICS, "--describe", "--topic", "tt-a,tt-b"),
                                        (TOPICS, "--create", "--topic", "tt-b", "--partitions", "1"))
    text = described.ok().stdout
    assert _served(tools_broker, "DescribeTopicPartitions") > 0  # Kafka 4's tools ask it, not Metadata (KIP-966)
    assert re.search(r"Topic: tt-a\s+TopicId: \S+\s+PartitionCount: 4\s+ReplicationFactor: 1", text), text
    assert re.search(r"Topic: tt-b\s.*Configs: .*retention.ms=3600000", text), text
    assert len(re.findall(r"Topic: tt-a\s+Partition: \d\s+Leader: 0\s+Replicas: 0\s+Isr: 0", text)) == 4, text
    assert dup.returncode != 0 and "already exists" in dup.stdout + dup.stderr
    tools.run(TOPICS, "--delete", "--topic", "tt-a").ok()
    assert "tt-a" not in tools.run(TOPICS, "--list").ok().stdout.split()


def test_console_producer_and_consumer_with_keys_from_the_beginning(tools) -> None:
    tools.run(TOPICS, "--create", "--topic", "console", "--partitions", "1").ok()
    lines = [f"key{i}:value {i}" for i in range(20)]
    tools.run(PRODUCER, "--topic", "console", "--reader-property", "parse.key=true",
              "--reader-property", "key.separator=:", stdin="\n".join(lines) + "\n").ok()
    got = tools.run(CONSUMER, "--topic", "console", "--from-beginning", "--max-messages", "20",
                    "--formatter-property", "print.key=true", "--formatter-property", "key.separator=:",
                    "--timeout-ms", "60000").ok()
    assert got.stdout.splitlines() == lines
    assert "Processed a total of 20 messages" in got.stderr


def test_consumer_groups_list_describe_after_a_topic_delete_reset_and_delete(tools) -> None:
    tools.run_parallel(*((TOPICS, "--create", "--topic", t, "--partitions", "2") for t in ("cg-kept", "cg-gone")))
    with WireClient(tools.bootstrap) as w:
        for topic in ("cg-kept", "cg-gone"):
            for p in range(2):
                for i in range(3):
                    assert produce(w, topic, make_batch([(None, b"r%d" % i)]), partition=p)[0] == 0
    tools.run(CONSUMER, "--include", "cg-.*", "--group", "cg", "--from-beginning", "--max-messages", "12",
              "--timeout-ms", "60000").ok()

    listed, by_type, described = tools.run_parallel((GROUPS, "--list"), (GROUPS, "--list", "--type"),
                                                    (GROUPS, "--describe", "--group", "cg"))
    assert "cg" in listed.ok().stdout.split()
    assert re.search(r"^cg\s+Classic\s*$", by_type.ok().stdout, re.M), by_type.stdout
    rows = group_rows(described)
    assert {k: (r[3], r[4], r[5]) for k, r in rows.items()} == {
        (t, p): ("3", "3", "0") for t in ("cg-kept", "cg-gone") for p in range(2)}

    tools.run(TOPICS, "--delete", "--topic", "cg-gone").ok()
    after = tools.run(GROUPS, "--describe", "--group", "cg").ok()  # Kafka drops the deleted topic's offsets
    assert set(group_rows(after)) == {("cg-kept", 0), ("cg-kept", 1)}, after.stdout + after.stderr

    reset = tools.run(GROUPS, "--reset-offsets", "--group", "cg", "--topic", "cg-kept", "--to-earliest", "--execute")
    assert {k: r[3] for k, r in group_rows(reset).items()} == {("cg-kept", 0): "0", ("cg-kept", 1): "0"}
    rows = group_rows(tools.run(GROUPS, "--describe", "--group", "cg"))
    assert {k: (r[3], r[5]) for k, r in rows.items()} == {("cg-kept", 0): ("0", "3"), ("cg-kept", 1): ("0", "3")}
    deleted = tools.run(GROUPS, "--delete", "--group", "cg").ok()
    assert "successful" in deleted.stdout, deleted.stdout
    assert "cg" not in tools.run(GROUPS, "--list").ok().stdout.split()


def test_configs_alter_and_describe_a_topic_and_the_change_takes_effect(tools) -> None:
    tools.run(TOPICS, "--create", "--topic", "cfg", "--partitions", "1").ok()
    entity = ("--entity-type", "topics", "--entity-name", "cfg")
    tools.run(CONFIGS, *entity, "--alter", "--add-config", "max.message.bytes=300,retention.ms=7200000").ok()
    described = tools.run(CONFIGS, *entity, "--describe").ok().stdout
    assert "max.message.bytes=300 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:max.message.bytes=300, " \
           "DEFAULT_CONFIG:message.max.bytes=1048588}" in described, described
    assert "retention.ms=7200000" in described

    big = "x" * 1000 + "\n"
    refused = tools.run(PRODUCER, "--topic", "cfg", stdin=big)
    assert "RecordTooLargeException" in refused.stdout + refused.stderr, refused.stderr
    assert offsets(tools.run(GET_OFFSETS, "--topic", "cfg", "--time", "-1")) == {0: 0}

    tools.run(CONFIGS, *entity, "--alter", "--delete-config", "max.message.bytes").ok()
    described = tools.run(CONFIGS, *entity, "--describe").ok().stdout
    assert "max.message.bytes" not in described and "retention.ms=7200000" in described, described
    tools.run(PRODUCER, "--topic", "cfg", stdin=big).ok()
    assert offsets(tools.run(GET_OFFSETS, "--topic", "cfg", "--time", "-1")) == {0: 1}

    broker = tools.run(CONFIGS, "--entity-type", "brokers", "--entity-name", "0", "--alter",
                       "--add-config", "num.partitions=3")
    assert broker.returncode != 0 and "Cannot update these configs dynamically: num.partitions" in \
        broker.stdout + broker.stderr


def test_configs_alter_and_describe_the_cluster_wide_broker_default(tools) -> None:
    """`kafka-configs --entity-type brokers --entity-default`: applies at once, to topics without an override."""
    tools.run(TOPICS, "--create", "--topic", "dyn", "--partitions", "1").ok()
    default = ("--entity-type", "brokers", "--entity-default")
    tools.run(CONFIGS, *default, "--alter", "--add-config", "log.retention.ms=5400000").ok()
    described = tools.run(CONFIGS, *default, "--describe").ok().stdout
    assert "Default configs for brokers in the cluster are:" in described, described
    assert ("log.retention.ms=5400000 sensitive=false "
            "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=5400000}") in described, described
    topic = tools.run(CONFIGS, "--entity-type", "topics", "--entity-name", "dyn", "--describe", "--all").ok().stdout
    assert "retention.ms=5400000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=5400000" \
        in topic, topic
    refused = tools.run(CONFIGS, *default, "--alter", "--add-config", "log.dirs=/elsewhere")
    assert refused.returncode != 0 and "log.dirs" in refused.stdout + refused.stderr
    tools.run(CONFIGS, *default, "--alter", "--delete-config", "log.retention.ms").ok()
    assert "log.retention.ms" not in tools.run(CONFIGS, *default, "--describe").ok().stdout


def test_delete_records_and_get_offsets_by_time(tools, tmp_path) -> None:
    assert create_topic_wire(tools.bootstrap, "dr", partitions=2) == 0
    base = 1_700_000_000_000
    with WireClient(tools.bootstrap) as w:
        for i, ts in enumerate([base + i for i in range(10)]):
            stamp = base + 500 if i == 5 else ts  # the largest timestamp sits at offset 5
            assert produce(w, "dr", make_batch([(None, b"v%d" % i)], timestamp_ms=stamp))[0] == 0
        assert produce(w, "dr", make_batch([(None, b"only")], timestamp_ms=base), partition=1)[0] == 0
    spec = tmp_path / "offsets.json"
    spec.write_text(json.dumps({"partitions": [{"topic": "dr", "partition": 0, "offset": 4}], "version": 1}))
    out = tools.run(DELETE_RECORDS, "--offset-json-file", str(spec)).ok().stdout
    assert "partition: dr-0\tlow_watermark: 4" in out, out

    latest, earliest, max_ts, local = tools.run_parallel(
        *((GET_OFFSETS, "--topic", "dr", "--time", t) for t in ("-1", "-2", "-3", "-4")))
    assert offsets(latest) == {0: 10, 1: 1}
    assert offsets(earliest) == {0: 4, 1: 0}
    assert offsets(max_ts) == {0: 5, 1: 0}
    assert offsets(local) == {0: 4, 1: 0}

    spec.write_text(json.dumps({"partitions": [{"topic": "dr", "partition": 0, "offset": 11}], "version": 1}))
    beyond = tools.run(DELETE_RECORDS, "--offset-json-file", str(spec))
    assert "OffsetOutOfRangeException" in beyond.stdout + beyond.stderr


def test_verifiable_producer_and_consumer_every_acked_record_is_consumed(tools) -> None:
    tools.run(TOPICS, "--create", "--topic", "verify", "--partitions", "3").ok()
    produced = tools.run(VERIFIABLE_PRODUCER, "--topic", "verify", "--max-messages", "300", "--acks", "-1").ok()
    events = [json.loads(line) for line in produced.stdout.splitlines() if line.startswith("{")]
    acked = {(e["partition"], e["offset"]): e["value"] for e in events if e["name"] == "producer_send_success"}
    assert len(acked) == 300 and not [e for e in events if e["name"] == "producer_send_error"]

    consumed = tools.run(VERIFIABLE_CONSUMER, "--topic", "verify", "--group-id", "verify-g", "--max-messages", "300",
                         "--verbose").ok()
    events = [json.loads(line) for line in consumed.stdout.splitlines() if line.startswith("{")]
    got = {(e["partition"], e["offset"]): e["value"] for e in events if e["name"] == "record_data"}
    assert got == acked
    commits = [e for e in events if e["name"] == "offsets_committed"]
    assert commits and all(e["success"] for e in commits)


def test_log_dirs_describe(tools, tools_broker) -> None:
    assert create_topic_wire(tools.bootstrap, "ld", partitions=2) == 0
    with WireClient(tools.bootstrap) as w:
        assert produce(w, "ld", make_batch([(None, b"x" * 100)]))[0] == 0
    out = tools.run(LOG_DIRS, "--describe", "--topic-list", "ld").ok().stdout
    doc = json.loads(out.strip().splitlines()[-1])
    [b] = doc["brokers"]
    [d] = b["logDirs"]
    sizes = {p["partition"]: p["size"] for p in d["partitions"]}
    assert d["error"] is None and sizes["ld-0"] > 100 and sizes["ld-1"] == 0, doc


def test_no_java_client_fell_back_from_api_versions_v4(tools, tools_broker) -> None:
    """Runs last in this module: every tool above (and this one) negotiated without a refused ApiVersions
    (the Java client sends v4 first) or an unknown API."""
    tools.run(TOPICS, "--list").ok()
    log = tools_broker.log_text()
    assert "ApiVersions v" not in log and "unsupported API key" not in log, log[-3000:]


def test_configs_set_describe_and_delete_client_quotas(tools) -> None:
    """Issue 33: quotas as Kafka's kafka-configs sets them (AlterClientQuotas) and shows them (DescribeClientQuotas)."""
    alice = ("--entity-type", "users", "--entity-name", "alice")
    tools.run(CONFIGS, *alice, "--alter", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152").ok()
    both = ("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-name", "app")
    tools.run(CONFIGS, *both, "--alter", "--add-config", "request_percentage=25").ok()
    tools.run(CONFIGS, "--entity-type", "clients", "--entity-default", "--alter", "--add-config",
              "producer_byte_rate=65536").ok()
    described = tools.run(CONFIGS, *alice, "--describe").ok().stdout
    assert "Quota configs for user-principal 'alice' are" in described, described
    assert "producer_byte_rate=1048576.0" in described and "consumer_byte_rate=2097152.0" in described
    pair = tools.run(CONFIGS, *both, "--describe").ok().stdout
    assert "request_percentage=25.0" in pair, pair
    default = tools.run(CONFIGS, "--entity-type", "clients", "--entity-default", "--describe").ok().stdout
    assert "Quota configs for the default client-id are producer_byte_rate=65536.0" in default, default
    refused = tools.run(CONFIGS, *alice, "--alter", "--add-config", "producer_byte_rate=1.5")
    assert refused.returncode != 0
    tools.run(CONFIGS, *alice, "--alter", "--delete-config", "consumer_byte_rate").ok()
    described = tools.run(CONFIGS, *alice, "--describe").ok().stdout
    assert "consumer_byte_rate" not in described and "producer_byte_rate=1048576.0" in described
