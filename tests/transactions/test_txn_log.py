"""`__transaction_state` records in Kafka's byte layout (TransactionLogKey v0, TransactionLogValue v0/v1).

A Kafka tool reading Kelp's topic, or Kelp loading a log Kafka wrote, must agree on every byte: the
expected bytes below are laid out field by field from Kafka's TransactionLogKey.json and
TransactionLogValue.json, not produced by Kelp's encoder.
"""

from __future__ import annotations

import struct

import pytest

from kelp.broker.transactions.metadata import TransactionMetadata, TxnState
from kelp.broker.transactions.txn_config import partition_for_txn
from kelp.broker.transactions.txn_log import (
    TxnLogValue,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)


def test_key_is_version_0_and_a_short_string() -> None:
    assert encode_txn_key("tx-1") == b"\x00\x00" + b"\x00\x04" + b"tx-1"
    assert decode_txn_key(b"\x00\x00\x00\x04tx-1") == "tx-1"
    with pytest.raises(ValueError):
        decode_txn_key(b"\x00\x01\x00\x01x")


def test_ongoing_value_v0_bytes() -> None:
    value = TxnLogValue(producer_id=42, producer_epoch=3, timeout_ms=60000, status=int(TxnState.ONGOING),
                        partitions=(("out", 1), ("out", 0), ("b", 2)), last_update_ms=200, start_ms=100)
    expected = (struct.pack(">hqhib", 0, 42, 3, 60000, 1) + struct.pack(">i", 2)
                + b"\x00\x03out" + struct.pack(">iii", 2, 0, 1) + b"\x00\x01b" + struct.pack(">ii", 1, 2)
                + struct.pack(">qq", 200, 100))
    assert encode_txn_value(value) == expected
    back = decode_txn_value(expected)
    assert sorted(back.partitions) == [("b", 2), ("out", 0), ("out", 1)]
    assert (back.producer_id, back.producer_epoch, back.timeout_ms, back.status) == (42, 3, 60000, 1)


def test_empty_value_has_a_null_partition_array() -> None:
    value = TxnLogValue(7, 0, 1000, int(TxnState.EMPTY), (), 5, -1)
    data = encode_txn_value(value)
    assert data[17:21] == b"\xff\xff\xff\xff"
    assert decode_txn_value(data).partitions == ()
    with pytest.raises(ValueError):
        encode_txn_value(TxnLogValue(7, 0, 1000, int(TxnState.EMPTY), (("t", 0),), 5, -1))


def test_flexible_value_v1_as_kafka_writes_it_with_tagged_fields() -> None:
    # v1: compact arrays/strings (length + 1 as an unsigned varint) and tagged fields: previous producer id
    # (tag 0), next producer id (tag 1), client transaction version (tag 2).
    data = (struct.pack(">hqhib", 1, 9, 5, 30000, int(TxnState.PREPARE_COMMIT))
            + b"\x02" + b"\x04top" + b"\x03" + struct.pack(">ii", 0, 3) + b"\x00"
            + struct.pack(">qq", 77, 66)
            + b"\x03" + b"\x00\x08" + struct.pack(">q", 8) + b"\x01\x08" + struct.pack(">q", 10)
            + b"\x02\x02" + struct.pack(">h", 2))
    v = decode_txn_value(data)
    assert v.partitions == (("top", 0), ("top", 3))
    assert (v.producer_id, v.producer_epoch, v.status, v.last_update_ms, v.start_ms) == (9, 5, 2, 77, 66)
    assert (v.previous_producer_id, v.next_producer_id, v.client_transaction_version) == (8, 10, 2)


def test_unknown_value_version_and_truncation_are_refused() -> None:
    with pytest.raises(ValueError):
        decode_txn_value(struct.pack(">h", 2) + b"\x00" * 40)
    with pytest.raises(ValueError):
        decode_txn_value(struct.pack(">hq", 0, 1))


def test_metadata_from_log_round_trip() -> None:
    value = TxnLogValue(11, 2, 5000, int(TxnState.PREPARE_ABORT), (("a", 0),), 9, 8)
    meta = TransactionMetadata.from_log("t", decode_txn_value(encode_txn_value(value)))
    assert meta.state is TxnState.PREPARE_ABORT and meta.partitions == {("a", 0)} and meta.producer_epoch == 2


def test_state_names_are_kafkas() -> None:
    assert [s.kafka_name for s in TxnState] == ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort",
                                                 "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"]


def test_partition_for_is_kafkas_hash() -> None:
    # Java: Utils.abs("my-txn".hashCode()) % 50, the hash computed here as Java does over UTF-16 units
    h = 0
    for ch in "my-txn":
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    signed = h - (1 << 32) if h & 0x80000000 else h
    assert partition_for_txn("my-txn", 50) == abs(signed) % 50


def test_value_v1_round_trips_with_its_tagged_fields() -> None:
    """TransactionLogValue v1, written with transaction.version >= 1: what v2 transactions need across a
    coordinator failover (the next producer id of an epoch rollover, the client's transaction version)."""
    value = TxnLogValue(9, 32767, 60000, int(TxnState.PREPARE_COMMIT), (("top", 3), ("top", 0), ("x", 1)), 77, 66,
                        previous_producer_id=8, next_producer_id=10, client_transaction_version=2)
    data = encode_txn_value(value, version=1)
    assert struct.unpack_from(">h", data)[0] == 1
    back = decode_txn_value(data)
    assert back.partitions == (("top", 0), ("top", 3), ("x", 1))
    assert (back.producer_id, back.producer_epoch, back.status, back.last_update_ms, back.start_ms) == (
        9, 32767, 2, 77, 66)
    assert (back.previous_producer_id, back.next_producer_id, back.client_transaction_version) == (8, 10, 2)
    empty = TxnLogValue(9, 1, 1000, int(TxnState.EMPTY), (), 5, -1)
    assert decode_txn_value(encode_txn_value(empty, version=1)) == empty  # defaults: no tags written
    assert encode_txn_value(empty, version=1).endswith(struct.pack(">qq", 5, -1) + b"\x00")
