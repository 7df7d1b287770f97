"""`kelp produce` and `kelp consume` through the Kafka protocol."""

from __future__ import annotations

import json

from kafka import KafkaConsumer, TopicPartition


def test_produce_keys_and_headers_then_consume_from_beginning(cli, kelp) -> None:
    assert cli("topics", "create", "lines", "--partitions", "1").code == 0
    stdin = "k1:first\nk2:second value\nk1:third:with:colons\n"
    r = cli("produce", "lines", "--key-separator", ":", "--header", "source=cli", "--header", "n=1",
            "--compression", "gzip", stdin=stdin)
    assert r.code == 0, r
    assert "produced 3 record(s) to topic lines" in r.err

    # What a plain Kafka consumer sees.
    consumer = KafkaConsumer(bootstrap_servers=kelp.bootstrap, group_id=None, consumer_timeout_ms=5000)
    tp = TopicPartition("lines", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    recs = []
    for rec in consumer:
        recs.append(rec)
        if len(recs) == 3:
            break
    consumer.close()
    assert [(x.key, x.value) for x in recs] == [(b"k1", b"first"), (b"k2", b"second value"),
                                                (b"k1", b"third:with:colons")]
    assert all(x.headers == [("source", b"cli"), ("n", b"1")] for x in recs)

    r = cli("consume", "lines", "--from-beginning", "--max-messages", "2")
    assert r.code == 0, r
    assert r.out == "Partition:0\tOffset:0\tk1\tfirst\nPartition:0\tOffset:1\tk2\tsecond value\n"

    r = cli("consume", "lines", "--from-beginning", "--max-messages", "2", "--values-only")
    assert r.out == "first\nsecond value\n"

    r = cli("consume", "lines", "--from-beginning", "--max-messages", "3", "--values-only", "--print-key",
            "--key-separator", "=")
    assert r.out.splitlines() == ["k1=first", "k2=second value", "k1=third:with:colons"]

    r = cli("consume", "lines", "--offset", "2", "--max-messages", "1", "--json")
    doc = json.loads(r.out)
    assert doc["offset"] == 2 and doc["key"] == "k1" and doc["value"] == "third:with:colons"
    assert doc["headers"] == [["source", "cli"], ["n", "1"]]


def test_produce_to_a_partition_from_a_file(cli, tmp_path) -> None:
    assert cli("topics", "create", "filed", "--partitions", "2").code == 0
    f = tmp_path / "in.txt"
    f.write_text("a\nb\n")
    r = cli("produce", "filed", "--file", str(f), "--partition", "1", "--json")
    assert r.code == 0, r
    assert json.loads(r.out) == [{"partition": 1, "offset": 0}, {"partition": 1, "offset": 1}]
    r = cli("consume", "filed", "--partition", "1", "--from-beginning", "--max-messages", "2")
    assert r.out == "Partition:1\tOffset:0\tnull\ta\nPartition:1\tOffset:1\tnull\tb\n"  # no key: null, as Kafka prints
    # Follows the end by default; --idle-timeout ends a quiet follow.
    r = cli("consume", "filed", "--partition", "1", "--idle-timeout", "0.5")
    assert r.code == 0 and r.out == ""


def test_produce_and_consume_errors(cli) -> None:
    assert cli("topics", "create", "errs").code == 0
    r = cli("produce", "errs", "--key-separator", "|", stdin="ok|1\nno separator here\n")
    assert r.code == 1 and "line 2" in r.err and "separator" in r.err and r.err.count("\n") == 1
    r = cli("consume", "errs", "--partition", "5", "--max-messages", "1")
    assert r.code == 1 and "partition 5" in r.err
    r = cli("produce", "errs", "--file", "/nonexistent/x")
    assert r.code == 1 and "/nonexistent/x" in r.err
