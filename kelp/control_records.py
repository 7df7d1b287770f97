"""Transaction markers: Kafka's control batches that commit or abort a producer's transaction.

Why it exists: a transaction ends with one control batch per partition it wrote (the coordinator asks each
partition leader with WriteTxnMarkers); consumers skip control batches, read_committed ones use them to
drop aborted data, and the broker's producer state and aborted-transaction index are rebuilt from them.
Both the broker (writing and replaying markers) and tests (reading them back, as clients do) need the same
byte layout, so it is here once, beside `kelp.records`.

Format (Kafka's `ControlRecordType` / `EndTransactionMarker`): a RecordBatch v2 with the control and
transactional attribute bits, the producer's id and epoch, base sequence -1, and exactly one record whose
key is int16 version (0) + int16 type (0 ABORT, 1 COMMIT) and whose value is int16 version (0) + int32
coordinator epoch. A marker is never compressed. Decoding reads the one record of the one batch (per
batch, never on the produce/fetch hot path of data batches).

It must never import networking or anything from `kelp.broker`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kelp.errors import CorruptRecordError
from kelp.records.build import build_batch
from kelp.records.header import ATTRIBUTES_AT, CONTROL_MASK, NO_SEQUENCE, BatchInfo, rewrite_header
from kelp.records.record import Record, batch_records

__all__ = ["ABORT", "COMMIT", "ControlMarker", "build_marker_batch", "read_marker", "marker_key", "marker_value"]

ABORT = 0
COMMIT = 1
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_ATTRIBUTES = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class ControlMarker:
    """What one end-transaction marker says."""

    commit: bool
    coordinator_epoch: int


def marker_key(commit: bool) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, COMMIT if commit else ABORT)


def marker_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def build_marker_batch(producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int,
                       timestamp_ms: int) -> bytearray:
    """One control batch holding the end-transaction marker (offset 0: the leader's append assigns it).

    Returned writable, so the log's append rewrites it in place.
    """
    data = bytearray(build_batch(
        [Record(marker_key(commit), marker_value(coordinator_epoch), timestamp=timestamp_ms)],
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE,
        is_transactional=True, now_ms=timestamp_ms,
    ))
    attributes = _ATTRIBUTES.unpack_from(data, ATTRIBUTES_AT)[0] | CONTROL_MASK
    rewrite_header(data, attributes=attributes)
    return data


def read_marker(data: bytes | bytearray | memoryview, info: BatchInfo) -> ControlMarker | None:
    """The marker of control batch `info` (positioned in `data`); None for a control batch of another type
    (or an empty one: Kafka's cleaner may empty a control batch whose transaction is gone).

    Raises `CorruptRecordError` for a marker whose key or value is malformed.
    """
    records = batch_records(data, info)
    if not records:
        return None
    key, value = records[0].key, records[0].value
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(f"control batch at offset {info.base_offset} has a key of "
                                 f"{0 if key is None else len(key)} bytes, expected at least {_KEY.size}")
    version, kind = _KEY.unpack_from(key)
    if version < 0 or kind not in (ABORT, COMMIT):
        return None
    if value is None or len(value) < _VALUE.size:
        raise CorruptRecordError(f"end-transaction marker at offset {info.base_offset} has a value of "
                                 f"{0 if value is None else len(value)} bytes, expected at least {_VALUE.size}")
    _version, coordinator_epoch = _VALUE.unpack_from(value)
    return ControlMarker(kind == COMMIT, coordinator_epoch)
