"""Followers pull from leaders: one fetcher per source broker covering all its partitions.

Why: Kafka's `ReplicaFetcherThread`. A follower sends the leader ordinary
Fetch requests with `replica_id` = its broker id, from its log end offset;
the leader learns the follower's progress from those offsets and answers
with its high watermark, which the follower adopts. Before fetching under a
new leader epoch the follower asks OffsetForLeaderEpoch where its own latest
epoch ended on the leader and truncates anything beyond (records a deposed
leader wrote but never replicated), so every replica ends up byte for byte
the leader's log. When the leader answers with an older epoch than the one
asked — it never had ours — the follower cuts where its own history below
that epoch ends and asks again with its next older epoch, round after round,
until both agree on an epoch (KIP-279; Kafka's
`AbstractFetcherThread.getOffsetTruncationState`). A follower with no epochs
at all truncates to its high watermark (Kafka's `truncateToHighWatermark`).

Fetches run in an incremental fetch session with the leader (KIP-227, `fetch_session_client`): after one
full fetch, each names only the partitions whose fetch position changed and the leader answers only those with
news; a lost or partly ignored answer, or a session error, makes the next fetch full again. Between full builds
(at least every REBUILD_S, and after any add, remove or truncation) a fetch looks again only at the partitions
the previous answers touched (`_wanted`): at 1,000s of partitions per leader, building every partition's part
of each fetch was most of a follower's work per acks=all record (issue 38).

Every partition's fetch state is an object replaced (never reused) when the
partition is added again: a response to a request sent for an older state —
the partition was removed and re-added at a new epoch while the request was
in flight — is dropped, as is a fetch response whose offset is no longer the
log end (Kafka's `processFetchRequest` checks the same).

Appends happen on the event loop (one page-cache write per partition and
response, like a produce); truncation runs in a worker thread through the
replica manager (`truncate_follower`), which keeps the replica busy — and a
leadership taken meanwhile waiting — until it landed. Every wait is bounded
(`replica.fetch.wait.max.ms`, `replica.socket.timeout.ms`), a failed request
backs off `replica.fetch.backoff.ms` and reconnects.

A partition this broker follows out of the ISR and listed in its topic's
`follower.replication.throttled.replicas` is left out of the request while the
follower replication quota is over its rate, and its bytes are counted against
it (KIP-73; `replication_quota`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from kafka.protocol.consumer import OffsetForLeaderEpochRequest

from kelp.config.broker import BrokerConfig
from kelp.errors import ErrorCode, KelpError
from kelp.kafka_client import AsyncConnection, AuthenticationFailed, BrokerUnavailable
from kelp.kafka_client.fetch_request import VERSION as FETCH_VERSION
from kelp.kafka_client.fetch_request import FollowerFetch, FollowerFetchPartition
from kelp.kafka_client.fetch_response import PartitionAnswer, decode_fetch_response

from ..metadata.model import BrokerEndpoint
from ..storage import Log
from .fetch_session_client import FetchSessionClient
from .inter_broker import InterBrokerSecurity

if TYPE_CHECKING:  # the fetcher drives the replica manager, which holds it only through `ReplicaFetchers`
    from ..replica.manager import ReplicaManager

__all__ = ["ReplicaFetcherManager"]

log = logging.getLogger("kelp.broker.replication")

# A fetcher the leader refuses to authenticate tries again this often (seconds).
AUTH_RETRY_S = 5.0
# A fetcher builds every partition's part of its fetch at least this often (seconds; see `ReplicaFetcher._wanted`).
REBUILD_S = 1.0
EPOCH_VERSION = 3
# Fetch errors after which our metadata or the leader's is behind: back off until the next push settles it.
_METADATA_BEHIND = (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


@dataclass(slots=True, eq=False)
class _FetchState:
    """One partition's fetch state under one leader epoch; compared by identity (a re-add makes a new one)."""

    leader_epoch: int
    truncating: bool = True


