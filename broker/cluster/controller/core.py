"""The controller: the one writer of cluster metadata, active on the holder of the controller lease.

Why: partition leadership, ISR changes, topic creation and reassignment must
be decided in one place, in one order, and be durable before anyone acts on
them — Kafka's `QuorumController`/`ReplicationControlManager`. Kelp's
controller turns every decision into one entry of the metadata log
(`metadata.records`), appends it at the next offset with
create-if-absent (`metadata_log`), applies it to its in-memory image, and
then hands it to the publisher, which delivers entries to every live broker
in order (`metadata_publisher`).

Fencing, by construction: each incarnation first appends a `controller`
record with an epoch above every earlier one. A deposed controller's next
append targets an offset its successor already used — taken, or compacted
away below the log start (`metadata_log`) — and fails with a conflict, so
it can never write again; it steps down (`active = False`),
its publisher stops, and brokers refuse its pushes once they have seen the
newer epoch. The lease freshness check before each write is only an early
exit. A write whose outcome is unknown (an I/O error, a timeout) puts the
controller in doubt: before its next write it reads that slot back and
adopts the entry if it landed, so nothing is applied twice or skipped.

It watches the broker liveness leases: a broker that is gone — or came back
as a new process (a new incarnation) — leaves every ISR and loses its
leaderships (`metadata.elections`); a returning broker catches up and rejoins the
ISR through its leader's AlterPartition.

Requests are serialised by one asyncio lock: every decision sees the result
of the previous one. The operations are mixed in by role: topic
administration (`topic_admin`), reassignment and preferred leaders
(`partition_moves`), what brokers ask (`broker_requests`), SCRAM users
(`scram_admin`), ACLs (`acl_admin`), client quotas (`quota_admin`), group configs (`group_config_admin`),
decommissioned brokers (`decommission`); their shared
state is declared in `state`. This module never touches logs or
sockets: storage goes through the `MetadataLog`, delivery through the
publisher's `send`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Awaitable, Callable, Iterable, Mapping

from kelp import clock
from kelp.clock import Monotonic
from kelp.config.keys import DEFAULT_ENTITY, parse_bool
from kelp.errors import InvalidRequestError, NotControllerError, PolicyViolationError

from ...metadata.controller_answers import PartitionAnswer, TopicAnswer
from ...metadata.elections import Election, describe_change, elect
from ...metadata.image import (
    MetadataCorrupt,
    MetadataImage,
    Position,
    apply_entry,
    history_covers,
    image_from_snapshot,
    replay,
    snapshot_to_json,
)
from ...metadata.model import BrokerEndpoint, PartitionState, TopicState
from ...metadata.records import (
    MetadataEntry,
    MetadataRecord,
    MetadataSnapshot,
    as_entry,
    broker_record,
    controller_record,
    partition_record,
    topic_record,
)
from ..metadata_log import LoadedLog, MetadataLog, MetadataLogConflict, MetadataUnreadable, entry_size
from ..metadata_publisher import MetadataPublisher, Send
from .acl_admin import AclAdmin
from .broker_requests import BrokerRequests
from .decommission import Decommissions
from .group_config_admin import GroupConfigAdmin
from .partition_moves import PartitionMoves
from .quota_admin import QuotaAdmin
from .scram_admin import ScramAdmin
from .state import ControllerSettings, TopicConfigCheck
from .topic_admin import MAX_PARTITIONS, TopicAdmin

__all__ = ["Controller", "ControllerSettings", "MetadataHistoryRefused", "MAX_ENTRY_BYTES", "MAX_PARTITIONS"]

log = logging.getLogger("kelp.broker.controller")

MAX_ENTRY_BYTES = 900 * 1024  # one entry must fit one ConfigMap on Kubernetes
CLAIM_ATTEMPTS = 10
PERIODIC_S = 2.0


class MetadataHistoryRefused(NotControllerError):
    """The metadata log ends before (or differs from) what a live broker applied: acting on it would answer success
    for changes no broker applies. The controller writes nothing; it says why."""


class Controller(TopicAdmin, PartitionMoves, BrokerRequests, ScramAdmin, AclAdmin, QuotaAdmin, GroupConfigAdmin,
                 Decommissions):
    def __init__(
        self,
        *,
        broker_id: int,
        settings: ControllerSettings,
        log: MetadataLog,
        live_brokers: Callable[[], Awaitable[dict[int, BrokerEndpoint]]],
        send: Send,
        lease_fresh: Callable[[], bool],
        topic_config_check: TopicConfigCheck | None = None,
        monotonic: Monotonic = clock.monotonic,
        positions: Callable[[], Mapping[int, Position]] = dict,
    ) -> None:
        self.broker_id = broker_id
        self.settings = settings
        self.log = log
        self._live_brokers = live_brokers
        self._lease_fresh = lease_fresh
        self._topic_config_check = topic_config_check
        self.monotonic = monotonic  # the liveness watch's schedule
        # Where each live broker says its metadata is, (offset, digest, run): refreshed by `live_brokers`.
        self._positions = positions
        self._digests: dict[int, str] = {}  # offset -> digest of the entries this controller holds in memory
        self.refused = ""  # why this controller refuses to act on its log ("" while it does not)
        self.epoch = -1
        self.image = MetadataImage()
        self.alive: dict[int, BrokerEndpoint] = {}
        self._shutting_down: set[int] = set()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._snapshot_task: asyncio.Task[None] | None = None
        self._since_snapshot = 0
        # A write whose outcome is unknown: (offset, entry). Read back before the next write.
        self._doubt: tuple[int, MetadataEntry] | None = None
        self.active = False
        self.publisher = MetadataPublisher(controller_id=broker_id, send=send, image=lambda: self.image,
                                           is_active=lambda: self.active, on_stale=self._deposed,
                                           on_history=self._refuse)

    @property
    def topics(self) -> Mapping[str, TopicState]:
        return self.image.topics

    # -- lifecycle --------------------------------------------------------
    async def start(self) -> None:
        """Load the log, check it extends what every live broker applied, claim a new epoch, elect for the live
        brokers, start delivering. Raises on an unreadable log, and MetadataHistoryRefused (writing nothing) on a
        log that is shorter than, or differs from, what a live broker applied."""
        await self._live_brokers()  # the brokers' reported positions, fresh
        loaded = await self._load_checked()
        if self.image.offset < 0:
            await self._import_legacy()
        # Sizing thousands of entries (each serialised) is work for a thread, like their replay: not the loop's.
        self._since_snapshot += await asyncio.to_thread(lambda: sum(entry_size(e) for e in loaded.entries))
        for entry in loaded.entries:
            self.publisher.retain(entry)
        await self._claim_epoch()
        # Brokers in a controlled shutdown stay so across a controller failover (their registration says so).
        self._shutting_down = {b for b, r in self.image.brokers.items() if r.shutting_down}
        alive = await self._live_brokers()
        self.active = True
        log.info("broker %d is the controller (epoch %d, metadata offset %d): %d topic(s), live brokers %s",
                 self.broker_id, self.epoch, self.image.offset, len(self.topics), sorted(alive))
        await self._on_liveness(alive, takeover=True)
        self._task = asyncio.create_task(self._watch(), name=f"controller-{self.epoch}")

    async def _load_checked(self) -> LoadedLog:
        """The log, replayed into the image; refused when a live broker applied more of it (or another history).
        A broker ahead may only be a deposed controller's last entry landing after this load: read once more."""
        for attempt in range(2):
            loaded = await self.log.load()
            if loaded.fell_back:
                log.error("the newest metadata snapshot cannot be read; loaded the older one and its entries "
                          "instead: %s", "; ".join(loaded.fell_back))
            try:  # in a thread: a log of thousands of topics and ACLs replays for hundreds of ms (loop-lag guard)
                self.image, self._digests = await asyncio.to_thread(replay, loaded.snapshot, loaded.entries)
            except MetadataCorrupt as exc:
                raise MetadataUnreadable(f"the metadata log cannot be replayed: {exc}") from None
            why = self._history_refusal()
            if not why:
                return loaded
            if attempt == 0:
                log.warning("%s; reading the metadata log once more", why)
        self._refuse(why)
        raise MetadataHistoryRefused(why)

    def _history_refusal(self) -> str:
        """Why this controller's log may not be acted on: a live broker applied an offset past its end, or an entry
        other than the log's at an offset both hold. "" when none did."""
        for broker, position in sorted(self._positions().items()):
            offset, digest = position[0], position[1]
            run = position[2] if len(position) > 2 else None
            if offset > self.image.offset:
                return (f"broker {broker} applied metadata offset {offset} but the metadata log ends at offset "
                        f"{self.image.offset}: the store lost entries that were applied (restored from an older copy, "
                        "or its newest entries removed)")
            mine = self._digests.get(offset)
            if digest and mine and digest != mine:
                return (f"broker {broker} applied an entry at metadata offset {offset} (digest {digest}) other "
                        f"than the log's (digest {mine}): the store holds another history than the one applied")
            if mine is None and history_covers(self.image.runs, run, offset) is False:
                assert run is not None
                return (f"broker {broker} applied metadata offset {offset} in the controller run that starts at "
                        f"offset {run[0]} (entry digest {run[1]}), which the metadata log does not hold up to there "
                        "(below this controller's snapshot): the store holds another history than the one applied")
        return ""

    def _refuse(self, why: str) -> None:
        """Stop acting on this log, loudly: nothing more is written or delivered. Every takeover checks again, so
        the controller resumes once no live broker is ahead (each restarted broker reloads the store) or the store
        holds the history again."""
        log.error("controller of broker %d refuses to act on the metadata log: %s. Nothing is written until it "
                  "holds what the brokers applied: restore the store's newest entries, or restart the brokers that "
                  "are ahead so they reload it (docs/metadata.md, 'History')", self.broker_id, why)
        self.refused = why
        self._deposed(f"refused: {why}")

    async def _import_legacy(self) -> None:
        """An empty log beside documents of the store before it: import them once, as a snapshot at offset 0."""
        legacy = await self.log.legacy()
        if legacy is None:
            return
        snap: MetadataSnapshot = {
            "offset": 0, "epoch": 0, "controller_id": -1,
            "next_producer_id": int((legacy.cluster or {}).get("next_producer_id", 0)),
            "topics": [legacy.topics[n] for n in sorted(legacy.topics)], "removed": []}
        try:
            image = image_from_snapshot(snap)
        except MetadataCorrupt as exc:
            raise MetadataUnreadable(f"the metadata documents from before the log cannot be imported: {exc}") from None
        await self.log.write_snapshot(snapshot_to_json(image))
        self.image = image
        log.warning("imported %d topic(s) from the metadata store format before the log (producer ids from %d); "
                    "the old documents are no longer read", len(image.topics), image.next_producer_id)

    async def _claim_epoch(self) -> None:
        """Append this incarnation's `controller` record: the epoch that fences every earlier controller."""
        for _attempt in range(CLAIM_ATTEMPTS):
            if not self._lease_fresh():
                raise NotControllerError(f"broker {self.broker_id} lost the controller lease while taking over")
            epoch = self.image.epoch + 1
            entry = self._entry(epoch, [controller_record(epoch, self.broker_id)])
            try:
                await self.log.append(entry)
            except MetadataLogConflict:
                loaded = await self.log.load()  # someone wrote meanwhile (a deposed controller's last write)
                self.image, self._digests = replay(loaded.snapshot, loaded.entries)
                self.publisher.trim(self.image.offset)
                for e in loaded.entries:
                    self.publisher.retain(e)
                continue
            self.image, _ = apply_entry(self.image, entry)
            self._digests[self.image.offset] = self.image.digest
            self.epoch = epoch
            self.publisher.retain(entry)
            return
        raise NotControllerError(f"broker {self.broker_id} could not claim a controller epoch: the metadata log "
                                 f"kept moving under {CLAIM_ATTEMPTS} attempts")

    async def stop(self) -> None:
        self.active = False
        tasks = [t for t in (self._task, self._snapshot_task) if t is not None and t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.publisher.stop()
        self._task = self._snapshot_task = None

    def _deposed(self, why: str) -> None:
        if self.active:
            log.warning("controller epoch %d is deposed (%s): stepping down", self.epoch, why)
        self.active = False

    async def _watch(self) -> None:
        interval = self.settings.liveness_check_ms / 1000.0
        next_periodic = self.monotonic() + PERIODIC_S
        while self.active:
            await asyncio.sleep(interval)
            try:
                alive = await self._live_brokers()
                why = self._history_refusal()
                if why:
                    self._refuse(why)
                    return
                await self._on_liveness(alive)
                if self.monotonic() >= next_periodic:
                    next_periodic = self.monotonic() + PERIODIC_S
                    await self.periodic()
            except asyncio.CancelledError:
                raise
            except NotControllerError as exc:
                self._deposed(str(exc))
                return
            except Exception:
                log.exception("controller liveness check failed")

    async def _on_liveness(self, alive: dict[int, BrokerEndpoint], *, takeover: bool = False) -> None:
        """React to the broker leases: gone brokers and restarted ones (a process other than the one registered
        in the metadata log, KRaft's broker epoch) leave every ISR and their leaderships; new processes are
        registered in the log; then partitions that can get a leader again get one."""
        old = self.alive
        gone = set(old) - set(alive)
        came = set(alive) - set(old)
        registered = self.image.brokers
        # A restarted process lost its in-memory state (ISR view, high watermark): fenced like a gone one,
        # even when it came back before its lease expired, or while no controller was watching.
        bounced = {b for b in alive if b in registered and registered[b].incarnation != alive[b].incarnation}
        unregistered = {b for b in alive if registered.get(b) is None
                        or registered[b].incarnation != alive[b].incarnation}
        moved = {b for b in set(alive) & set(old) if alive[b] != old[b]}
        if not (gone or came or moved or unregistered or takeover):
            return
        async with self._lock:
            self.alive = alive
            if gone:
                log.warning("broker(s) %s left the cluster (lease expired or released)", sorted(gone))
            if bounced:
                log.warning("broker(s) %s restarted (new process): fenced out of every ISR until caught up",
                            sorted(bounced))
            if came and not takeover:
                log.info("broker(s) %s joined the cluster", sorted(came))
            self.publisher.set_brokers(alive)
            self._shutting_down -= unregistered  # a new process: eligible again
            # One entry: every partition fenced from the gone and restarted brokers, then re-elected among the
            # live ones (a restarted broker that was the only in-sync replica leads again, at a new epoch), and
            # the new processes registered. Brokers never see the partitions offline in between.
            reason = (f"broker(s) {sorted(gone | bounced)} gone or restarted" if gone or bounced
                      else "controller failover" if takeover else f"broker(s) {sorted(came)} joined")
            fence = set(alive) - bounced
            changed = [t for t in (self._elected(t, fence, set(alive), reason) for t in list(self.topics.values()))
                       if t is not None]
            records = [r for t in changed for r in self._records_for(t)]
            records += [broker_record(b, alive[b].incarnation) for b in sorted(unregistered)]
            await self._append(records)

    # -- writing ----------------------------------------------------------
    def _check_fresh(self) -> None:
        if not self.active or not self._lease_fresh():
            self._deposed("its controller lease is not fresh")
            raise NotControllerError(
                f"broker {self.broker_id} no longer holds a fresh controller lease (epoch {self.epoch}); "
                "retry against the new controller")

    async def _resolve_doubt(self) -> None:
        """Read back the slot of a write whose outcome was unknown; adopt it if it landed."""
        if self._doubt is None:
            return
        offset, mine = self._doubt
        try:
            found = await self.log.read_entry(offset)
        except MetadataLogConflict as exc:  # compacted past: a newer controller wrote there and beyond
            self._doubt = None
            self._deposed(f"metadata offset {offset}: {exc}")
            raise NotControllerError(f"another controller wrote past metadata offset {offset}; retry against it") \
                from None
        except MetadataUnreadable as exc:
            raise NotControllerError("the metadata log cannot be read back after a failed write "
                                     f"({exc}); retry") from None
        self._doubt = None
        if found is None:
            return
        if found != mine:
            self._deposed(f"metadata offset {offset} holds another controller's entry")
            raise NotControllerError(f"another controller wrote metadata offset {offset}; retry against it")
        self._applied(mine)

    def _applied(self, entry: MetadataEntry) -> None:
        self.image, _ = apply_entry(self.image, entry)
        self._digests[self.image.offset] = self.image.digest
        self.publisher.retain(entry)
        self._since_snapshot += entry_size(entry)
        if self._since_snapshot >= self.settings.snapshot_bytes and self._snapshot_task is None:
            self._snapshot_task = asyncio.create_task(self._snapshot(self.image), name="metadata-snapshot")

    async def _append(self, records: list[MetadataRecord], *,
                      unknown_outcome: type[Exception] = NotControllerError) -> None:
        """Append one decision: one entry, or — when its records are more than one entry holds (a broker that
        led thousands of partitions died) — consecutive entries, each record whole and valid on its own.
        Raises NotControllerError when fenced, `unknown_outcome` when a write failed."""
        if not records:
            return
        chunk: list[MetadataRecord] = []
        size = 0
        for rec in records:
            n = len(json.dumps(rec, separators=(",", ":")))
            if n > MAX_ENTRY_BYTES - 200:
                raise PolicyViolationError(
                    f"the change is {n} bytes of metadata in one record, over the {MAX_ENTRY_BYTES}-byte limit of "
                    "one metadata entry (a ConfigMap on Kubernetes); create fewer partitions at once")
            if chunk and size + n > MAX_ENTRY_BYTES - 200:
                await self._append_entry(chunk, unknown_outcome)
                chunk, size = [], 0
            chunk.append(rec)
            size += n + 1
        await self._append_entry(chunk, unknown_outcome)

    def _entry(self, epoch: int, records: list[MetadataRecord]) -> MetadataEntry:
        """The next entry: at the offset after the image's, extending its history (`prev`, when the image knows the
        digest of its last entry). Through JSON and back: exactly what a reader decodes (a doubt compares it with
        one read back, and every broker computes its digest from the decoded form)."""
        doc: dict[str, object] = {"offset": self.image.offset + 1, "epoch": epoch, "records": records}
        if self.image.digest:
            doc["prev"] = self.image.digest
        return as_entry(json.loads(json.dumps(doc)))

    async def _append_entry(self, records: list[MetadataRecord], unknown_outcome: type[Exception]) -> None:
        self._check_fresh()
        await self._resolve_doubt()
        entry = self._entry(self.epoch, records)
        try:
            apply_entry(self.image, entry)  # the invariants hold before anything is written
        except MetadataCorrupt as exc:
            raise InvalidRequestError(f"refused: the change would break a metadata invariant ({exc})") from None
        try:
            await self.log.append(entry)
        except MetadataLogConflict:
            self._deposed(f"metadata offset {entry['offset']} was taken by another controller")
            raise NotControllerError(f"controller epoch {self.epoch} was superseded (metadata offset "
                                     f"{entry['offset']} is taken); retry against the new controller") from None
        except asyncio.CancelledError:
            # The caller went away; the write goes on in its worker thread and may land: read back first.
            self._doubt = (int(entry["offset"]), entry)
            raise
        except Exception as exc:
            self._doubt = (int(entry["offset"]), entry)
            log.error("writing metadata offset %d failed (%s); it is read back before the next write",
                      entry["offset"], exc)
            raise unknown_outcome(f"the metadata store write failed ({exc}); retry") from None
        self._applied(entry)

    async def _snapshot(self, image: MetadataImage) -> None:
        try:
            await self.log.write_snapshot(snapshot_to_json(image))
            gone = await self.log.compact(image.offset)
            self.publisher.trim(image.offset)
            self._digests = {o: d for o, d in self._digests.items() if o >= image.offset}
            self._since_snapshot = self.publisher.retained_bytes()
            log.info("metadata snapshot at offset %d written; %d older object(s) removed", image.offset, gone)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("writing a metadata snapshot at offset %d failed (%s); the next change retries",
                        image.offset, exc)
        finally:
            self._snapshot_task = None

    def _records_for(self, new: TopicState) -> list[MetadataRecord]:
        """A whole-topic record for a new topic or a config/partition-count change; else one per changed partition."""
        old = self.image.topics.get(new.name)
        if old is None or dict(old.configs) != dict(new.configs) or old.partitions != new.partitions:
            return [topic_record(new)]
        return [partition_record(new, p, s) for p, s in enumerate(new.partition_states) if s != old.partition_states[p]]

    async def _commit(self, states: Iterable[TopicState], *,
                      unknown_outcome: type[Exception] = NotControllerError) -> None:
        records: list[MetadataRecord] = []
        for state in states:
            records += self._records_for(state)
        await self._append(records, unknown_outcome=unknown_outcome)

    # An operation's answer names the metadata offset that holds it: callers wait until they applied it.
    def _topic_answer(self, state: TopicState) -> TopicAnswer:
        return {**state.to_json(), "metadata_offset": self.image.offset}

    def _partition_answer(self, state: PartitionState) -> PartitionAnswer:
        return {**state.to_json(), "metadata_offset": self.image.offset}

    # -- dynamic broker configs ---------------------------------------------
    def _dynamic(self, key: str) -> str | None:
        """A dynamic broker config as this controller's image holds it: its own broker's, else the cluster-wide
        default; None when neither is set (the static value applies)."""
        for entity in (self.broker_id, DEFAULT_ENTITY):
            value = self.image.broker_configs.get(entity, {}).get(key)
            if value is not None:
                return value
        return None

    # -- leader election --------------------------------------------------
    def _election(self, topic: TopicState, alive: set[int], *, allow_unclean: bool = True) -> Election:
        # The topic's override, else the dynamic broker config, else the static one (read at each election).
        key = "unclean.leader.election.enable"
        value = topic.configs.get(key, self._dynamic(key))
        unclean = allow_unclean and (_true(value) if value is not None else self.settings.unclean_leader_election)
        return Election(alive=frozenset(alive), eligible=frozenset(alive - self._shutting_down), unclean=unclean,
                        decommissioned=self._decommissioned())

    def _eligible(self) -> frozenset[int]:
        return frozenset(set(self.alive) - self._shutting_down)

    def _elected(self, topic: TopicState, fenced_view: set[int], alive: set[int], reason: str) -> TopicState | None:
        """The topic after electing with the brokers of `fenced_view` (gone and restarted ones left out of every
        ISR), then among all `alive` ones; None if nothing changes."""
        first, then = self._election(topic, fenced_view), self._election(topic, alive)
        new = topic
        for p, state in enumerate(topic.partition_states):
            s2 = elect(topic.name, p, elect(topic.name, p, state, first), then)
            if s2 != state:
                describe_change(topic.name, p, state, s2, reason)
                new = new.with_partition(p, s2)
        return None if new is topic else new


def _true(value: str) -> bool:
    try:
        return parse_bool(value)
    except ValueError:
        return False
