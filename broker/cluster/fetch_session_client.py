"""The replica fetcher's half of an incremental fetch session (KIP-227): Kafka's client-side FetchSessionHandler.

Why: a follower following 1,000s of partitions on one leader named every one of them in every fetch, and the
leader read and answered every one. In a session the leader remembers what the follower last asked; the
follower names only the partitions whose fetch position changed since (or that are new to the session) and the
ones it no longer fetches (forgotten), and the leader answers only the partitions with news.

The rules, as Kafka's `FetchSessionHandler`: with no session (epoch 0) a fetch is full and names every
partition; its answer's session id (0: the leader keeps none) starts the session at epoch 1, and each answered
incremental fetch moves the epoch on. A session error (FETCH_SESSION_ID_NOT_FOUND: evicted or unknown, then the
next full fetch opens a new one; INVALID_FETCH_SESSION_EPOCH and the others: the next full fetch names the old
session, which closes it) means the answer carries nothing and the next fetch is full. An incremental answer
with session id 0 means the leader closed the session: its partitions are applied, the next fetch is full.

What the leader believes the follower knows must never run ahead of what the follower applied: a request
whose answer was lost (a timeout, a dropped connection) or an answer the fetcher did not apply for a
partition (its state changed while the fetch was in flight) would leave the leader thinking the follower has
a high watermark it never adopted, and an unchanged partition is not answered again — so any of those calls
`reset`, and the next fetch is full (`tests/replication/test_fetch_sessions_follower.py`).

This module never does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from kelp.errors import ErrorCode
from kelp.kafka_client.fetch_request import FollowerFetchPartition

__all__ = ["FetchSessionClient", "SessionFetch", "FETCH_SESSION_ID_NOT_FOUND"]

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
_MAX_INT = 0x7FFFFFFF

Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class SessionFetch:
    """What one fetch sends: its session id and epoch, the partitions named and the partitions forgotten."""

    session_id: int
    epoch: int
    full: bool
    topics: list[tuple[str, list[FollowerFetchPartition]]]
    forgotten: list[tuple[str, list[int]]]


def _grouped(keys: Sequence[Key]) -> list[tuple[str, list[int]]]:
    """Partitions grouped by topic, a topic named again when its partitions are not next to each other."""
    out: list[tuple[str, list[int]]] = []
    for topic, p in keys:
        if not out or out[-1][0] != topic:
            out.append((topic, []))
        out[-1][1].append(p)
    return out


class FetchSessionClient:
    """The session one replica fetcher holds with one leader."""

    __slots__ = ("session_id", "epoch", "_sent", "_pending")

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH  # the epoch the next fetch carries (0: full)
        self._sent: dict[Key, FollowerFetchPartition] = {}  # the session's partitions as the leader holds them
        self._pending: dict[Key, FollowerFetchPartition] = {}  # as they will be once the fetch in flight is answered

    def build(self, wanted: Mapping[Key, FollowerFetchPartition], changed: Iterable[Key] | None = None) -> SessionFetch:
        """The next fetch for `wanted` (in the order the leader should read them when fetching in full).

        `changed`: the only partitions that may differ from the last fetch's, added to or left out of `wanted`
        since (None: any); an incremental fetch then compares only those."""
        full = self.epoch == INITIAL_EPOCH
        if full:
            named = list(wanted)
            gone: list[Key] = []
        elif changed is None:
            sent = self._sent
            named = [k for k, p in wanted.items() if sent.get(k) != p]
            gone = [k for k in sent if k not in wanted]
        else:
            sent = self._sent
            named = [k for k in changed if k in wanted and sent.get(k) != wanted[k]]
            gone = [k for k in changed if k in sent and k not in wanted]
        self._pending = dict(wanted)
        topics: list[tuple[str, list[FollowerFetchPartition]]] = []
        for topic, p in named:
            if not topics or topics[-1][0] != topic:
                topics.append((topic, []))
            topics[-1][1].append(wanted[(topic, p)])
        return SessionFetch(self.session_id, self.epoch, full, topics, _grouped(gone))

    def handle(self, fetch: SessionFetch, session_id: int, error: int) -> bool:
        """Take the answer to `fetch` (its top-level error and session id); False: its partitions must be
        ignored (a session error)."""
        if error != ErrorCode.NONE:
            if error == FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            self.reset()
            return False
        if fetch.full:
            self.session_id = session_id
            self.epoch = INITIAL_EPOCH if session_id == INVALID_SESSION_ID else 1
            self._sent = self._pending if session_id != INVALID_SESSION_ID else {}
            return True
        if session_id == INVALID_SESSION_ID:  # the leader closed the session: this answer stands, start over
            self.session_id = INVALID_SESSION_ID
            self.reset()
            return True
        if session_id != self.session_id:
            self.reset()  # not the session asked: ignore the answer, close ours with a full fetch
            return False
        self.epoch = 1 if self.epoch == _MAX_INT else self.epoch + 1
        self._sent = self._pending
        return True

    def reset(self) -> None:
        """The next fetch is full (and names the session, so the leader closes it)."""
        self.epoch = INITIAL_EPOCH
        self._sent = {}
        self._pending = {}