class ReplicaFetcherManager:
    def __init__(self, *, replicas: ReplicaManager, broker_id: int,
                 endpoint_of: Callable[[int], BrokerEndpoint | None], config: BrokerConfig,
                 inter_broker: InterBrokerSecurity | None = None) -> None:
        self.replicas = replicas
        self.broker_id = broker_id
        self.endpoint_of = endpoint_of
        self.config = config
        self._inter_broker = inter_broker
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._where: dict[tuple[str, int], int] = {}
        self._stopped = False

    def add(self, topic: str, partition: int, *, leader: int, leader_epoch: int) -> None:
        if self._stopped:
            return
        key = (topic, partition)
        old = self._where.get(key)
        if old is not None and old != leader:
            self._fetchers[old].remove(key)
        fetcher = self._fetchers.get(leader)
        if fetcher is None:
            fetcher = self._fetchers[leader] = ReplicaFetcher(self, leader)
        self._where[key] = leader
        fetcher.add(key, leader_epoch)

    def remove(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        leader = self._where.pop(key, None)
        if leader is not None and leader in self._fetchers:
            self._fetchers[leader].remove(key)

    @property
    def inter_broker(self) -> InterBrokerSecurity:
        """TLS and SASL for the leaders' inter-broker listener (made from the config on first use)."""
        if self._inter_broker is None:
            self._inter_broker = InterBrokerSecurity(self.config.listener_setup)
        return self._inter_broker

    def lag(self) -> dict[tuple[str, int], int]:
        return {key: f.state[key].leader_epoch for f in self._fetchers.values() for key in f.state}

    async def stop(self) -> None:
        self._stopped = True
        await asyncio.gather(*(f.stop() for f in self._fetchers.values()), return_exceptions=True)
        self._fetchers.clear()
        self._where.clear()


class ReplicaFetcher:
    """Fetches every partition this broker follows on one leader broker."""

    def __init__(self, manager: ReplicaFetcherManager, leader: int) -> None:
        self.m = manager
        self.leader = leader
        self.state: dict[tuple[str, int], _FetchState] = {}
        self._wake = asyncio.Event()
        self.session = FetchSessionClient()  # KIP-227: this fetcher's session with the leader
        self._conn: AsyncConnection | None = None
        self._auth_failure = ""  # the last authentication failure logged
        self._stopping = False
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{leader}")
        cfg = manager.config
        self.wait_ms = int(cfg["replica.fetch.wait.max.ms"])
        self.max_bytes = int(cfg["replica.fetch.max.bytes"])
        self.response_max_bytes = int(cfg["replica.fetch.response.max.bytes"])
        self.backoff_s = int(cfg["replica.fetch.backoff.ms"]) / 1000.0
        self.timeout_s = int(cfg["replica.socket.timeout.ms"]) / 1000.0
        # The next fetch's parts as last built (`_wanted`), the partitions answered since, and those throttled.
        self._built: dict[tuple[str, int], tuple[_FetchState, FollowerFetchPartition]] | None = None
        self._built_at = 0.0
        self._built_over = False
        self._touched: set[tuple[str, int]] = set()
        self._throttled: set[tuple[str, int]] = set()
        self._held_back = 0  # partitions the last build left out for the quota (while any is, every build is full)

    def add(self, key: tuple[str, int], leader_epoch: int) -> None:
        self.state[key] = _FetchState(leader_epoch)
        self._invalidate()
        self._wake.set()

    def remove(self, key: tuple[str, int]) -> None:
        self.state.pop(key, None)
        self._invalidate()

    async def stop(self) -> None:
        # The flag, not only the cancel: on Python 3.11 `asyncio.wait_for` can swallow a cancellation that
        # races with its inner future finishing (a refused connection), and the loop would go on forever.
        self._stopping = True
        self._wake.set()
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        if self._conn is not None:
            await self._conn.close()

    async def _connection(self) -> AsyncConnection:
        """The connection to the leader's current address; one to an address it left is closed first."""
        ep = self.m.endpoint_of(self.leader)
        if ep is None:
            raise BrokerUnavailable(f"broker {self.leader} is not a live member of the cluster")
        security = self.m.inter_broker
        security.maybe_reload()
        # The leader's inter-broker listener (`BrokerEndpoint.host/port`), with that listener's security.
        if self._conn is None or (self._conn.host, self._conn.port) != (ep.host, ep.port):
            old, self._conn = self._conn, AsyncConnection(
                ep.host, ep.port, client_id=f"kelp-replica-{self.m.broker_id}",
                timeout_s=self.timeout_s + self.wait_ms / 1000.0, security=security.kafka)
            if old is not None:
                await old.close()
        return self._conn

    async def _run(self) -> None:
        while not self._stopping:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError()
            if not self.state:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), 5.0)
                except asyncio.TimeoutError:
                    pass
                continue
            try:
                conn = await self._connection()
                if any(s.truncating for s in self.state.values()):
                    await self._truncate(conn)
                await self._fetch(conn)
            except asyncio.CancelledError:
                raise
            except AuthenticationFailed as exc:
                # The same credentials fail the same way until someone changes them: say so once per cause, and
                # try again at a pace that does not flood the leader.
                if str(exc) != self._auth_failure:
                    self._auth_failure = str(exc)
                    log.error("replica fetcher for leader %d cannot authenticate: %s (check "
                              "sasl.mechanism.inter.broker.protocol and the inter-broker listener's JAAS "
                              "username/password); retrying every %.0fs", self.leader, exc, AUTH_RETRY_S)
                await asyncio.sleep(max(self.backoff_s, AUTH_RETRY_S))
            except BrokerUnavailable as exc:
                log.warning("replica fetcher for leader %d: %s; retrying in %.1fs", self.leader, exc, self.backoff_s)
                await asyncio.sleep(self.backoff_s)
            except Exception:
                log.exception("replica fetcher for leader %d failed; retrying in %.1fs", self.leader, self.backoff_s)
                await asyncio.sleep(self.backoff_s)

    # -- truncation (KIP-101/279) ------------------------------------------
    def _current(self, key: tuple[str, int], st: _FetchState) -> bool:
        """True while `st` is still this partition's fetch state (not removed, not replaced by a re-add)."""
        return self.state.get(key) is st

    async def _truncate(self, conn: AsyncConnection) -> None:
        """One round of truncation for every partition in that phase (the run loop calls it until none is)."""
        self._invalidate()
        replicas = self.m.replicas
        P = OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition
        asked: dict[tuple[str, int], tuple[_FetchState, int]] = {}
        by_topic: dict[str, list[OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition]] = {}
        without_epochs: list[tuple[tuple[str, int], _FetchState]] = []
        for key, st in list(self.state.items()):
            if not st.truncating:
                continue
            part = replicas.get_partition(*key)
            if part is None:
                self.state.pop(key, None)
                continue
            if not replicas.follower_ready(key[0], key[1], st.leader_epoch):
                continue  # a job on its log in flight, or metadata not caught up yet: a later round
            latest = part.log.latest_epoch()
            if latest < 0:
                without_epochs.append((key, st))
                continue
            asked[key] = (st, latest)
            by_topic.setdefault(key[0], []).append(
                P(partition=key[1], current_leader_epoch=st.leader_epoch, leader_epoch=latest))
        for key, st in without_epochs:
            # No epochs to compare (an epoch checkpoint lost or unreadable): keep only what is committed.
            part = replicas.get_partition(*key)
            if part is None or not self._current(key, st):
                continue
            hw = part.log.high_watermark
            if part.log.log_end_offset <= hw:
                st.truncating = False  # nothing beyond what is committed (a new, empty replica): nothing to cut
                continue
            log.info("%s-%d: no leader epochs recorded; truncating to the high watermark %d", key[0], key[1], hw)
            if (await replicas.truncate_follower(key[0], key[1], hw, leader_epoch=st.leader_epoch)
                    and self._current(key, st)):
                st.truncating = False
        if not by_topic:
            return
        req = OffsetForLeaderEpochRequest(
            replica_id=self.m.broker_id,
            topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=t, partitions=ps)
                    for t, ps in by_topic.items()],
        )
        resp = await conn.request(req, EPOCH_VERSION, timeout_s=self.timeout_s)
        for t in resp.topics:
            for r in t.partitions:
                key = (t.topic, r.partition)
                sent = asked.get(key)
                if sent is None:
                    continue
                st, epoch_asked = sent
                if not self._current(key, st) or not st.truncating:
                    continue  # removed or re-added at another epoch while the request was in flight: stale
                if r.error_code != ErrorCode.NONE:
                    log.info("%s-%d: leader %d answered OffsetForLeaderEpoch with error %d; retrying",
                             t.topic, r.partition, self.leader, r.error_code)
                    continue
                part = replicas.get_partition(*key)
                if part is None:
                    continue
                target, done = self._truncation_offset(part.log, r.leader_epoch, r.end_offset)
                if not done:
                    log.info("%s-%d: leader %d has no epoch %d (it answered epoch %d ending at %d): truncating to "
                             "%d, where our history below its epoch ends, and asking again",
                             t.topic, r.partition, self.leader, epoch_asked, r.leader_epoch, r.end_offset, target)
                if not await replicas.truncate_follower(key[0], key[1], target, leader_epoch=st.leader_epoch):
                    continue
                if done and self._current(key, st):
                    st.truncating = False

    @staticmethod
    def _truncation_offset(lg: Log, leader_epoch: int, leader_end: int) -> tuple[int, bool]:
        """Kafka's follower rule (`getOffsetTruncationState`): where this log must end given the leader's
        answer for our latest epoch, and whether truncation is complete (False: ask again, KIP-279)."""
        leo = lg.log_end_offset
        if leader_end < 0:
            return min(lg.high_watermark, leo), True  # the leader knows nothing of our epochs: keep what is committed
        if leader_epoch < 0:
            return min(leader_end, leo), True
        local_epoch, local_end = lg.end_offset_for_epoch(leader_epoch)
        if local_end < 0:
            return min(leader_end, leo), True  # no epoch of ours at or below the leader's: its end is the bound
        if local_epoch != leader_epoch:
            # We never had the leader's epoch: cut where our history below it ends, then ask again with the
            # epoch that leaves as our latest (each round drops at least one epoch of ours).
            return min(local_end, leo), False
        return min(leader_end, local_end, leo), True

    # -- fetching ------------------------------------------------------------
    def _entry(self, key: tuple[str, int], st: _FetchState, over: bool) -> tuple[FollowerFetchPartition | None, int]:
        """One partition's part of the next fetch (None: left out), and whether the quota held it back (1) or
        throttles it (-1)."""
        replicas = self.m.replicas
        topic, p = key
        if st.truncating:
            return None, 0
        part = replicas.get_partition(topic, p)
        if part is None or not replicas.follower_ready(topic, p, st.leader_epoch):
            return None, 0
        throttled = 0
        if self.m.broker_id not in part.isr and replicas.replication_quotas.follower.is_throttled(topic, p):
            if over:
                return None, 1  # catching up waits while this broker's follower quota is over its rate
            throttled = -1
        lg = part.log
        return FollowerFetchPartition(p, st.leader_epoch, lg.log_end_offset, lg.log_start_offset,
                                      self.max_bytes), throttled

    def _wanted(self, over: bool) -> tuple[dict[tuple[str, int], tuple[_FetchState, FollowerFetchPartition]],
                                           set[tuple[str, int]] | None]:
        """Every partition's part of the next fetch, and the partitions that may have changed since the last
        (None: all). Only the partitions the last answers touched are looked at again (`_touched`): at 1,000s
        of partitions per leader, building each one's part per fetch was a follower's main cost (issue 38). The
        whole set is built again at least every REBUILD_S, after an add, remove or truncation, for a full fetch
        and when the follower quota's state flips — which covers what no answer touches (a job ending, an ISR or
        throttle change, a log start moved by retention)."""
        now = asyncio.get_running_loop().time()
        built = self._built
        if (built is None or self.session.epoch == 0 or now - self._built_at >= REBUILD_S
                or over != self._built_over or self._throttled or self._held_back):
            built = {}
            held_back = 0
            self._throttled.clear()
            for key, st in self.state.items():
                fp, flag = self._entry(key, st, over)
                held_back += flag > 0
                if fp is not None:
                    built[key] = (st, fp)
                    if flag < 0:
                        self._throttled.add(key)
            self.m.replicas.replication_quotas.follower.skipped += held_back
            self._held_back = held_back
            self._built, self._built_at, self._built_over = built, now, over
            self._touched.clear()
            return built, None
        changed, self._touched = self._touched, set()
        for key in changed:
            st_now = self.state.get(key)
            fp, _ = self._entry(key, st_now, over) if st_now is not None else (None, 0)
            if fp is None or st_now is None:
                built.pop(key, None)
            else:
                built[key] = (st_now, fp)
        return built, changed

    def _invalidate(self) -> None:
        self._built = None

    async def _fetch(self, conn: AsyncConnection) -> None:
        replicas = self.m.replicas
        # flush.messages on a follower: the offsets this fetch reports as held must be fsynced first (off the loop).
        await replicas.flush_followers()
        quota = replicas.replication_quotas.follower
        # Partitions in the order of `state` (a full fetch names them in that order, the leader reads in request
        # order, and that order rotates); the session names only those whose position changed (KIP-227).
        entries, changed = self._wanted(quota.exceeded())
        throttled = self._throttled  # KIP-73: out of the ISR and listed in follower.replication...
        if not entries:
            await asyncio.sleep(self.backoff_s)
            return
        session = self.session
        fetch = session.build({key: fp for key, (_, fp) in entries.items()}, changed)
        # Encoded and decoded by hand (kafka-python's codec took about a millisecond per 1,000 partitions each
        # way); each partition's records come back as a view of the reply, handed to the log as they are.
        req = FollowerFetch(replica_id=self.m.broker_id, max_wait_ms=self.wait_ms, min_bytes=1,
                            max_bytes=self.response_max_bytes, topics=fetch.topics, session_id=fetch.session_id,
                            session_epoch=fetch.epoch, forgotten=fetch.forgotten)
        try:
            resp = await conn.request(req, FETCH_VERSION, timeout_s=self.timeout_s + self.wait_ms / 1000.0,
                                      decoder=decode_fetch_response)
        except BaseException:
            session.reset()  # the leader may have taken the fetch, or not: what it believes we know is unknown
            raise
        if not session.handle(fetch, resp.session_id, resp.error_code):
            log.info("replica fetcher for leader %d: fetch session %d epoch %d answered with error %d; fetching "
                     "in full", self.leader, fetch.session_id, fetch.epoch, resp.error_code)
            return
        backoff = False
        applied = True  # every answer taken as it came (else the session starts over: see fetch_session_client)
        served: list[tuple[str, int]] = []
        for t in resp.responses:
            for r in t.partitions:
                key = (t.topic, r.partition_index)
                self._touched.add(key)  # its part of the next fetch is looked at again
                entry = entries.get(key)  # as sent: `_wanted` changes it only at the next fetch
                if entry is None:
                    applied = False
                    continue
                st, offset = entry[0], entry[1].fetch_offset
                if not self._current(key, st):
                    applied = False
                    continue  # removed or re-added while the fetch was in flight: its answer is for another state
                part = replicas.get_partition(*key)
                if part is None or part.log.log_end_offset != offset or not replicas.follower_ready(
                        key[0], key[1], st.leader_epoch):
                    applied = False
                    continue  # the log moved (a truncation) since the request: appending would leave a gap
                if r.error_code == ErrorCode.NONE:
                    if r.records:
                        served.append(key)
                        if key in throttled:
                            quota.record(len(r.records))
                    try:
                        replicas.append_as_follower(
                            t.topic, r.partition_index, r.records or b"", leader_epoch=st.leader_epoch,
                            leader_high_watermark=r.high_watermark)
                        if r.log_start_offset > part.log.log_start_offset:
                            await asyncio.to_thread(replicas.follow_log_start, t.topic, r.partition_index,
                                                    r.log_start_offset)
                    except KelpError as exc:
                        log.warning("%s-%d: follower append failed: %s; truncating and fetching again", t.topic,
                                    r.partition_index, exc)
                        if self._current(key, st):
                            st.truncating = True
                elif r.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    await self._out_of_range(key, st, r)
                elif r.error_code in _METADATA_BEHIND:
                    backoff = True  # our metadata or the leader's is behind: the next push settles it
                else:
                    log.warning("%s-%d: leader %d answered fetch with error %d", t.topic, r.partition_index,
                                self.leader, r.error_code)
                    backoff = True
        # As Kafka's fetcher (`PartitionStates.updateAndMoveToEnd`): partitions that got records go to the end
        # of the next request, so that busy ones early in it cannot take every fetch's
        # replica.fetch.response.max.bytes and starve the rest (the leader fills a response in request order).
        for key in served:
            if key in self.state:  # not removed meanwhile
                self.state[key] = self.state.pop(key)
        if not applied:
            session.reset()  # the leader believes we hold what we dropped: the next fetch is full
        if backoff:
            await asyncio.sleep(self.backoff_s)

    async def _out_of_range(self, key: tuple[str, int], st: _FetchState,
                            r: PartitionAnswer) -> None:
        part = self.m.replicas.get_partition(*key)
        if part is None or not self._current(key, st):
            return
        lg = part.log
        if r.log_start_offset >= 0 and lg.log_end_offset < r.log_start_offset:
            log.warning("%s-%d: our log end %d is below the leader's log start %d: starting over there",
                        key[0], key[1], lg.log_end_offset, r.log_start_offset)
            await self.m.replicas.truncate_follower_fully(key[0], key[1], r.log_start_offset,
                                                         leader_epoch=st.leader_epoch)
        else:
            st.truncating = True  # ahead of the leader (or diverged): find the divergence point
