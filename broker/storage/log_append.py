"""The write path of a partition log: a leader's validated, numbered appends and a follower's copies.

Why it exists: an append is the hottest thing the storage layer does and the only one that moves the
log end. As leader it validates a produce request's batches (per batch: sizes, CRC, offsets — one
walk over their headers, `validate`, whose `BatchInfo`s the replica layer hands back), gives them
offsets and the leader epoch in place and appends them; as follower it appends batches keeping their
offsets. It asks the rolls part whether the active segment must roll first and the durability part
for the fsync `flush.messages` calls for. `Log` composes it and binds its three methods as its own,
so a produce costs no hop through `Log`.

It must never decode records (except where the topic asks for it: a compacted topic's key check, a
`compression.type` codec's recompression — both per batch), never fsync under the log lock, never
roll on an event loop's append when the roll can wait (`defer_roll`), nor import networking.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kelp.errors import InvalidRecordError, KafkaStorageError, KelpError, UnsupportedCompressionTypeError
from kelp.records.build import recompress
from kelp.records.compression import COMPRESSION_NAMES
from kelp.records.header import BatchInfo, assign_offsets, set_log_append_time
from kelp.records.record import records_have_keys
from kelp.records.validation import check_sizes, parse_batches

from .log_durability import LogDurability
from .log_roll import SegmentRoller
from .log_state import LogState

__all__ = ["AppendResult", "LogAppender"]

log = logging.getLogger("kelp.broker.storage")


@dataclass(slots=True)
class AppendResult:
    """What an append did: the offsets it assigned and the timestamps it stored."""

    first_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    max_timestamp: int
    record_count: int
    batches: list[BatchInfo] = field(default_factory=list)
    # flush.messages is reached and the caller asked to fsync itself (`defer_flush`): `flush()` before it acknowledges.
    flush_due: bool = False
    # The active segment is due a roll that the caller asked to make itself (`defer_roll`): `roll_when_due()` in a
    # worker thread, with no append to this log meanwhile.
    roll_due: bool = False


class LogAppender:
    """The appends of one `Log`."""

    __slots__ = ("_state", "_segments", "_lock", "_rolls", "_durability")

    def __init__(self, state: LogState, rolls: SegmentRoller, durability: LogDurability) -> None:
        self._state = state
        self._segments = state.segments
        self._lock = state.lock
        self._rolls = rolls
        self._durability = durability

    def validate(self, data: bytes | bytearray | memoryview, *, origin: str = "client",
                 limit_size: bool = True) -> list[BatchInfo]:
        """The one walk over `data`'s batch headers an append as leader makes: sizes (with `limit_size`, each
        batch against `max.message.bytes`), magic, CRC (`parse_batches`), then the log's own rules per batch (a
        record count its last offset delta agrees with, a known codec, control batches only from the
        coordinator). Raises `CorruptRecordError`, `RecordTooLargeError`, `InvalidRecordError`,
        `UnsupportedForMessageFormatError` naming the partition. The `BatchInfo`s it returns are what
        `append_as_leader(batches=...)` takes, so the leader's checks before the append read no header again.
        """
        try:
            batches = parse_batches(
                data, max_batch_bytes=self._state.config.max_message_bytes if limit_size else None)
        except KelpError as exc:
            raise self._named(exc) from None
        for info in batches:
            if info.record_count <= 0:
                raise InvalidRecordError(f"{self._state.name}: batch at byte {info.position} holds no records")
            if info.last_offset_delta != info.record_count - 1:
                raise InvalidRecordError(
                    f"{self._state.name}: batch at byte {info.position} has {info.record_count} records "
                    f"but last offset delta {info.last_offset_delta}"
                )
            if info.compression not in COMPRESSION_NAMES:
                raise UnsupportedCompressionTypeError(
                    f"{self._state.name}: batch at byte {info.position} uses unknown compression codec id "
                    f"{info.compression} (Kafka's are 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)")
            if info.is_control and origin != "coordinator":
                raise InvalidRecordError(f"{self._state.name}: clients may not produce control batches")
        return batches

    def append_as_leader(
        self, data: bytes | bytearray | memoryview, *, leader_epoch: int, origin: str = "client",
        defer_flush: bool = False, defer_roll: bool = False, batches: list[BatchInfo] | None = None,
        keys_checked: bool = False,
    ) -> AppendResult:
        """Validate `data`'s batches, assign offsets and `leader_epoch`, append. Per batch only.

        `batches`: what `validate(data, origin=origin)` returned for these very bytes, when the caller
        validated them first (the leader's path does, before its producer-state checks): no header is read
        again; only `max.message.bytes` is checked again on them (a rebuild in another codec changes sizes).

        When `flush.messages` is reached the append fsyncs (outside the lock) before it returns — unless
        `defer_flush`: then the result says `flush_due` and the caller runs `flush()` itself, in a worker
        thread (an event loop must never fsync), before it acknowledges.

        `defer_roll` (an event loop's append: creating a segment's files is file-system work that can
        block): a roll that `segment.bytes`, `segment.ms` or a full index calls for does not happen here;
        the batches go to the active segment (one append past `segment.bytes` at most) and the result
        says `roll_due`; the caller runs `roll_when_due()` in a worker thread before it appends again.

        A writable `data` (bytearray, writable memoryview) is rewritten in place
        and so handed over to the log; read-only bytes are copied first.

        `keys_checked`: the caller walked every record of `batches` and found each keyed (the leader's
        `check_batch_records`, off the loop): a compacted topic's key check is not made again here.

        `origin="coordinator"` (the broker's own writers, e.g. transaction
        markers) may append control batches; clients may not. Raises
        `CorruptRecordError`, `RecordTooLargeError`, `InvalidRecordError`,
        `UnsupportedForMessageFormatError` naming the partition and the limit.
        """
        state = self._state
        config = state.config
        if batches is None:
            batches = self.validate(data, origin=origin)
        else:
            try:
                check_sizes(batches, config.max_message_bytes)
            except KelpError as exc:
                raise self._named(exc) from None
        # A writable buffer (the produce request's own frame) is rewritten in place: no copy.
        if isinstance(data, bytearray) or (isinstance(data, memoryview) and not data.readonly):
            buf = data
        else:
            buf = bytearray(data)
        if config.compression_type != "producer":
            # compression.type names a codec: batches in another one are rebuilt once each (Kafka's LogValidator).
            rebuilt = recompress(buf, batches, config.compression_type)
            if rebuilt is not None:
                buf, batches = rebuilt
        if config.compact and not keys_checked:
            for info in batches:
                if not records_have_keys(buf, info):
                    raise InvalidRecordError(
                        f"{state.name}: compacted topic (cleanup.policy={config.cleanup_policy}) "
                        "refuses records without a key"
                    )
        with self._lock:
            state.check_open()
            config = state.config  # as it is under the lock (`update_config` takes it)
            now_ms = state.clock_ms()
            first = self._segments[-1].next_offset
            next_offset = assign_offsets(buf, batches, base_offset=first, leader_epoch=leader_epoch)
            append_time = -1
            if config.log_append_time:
                append_time = now_ms
                for info in batches:
                    set_log_append_time(buf, info, now_ms)
            state.leader_epochs.assign(leader_epoch, first)
            result, flush_due = self._append(buf, batches, now_ms, first, next_offset - 1, append_time,
                                             defer_roll=defer_roll)
        return self._flushed(result, flush_due, defer_flush)

    def append_as_follower(self, data: bytes | bytearray | memoryview, *,
                           defer_flush: bool = False, defer_roll: bool = False) -> AppendResult | None:
        """Append batches fetched from the leader, keeping their offsets and leader epochs (`defer_flush` and
        `defer_roll` as for `append_as_leader`).

        Returns None for empty `data`. Raises `InvalidRecordError` if the
        batches do not continue this log (the replica layer truncates first).
        """
        if not data:
            return None
        state = self._state
        batches = parse_batches(data)
        with self._lock:
            state.check_open()
            expected = self._segments[-1].next_offset
            for info in batches:
                if info.base_offset < expected:
                    raise InvalidRecordError(
                        f"{state.name}: follower append at offset {info.base_offset} is below the log end {expected}"
                    )
                expected = info.next_offset
            epochs = state.leader_epochs
            for info in batches:
                epochs.assign(info.partition_leader_epoch, info.base_offset)
            result, flush_due = self._append(data, batches, state.clock_ms(), batches[0].base_offset,
                                             batches[-1].last_offset, -1, defer_roll=defer_roll)
        return self._flushed(result, flush_due, defer_flush)

    def _named(self, exc: KelpError) -> KelpError:
        """A check's error, naming this log."""
        return type(exc)(f"{self._state.name}: {exc}")

    def _append(self, data: bytes | bytearray | memoryview, batches: list[BatchInfo], now_ms: int, first: int,
                last: int, append_time: int, *, defer_roll: bool) -> tuple[AppendResult, bool]:
        """Roll if needed (unless `defer_roll` and the roll can wait), write. Caller holds the lock.

        Returns what the append did (offsets `first` to `last`; whether a deferred roll is due,
        `roll_when_due()`) and whether the flush policy wants an fsync now — the caller's, after it
        released the lock (`_flushed`); `flush.ms` is the periodic task's (`maybe_flush()` in a worker
        thread), never the append path's.
        """
        state = self._state
        segment = self._segments[-1]
        last_offset = batches[-1].last_offset
        reason = self._rolls.roll_reason(segment, len(data), last_offset, now_ms)
        roll_due = False
        if reason is not None:
            if defer_roll and self._rolls.roll_can_wait(segment, len(data), last_offset):
                roll_due = True
            else:
                log.debug("rolling %s at offset %d: %s", state.name, segment.next_offset, reason)
                segment = self._rolls.roll_now(now_ms)
        try:
            segment.append(data, batches, now_ms=now_ms)
        except OSError as exc:
            raise KafkaStorageError(f"{state.name}: write to {segment.log_path} failed: {exc}") from exc
        records = sum(b.record_count for b in batches)
        state.unflushed_records += records
        flush_messages = state.config.flush_messages
        result = AppendResult(first_offset=first, last_offset=last, log_append_time_ms=append_time,
                              max_timestamp=max(b.max_timestamp for b in batches), record_count=records,
                              batches=batches, roll_due=roll_due)
        return result, flush_messages > 0 and state.unflushed_records >= flush_messages

    def _flushed(self, result: AppendResult, flush_due: bool, defer_flush: bool) -> AppendResult:
        """`result`, once the fsync `flush.messages` calls for is made — or, with `defer_flush`, left to the
        caller (`result.flush_due`). Never under the log lock."""
        if flush_due:
            if defer_flush:
                result.flush_due = True
            else:
                self._durability.flush()
        return result
