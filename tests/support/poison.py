"""Poison-pill RecordBatches for tests: a valid header and CRC around compressed records that lie.

Why: a compressed batch's CRC covers its compressed bytes, so the batches that break consumers — a payload
that does not decompress, a record count the records do not have, a zip bomb — pass every header check; the
tests of the broker's check of compressed records (`kelp.records.inner`) build them here, once per codec.
"""

from __future__ import annotations

import struct
import zlib

from crc32c import crc32c

from kelp.records.build import build_batch

__all__ = ["good_batch", "repack", "garbage", "lying_count", "bomb", "CODECS"]

CODECS = ("gzip", "snappy", "lz4", "zstd")
_COUNT_AT = 57
_LAST_DELTA_AT = 23


def good_batch(codec: str, n: int = 3) -> bytes:
    return build_batch([(b"k%d" % i, b"value-%d " % i * 20) for i in range(n)], compression=codec)


def repack(batch: bytes, payload: bytes | None = None, *, count: int | None = None) -> bytes:
    """`batch` with its records section replaced by `payload` and/or its record count (and last offset delta)
    set to `count`; length and CRC recomputed so every header check passes."""
    out = bytearray(batch[:61]) + (batch[61:] if payload is None else payload)
    if count is not None:
        struct.pack_into(">i", out, _COUNT_AT, count)
        struct.pack_into(">i", out, _LAST_DELTA_AT, count - 1)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def garbage(codec: str) -> bytes:
    """A batch in `codec` whose compressed records are not a stream of that codec."""
    return repack(good_batch(codec), b"\x28\xb5\x2f\xfd not a compressed stream at all" * 3)


def lying_count(codec: str) -> bytes:
    """A batch of 3 records in `codec` whose header says 4 (and last offset delta 3, so the header agrees)."""
    return repack(good_batch(codec), count=4)


def bomb(codec: str, inflated: int) -> bytes:
    """A batch in `codec` whose records section inflates to `inflated` zero bytes (snappy: a block whose length
    preamble declares it, as snappy's ratio is bounded; the others really do inflate)."""
    if codec == "gzip":
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        chunk = bytes(1 << 20)
        parts = [c.compress(chunk) for _ in range(inflated >> 20)]
        payload = b"".join(parts) + c.flush()
    elif codec == "lz4":
        import lz4.frame

        payload = lz4.frame.compress(bytes(inflated))
    elif codec == "zstd":
        import zstandard

        payload = zstandard.ZstdCompressor(level=3).compress(bytes(inflated))
    else:
        preamble = bytearray()
        n = inflated
        while n >= 0x80:
            preamble.append((n & 0x7F) | 0x80)
            n >>= 7
        preamble.append(n)
        payload = bytes(preamble) + b"\x00" * 64
    return repack(good_batch(codec), payload)
