"""The `kelp` source's pure parts without Spark: option rules, offset planning arithmetic, the column codec."""

from __future__ import annotations

import pytest

from kelp.records.build import build_batch
from kelp.records.compression import available_compressions
from kelp.records.record import iter_records
from kelp.records.validation import parse_batches
from kelp.spark.codec import decode_columns, encode_batch
from kelp.spark.offsets import OffsetRange, _split, from_json, rate_limit, to_json
from kelp.spark.options import OptionError, parse_read_options, parse_write_options

B = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


@pytest.mark.parametrize("compression", available_compressions())
def test_columns_match_the_record_codec_for_every_compression(compression) -> None:
    records = [(None if i % 4 == 0 else f"k{i}".encode(), b"v" * (i * 37 % 300), ((f"h{i}", b"x"),) if i % 2 else ())
               for i in range(300)]
    data = b"".join(build_batch(records[i:i + 100], base_offset=i, compression=compression) for i in range(0, 300, 100))
    cols, next_offset = decode_columns(data, 0, 1 << 62, include_headers=True)
    expected = list(iter_records(data))
    assert next_offset == 300
    assert cols.keys == [r.key for r in expected] and cols.values == [r.value for r in expected]
    assert cols.offsets == list(range(300)) and cols.timestamps == [r.timestamp for r in expected]
    assert cols.headers == [list(r.headers) for r in expected]


def test_columns_keep_to_the_range_and_step_over_partial_batches() -> None:
    data = build_batch([(None, b"a"), (None, b"b"), (None, b"c")], base_offset=10)
    data += build_batch([(None, b"d")], base_offset=13)[:-5]  # a partial batch at the end of a fetch
    cols, next_offset = decode_columns(data, 11, 12)
    assert cols.values == [b"b"] and cols.offsets == [11] and next_offset == 13
    empty, after = decode_columns(data, 13, 20)
    assert len(empty) == 0 and after == 13


@pytest.mark.parametrize("compression", available_compressions())
def test_encoded_batches_are_valid_record_batches_that_kafka_pythons_codec_reads(compression) -> None:
    keys = [None, b"k"] + [f"key-{i}".encode() for i in range(500)]
    values = [b"v", None] + [bytes(i % 251 for _ in range(i * 41 % 20_000)) for i in range(500)]
    headers = [[("a", b"1"), ("n", None)], []] + [[("h", b"x" * i)] if i % 7 == 0 else [] for i in range(500)]
    batch = encode_batch(keys, values, headers, compression=compression, timestamp_ms=123)
    info, = parse_batches(batch)  # sizes, magic and CRC32C checked
    assert info.record_count == 502 and info.last_offset_delta == 501
    expected = list(iter_records(batch))  # kafka-python's decoder
    assert [r.key for r in expected] == keys and [r.value for r in expected] == values
    assert [list(r.headers) for r in expected] == headers and {r.timestamp for r in expected} == {123}
    cols, _ = decode_columns(batch, 0, 1000, include_headers=True)
    assert (cols.keys, cols.values, cols.headers) == (keys, values, headers)


def test_max_offsets_per_trigger_is_shared_in_proportion_to_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 100}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 5}
    end = rate_limit({**start, ("t", 2): 5}, latest, 100)
    assert end == {("t", 0): 75, ("t", 1): 125, ("t", 2): 5}
    assert rate_limit(start, {("t", 0): 10, ("t", 1): 101}, 100) == {("t", 0): 10, ("t", 1): 101}


def test_min_partitions_splits_ranges_without_losing_or_repeating_offsets() -> None:
    pieces = _split([OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 5, 7)], 6)
    assert len(pieces) >= 5
    for p in (0, 1):
        mine = sorted((r.start, r.end) for r in pieces if r.partition == p)
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:], strict=False))
    assert sum(r.size for r in pieces) == 1002


def test_offsets_json_is_sparks_kafka_form() -> None:
    offsets = {("a", 1): 5, ("a", 0): 3, ("b", 0): 0}
    assert to_json(offsets) == {"a": {"0": 3, "1": 5}, "b": {"0": 0}}
    assert from_json(to_json(offsets)) == offsets


