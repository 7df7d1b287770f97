"""The compression codecs of RecordBatch v2: their ids, names, and which this installation can use.

Why it exists: a codec is named by users (`compression.type`, the CLI, the HTTP API, Spark options)
and stored as three bits of a batch's attributes; both spellings, and whether the Python library a
codec needs is installed, are answered here once, with errors naming the missing library.
"""

from __future__ import annotations

from kelp.errors import InvalidRecordError, UnsupportedCompressionTypeError

COMPRESSION_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
COMPRESSION_NAMES = {v: k for k, v in COMPRESSION_CODECS.items()}
# The Python library each codec needs (none for "none" and gzip), named in errors when it is missing.
COMPRESSION_LIBRARIES = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}


def codec_id(compression: str | int) -> int:
    """The attributes' codec bits for `compression` (a name or an id), once its library is known to be here.

    Raises `InvalidRecordError` for an unknown codec, `UnsupportedCompressionTypeError` naming the library
    when the codec's is not installed.
    """
    from kafka import codec as codecs

    code = COMPRESSION_CODECS.get(compression) if isinstance(compression, str) else compression
    if code is None or code not in COMPRESSION_NAMES:
        raise InvalidRecordError(
            f"unknown compression {compression!r}; use one of {', '.join(COMPRESSION_CODECS)}"
        )
    available = {0: True, 1: True, 2: codecs.has_snappy(), 3: codecs.has_lz4(), 4: codecs.has_zstd()}
    if not available[code]:
        name = COMPRESSION_NAMES[code]
        raise UnsupportedCompressionTypeError(
            f"compression {name} is not available in this installation: "
            f"its library {COMPRESSION_LIBRARIES[name]} is not installed"
        )
    return code


def available_compressions() -> list[str]:
    """Codec names this installation can both build and read."""
    names = []
    for name in COMPRESSION_CODECS:
        try:
            codec_id(name)
        except UnsupportedCompressionTypeError:
            continue
        names.append(name)
    return names
