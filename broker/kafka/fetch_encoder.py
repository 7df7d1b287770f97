"""Hand-written FetchResponse encoder (v4-v18) that never copies record data.

Why: the fetch response is the biggest thing the broker sends. kafka-python's
generated encoder copies every records blob into its buffer and then into a
result; here the fixed-size parts are packed into small byte strings and the
record blobs from the log are passed through as they are, as a list of
buffers for the transport. The byte layout follows the FetchResponse schema
(non-flexible v4-v11, flexible v12+ with compact arrays and tagged fields;
from v13 a topic is named by its 16-byte id instead of its name, KIP-516; the
fields added later are tagged and left out);
`tests/broker/test_fetch_encoder.py` checks it against kafka-python's decoder.

This module must never look inside record batches.
"""

from __future__ import annotations

import struct
from typing import Sequence

from .framing import Buffer, FileRange

__all__ = ["encode_fetch_response", "MIN_VERSION", "MAX_VERSION", "TOPIC_IDS_FROM", "PartitionAnswer"]

MIN_VERSION = 4
MAX_VERSION = 18
TOPIC_IDS_FROM = 13  # from this version a topic is its 16-byte id

_TOP_V4 = struct.Struct(">i")  # throttle
_TOP_V7 = struct.Struct(">ihi")  # throttle, error, session id
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PART_V4 = struct.Struct(">ihqq")  # partition, error, hw, lso
_PART_V5 = struct.Struct(">ihqqq")  # + log start
_ABORTED = struct.Struct(">qq")  # producer id, first offset

# One partition of the answer: (partition, error, high watermark, last stable offset, log start, records,
# aborted transactions), the records as the log gave them (bytes, or a segment's byte range sent with
# sendfile), the aborted transactions as (producer id, first offset) pairs or None (read_uncommitted: null).
PartitionAnswer = tuple[int, int, int, int, int, bytes | memoryview | FileRange, Sequence[tuple[int, int]] | None]


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_fetch_response(
    version: int,
    *,
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
    topics: Sequence[tuple[str | bytes, Sequence[PartitionAnswer]]],
) -> tuple[list[Buffer], int]:
    """Encode; `topics` = [(name, [(partition, error, hw, lso, log_start, records, aborted), ...])], each topic
    named by its name (v4-v12) or by its id's 16 bytes (v13+).

    Returns (buffers, total size).
    """
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"FetchResponse v{version} is not supported by this encoder")
    flexible = version >= 12
    out: list[Buffer] = []
    head = bytearray(_TOP_V7.pack(throttle_time_ms, error_code, session_id) if version >= 7
                     else _TOP_V4.pack(throttle_time_ms))
    head += _uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))
    size = 0
    part_struct = _PART_V5 if version >= 5 else _PART_V4
    by_id = version >= TOPIC_IDS_FROM
    for name, parts in topics:
        if by_id:
            if not isinstance(name, bytes) or len(name) != 16:
                raise ValueError(f"FetchResponse v{version} names topics by their 16-byte id, not {name!r}")
            head += name
        else:
            raw = name.encode("utf-8") if isinstance(name, str) else name
            head += (_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw
        head += _uvarint(len(parts) + 1) if flexible else _I32.pack(len(parts))
        for partition, error, hw, lso, log_start, records, aborted in parts:
            if version >= 5:
                head += part_struct.pack(partition, error, hw, lso, log_start)
            else:
                head += part_struct.pack(partition, error, hw, lso)
            if aborted is None:
                head += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                head += _uvarint(len(aborted) + 1) if flexible else _I32.pack(len(aborted))
                for producer_id, first_offset in aborted:
                    head += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        head += b"\x00"  # aborted transaction tagged fields
            if version >= 11:
                head += b"\xff\xff\xff\xff"  # preferred read replica -1
            n = len(records)
            head += _uvarint(n + 1) if flexible else _I32.pack(n)
            if n:
                out.append(bytes(head))
                size += len(head)
                out.append(records)
                size += n
                head = bytearray()
            if flexible:
                head += b"\x00"  # partition tagged fields
        if flexible:
            head += b"\x00"  # topic tagged fields
    if flexible:
        head += b"\x00"  # response tagged fields
    if head:
        out.append(bytes(head))
        size += len(head)
    return out, size