def test_read_option_rules() -> None:
    batch = parse_read_options({**B, "subscribe": "a, b"}, streaming=False)
    assert batch.subscribe == ("a", "b") and batch.starting.kind == "earliest" and batch.ending.kind == "latest"
    stream = parse_read_options({**B, "subscribePattern": "ev.*", "maxOffsetsPerTrigger": "10"}, streaming=True)
    assert stream.starting.kind == "latest" and stream.max_offsets_per_trigger == 10 and stream.topic_matches("events")
    assert stream.topic_matches("xev") and not stream.topic_matches("other")  # Spark searches, unanchored
    spec = parse_read_options({**B, "assign": '{"a": [0, 1]}', "startingOffsets": '{"a": {"0": -2, "1": 7}}'},
                              streaming=True).starting
    assert spec.kind == "offsets" and spec.offsets == {"a": {0: -2, 1: 7}}
    timed = parse_read_options({**B, "subscribe": "a", "startingTimestamp": "1000", "startingOffsets": "latest"},
                               streaming=True)
    assert timed.starting.kind == "timestamp" and timed.starting.timestamp == 1000
    for options, streaming, named in [
        ({"subscribe": "a"}, False, "kafka.bootstrap.servers"),
        ({**B, "subscribe": "a", "endingOffsets": "latest"}, True, "endingOffsets"),
        ({**B, "subscribe": "a", "maxOffsetsPerTrigger": "10"}, False, "maxOffsetsPerTrigger"),
        ({**B, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger"),
        ({**B, "subscribe": "a", "minOffsetsPerTrigger": "20", "maxOffsetsPerTrigger": "10"}, True,
         "minOffsetsPerTrigger"),
        ({**B, "subscribePattern": "(", }, True, "subscribePattern"),
        ({**B, "assign": '{"a": ["x"]}'}, True, "assign"),
        ({**B, "subscribe": "a", "startingOffsets": '{"a": {"0": -3}}'}, True, "startingOffsets"),
        ({**B, "subscribe": "a", "maxTriggerDelay": "soon"}, True, "maxTriggerDelay"),
        ({**B, "subscribe": "a", "kafka.value.deserializer": "x"}, True, "kafka.value.deserializer"),
        ({**B, "subscribe": "a", "kafka.security.protocol": "TLS"}, True, "kafka.security.protocol"),
        ({**B, "subscribe": "a", "kafka.security.protocol": "SASL_SSL"}, True, "kafka.sasl.mechanism"),
        ({**B, "subscribe": "a", "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "GSSAPI"}, True,
         "kafka.sasl.mechanism"),
        ({**B, "subscribe": "a", "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"}, True,
         "kafka.sasl.jaas.config"),
        ({**B, "subscribe": "a", "kafka.ssl.truststore.type": "JKS"}, True, "kafka.ssl.truststore.type"),
        ({**B, "subscribe": "a", "kafka.sasl.login.callback.handler.class": "x"}, True,
         "kafka.sasl.login.callback.handler.class"),
    ]:
        with pytest.raises(OptionError, match=named):
            parse_read_options(options, streaming=streaming)


def test_the_kafka_security_options_are_accepted_as_sparks_kafka_source_takes_them() -> None:
    from kelp.kafka_client.security import CLIENT_SECURITY_PROPERTIES
    from kelp.spark.options import SECURITY_OPTIONS

    assert SECURITY_OPTIONS == CLIENT_SECURITY_PROPERTIES  # what options accept is what the connections read
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="b";'
    opts = parse_read_options({**B, "subscribe": "a", "kafka.security.protocol": "SASL_SSL",
                               "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.jaas.config": jaas,
                               "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/ca.pem"},
                              streaming=False)
    assert opts.client["security.protocol"] == "SASL_SSL" and opts.client["sasl.jaas.config"] == jaas
    written = parse_write_options({**B, "topic": "t", "kafka.security.protocol": "SSL",
                                   "kafka.ssl.keystore.location": "/me.pem"})
    assert written.client["ssl.keystore.location"] == "/me.pem"


def test_write_option_rules() -> None:
    opts = parse_write_options({**B, "topic": "out", "kafka.acks": "1", "checkpointLocation": "/tmp/x"})
    assert opts.topic == "out" and opts.acks == 1
    for options, named in [({**B, "kafka.acks": "0"}, "kafka.acks"),
                           ({**B, "kafka.compression.type": "brotli"}, "kafka.compression.type"),
                           ({**B, "topc": "x"}, "topc")]:
        with pytest.raises(OptionError, match=named):
            parse_write_options(options)


def test_spark_finds_the_kelp_format_in_an_installed_pyspark_module() -> None:
    """Spark's lookup (pyspark.sql.worker.lookup_data_sources): a top-level `pyspark_*` module whose
    `DefaultSource` is a DataSource, registered under its name(). Editable installs hide the module
    from that scan (pkgutil sees no meta-path finders), so the tier registers the source explicitly."""
    import importlib

    from pyspark.sql.datasource import DataSource

    from kelp.spark import KelpDataSource

    module = importlib.import_module("pyspark_kelp")
    assert issubclass(module.DefaultSource, DataSource) and module.DefaultSource is KelpDataSource
    assert module.DefaultSource.name() == "kelp"
