"""One log line per request for its partitions' errors, not one per partition.

Why: a request may name thousands of partitions, each refused (a topic that does not exist, a partition past its
topic's count); a WARNING per partition wrote thousands of lines on the event loop for one request (issue 33's
loop-lag guard saw a hundred milliseconds of it) and let any client flood the broker's log. Handlers collect
their partitions' errors and log them here: how many, and the first few with their reasons.

This module must never log a record's contents.
"""

from __future__ import annotations

import logging

__all__ = ["PartitionErrors", "SHOWN"]

SHOWN = 5  # partitions named in the line; the rest are counted


class PartitionErrors:
    """The errors of one request's partitions, logged at once by `log`."""

    __slots__ = ("_what", "_client", "_first", "_count")

    def __init__(self, what: str, client: str) -> None:
        self._what = what
        self._client = client
        self._first: list[str] = []
        self._count = 0

    def add(self, topic: str, partition: int, error: object) -> None:
        self._count += 1
        if len(self._first) < SHOWN:
            self._first.append(f"'{topic}' partition {partition}: {error}")

    def log(self, logger: logging.Logger, level: int = logging.WARNING) -> None:
        if not self._count:
            return
        more = f" (and {self._count - len(self._first)} more)" if self._count > len(self._first) else ""
        logger.log(level, "%s from %s: %d partition(s) refused: %s%s", self._what, self._client, self._count,
                   "; ".join(self._first), more)
