"""The topic id stored with each partition directory: Kafka's `partition.metadata` (KIP-516).

Why: a partition directory is named `<topic>-<partition>`, and a name outlives its topic — a topic deleted and
re-created while a replica was down (or restarted within its lease) has the same name and another id. Opened by
name alone, the old directory became the new topic's replica: the follower kept a prefix of the old topic's
records, rejoined the ISR and could serve them (issue 31 item 2). The id written here when the log is created is
compared with the metadata's before the log serves anything (`LogManager.get_or_create`); a directory whose id
differs is another topic's.

The format is Kafka's, so the file reads the same to anyone who knows Kafka's:

    version: 0
    topic_id: <the id as Kafka prints a Uuid: 16 bytes, URL-safe base64, no padding>

Kelp keeps topic ids as 32 hex digits; the conversion is here. Written to a temporary file, fsynced, renamed
into place and the directory fsynced: a log never exists on disk without its id once created. Worker threads
only (file I/O).
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

from kelp.errors import KafkaStorageError

__all__ = ["PARTITION_METADATA", "read_topic_id", "write_topic_id", "kafka_uuid", "hex_uuid"]

PARTITION_METADATA = "partition.metadata"
VERSION = 0


def kafka_uuid(topic_id: str) -> str:
    """Kelp's hex topic id as Kafka prints a Uuid (URL-safe base64 of the 16 bytes, no padding)."""
    return base64.urlsafe_b64encode(bytes.fromhex(topic_id)).decode().rstrip("=")


def hex_uuid(text: str) -> str:
    """Kafka's printed Uuid back to Kelp's 32 hex digits; ValueError if it is not one."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a 16-byte id")
    return raw.hex()


def read_topic_id(directory: Path) -> str | None:
    """The topic id stored in `directory`, or None when it has none (a log written before ids were stored).
    A file that exists but cannot be read or parsed raises KafkaStorageError: never taken for "no id"."""
    path = directory / PARTITION_METADATA
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise KafkaStorageError(f"{path} cannot be read ({exc})") from None
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    try:
        if int(fields["version"]) != VERSION:
            raise ValueError(f"version {fields['version']} is not {VERSION}")
        return hex_uuid(fields["topic_id"])
    except (KeyError, ValueError) as exc:
        raise KafkaStorageError(f"{path} is malformed ({exc}): {text[:200]!r}") from None


def write_topic_id(directory: Path, topic_id: str) -> None:
    """Store `topic_id` (hex) in `directory`, durably."""
    path = directory / PARTITION_METADATA
    tmp = directory / (PARTITION_METADATA + ".tmp")
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(f"version: {VERSION}\ntopic_id: {kafka_uuid(topic_id)}\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
