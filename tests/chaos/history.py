"""The run's history: every operation and every fault, with timestamps, in one file the checker reads back.

Why: a verdict that cannot be re-checked is an anecdote. Everything the
checker needs — acknowledgements, failures, deliveries, commits, faults,
the final partition states, the records found on disk and each replica's
digest below the high watermark — is appended here while the run goes, one
JSON array per line, gzip-compressed (`history.jsonl.gz`). The checker
reads only this file, during the run's own verdict and under
`runner --replay FILE` alike, so both give the same answer.

Line shapes (first element is the type; `t` is wall-clock seconds):
  ["meta", {...}]                                   the run's settings, seed, schedule
  ["ack", t, producer, seq, topic, partition, offset]
  ["nack", t, producer, seq, topic, partition, error]
  ["pfatal", t, producer, reason]                   a producer instance failed fatally and was replaced
  ["pidem", t, producer, facility, text]           a librdkafka `debug=eos` line on why it bumped its idempotent epoch
  ["dlv", t, group, member, topic, partition, offset, producer, seq]
  ["commit", t_sent, t_done, group, member, topic, partition, offset, error|null]
  ["fault", t0, t1, index, kind, params, outcome]
  ["recovered", t, index, seconds|null]             cluster whole again after fault `index` (null: not within the bound)
  ["exit", t, broker, returncode, detail]           a broker exited without the nemesis asking
  ["stop", t, broker, seconds, returncode]          the final clean stop of one broker
  ["state", t, {topic: [[p, leader, replicas, isr, hw, leo], ...]}]
  ["log", topic, partition, broker, [[offset, producer, seq, producer id, producer epoch, batch base seq,
                                      leader epoch], ...]]      records on disk (producer -1: not ours)
  ["replica", topic, partition, broker, {...}]      log start/end, bytes and sha256 below the reference high watermark
  ["end", t, {...}]

It must never hold the run's records in memory: lines go to the file as they come.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from pathlib import Path
from typing import Any, Iterator

__all__ = ["History", "read_history"]


class History:
    """Thread-safe appender; `close()` flushes. Safe to call after close (lines are dropped, never raise)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = gzip.open(path, "wt", encoding="utf-8", compresslevel=3)
        self._lock = threading.Lock()
        self._closed = False
        self._last_flush = time.monotonic()

    def add(self, *entry: Any) -> None:
        line = json.dumps(list(entry), separators=(",", ":"))
        with self._lock:
            if self._closed:
                return
            self._fh.write(line + "\n")
            now = time.monotonic()
            if now - self._last_flush > 5:
                self._fh.flush()
                self._last_flush = now

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._fh.close()


def read_history(path: Path | str) -> Iterator[list]:
    """The history's lines, in order. A run killed mid-write leaves a truncated gzip tail: the lines before it count."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        try:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    yield json.loads(line)
                except ValueError:
                    return  # a torn last line
        except (EOFError, OSError):
            return
