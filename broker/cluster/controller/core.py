"""The controller: the one writer of cluster metadata, active on the holder of the controller lease.

Why: partition leadership, ISR changes, topic creation and reassignment must
be decided in one place, in one order, and be durable before anyone acts on
them — Kafka's `QuorumController`/`ReplicationControlManager`. Kelp's
controller turns every decision into one entry of the metadata log
(`metadata.records`), appends it at the next offset with
create-if-absent (`metadata_log`), applies it to its in-memory image, and
then hands it to the publisher, which delivers entries to every live broker
in order (`metadata_publisher`).

Fencing, by construction: every entry goes through one object, the
`writer.MetadataWriter`, which first claims an epoch above every earlier
one, and whose appends fail with a conflict once a successor wrote — the
deposed controller steps down and writes nothing more (see `writer`).
Brokers refuse its pushes once they have seen the newer epoch.

This module holds the lifecycle: loading the log (refusing one shorter than,
or different from, what a live broker applied), claiming the epoch,
watching the broker liveness leases — a broker that is gone, or came back
as a new process (a new incarnation), leaves every ISR and loses its
leaderships (`metadata.elections`); a returning broker catches up and
rejoins the ISR through its leader's AlterPartition — and stopping.

`Controller` composes the rest, each an object given what it needs: the
shared state (`state`: image, epoch, live brokers, the one asyncio lock
that serialises every decision), the writer, and the operations by role:
topic administration (`topic_admin`), reassignment and preferred leaders
(`partition_moves`), what brokers ask (`broker_requests`), SCRAM users
(`scram_admin`), ACLs (`acl_admin`), client quotas (`quota_admin`), group
configs (`group_config_admin`), decommissioned brokers (`decommission`). A broker asks for an operation by
name (`operation`). This module never touches logs or sockets: storage
goes through the `MetadataLog`, delivery through the publisher's `send`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Mapping

from kelp import clock
from kelp.clock import Monotonic
from kelp.errors import InvalidRequestError, NotControllerError

from ...metadata.elections import describe_change, elect
from ...metadata.image import (
    MetadataCorrupt,
    Position,
    history_covers,
    image_from_snapshot,
    replay,
    snapshot_to_json,
)
from ...metadata.model import BrokerEndpoint, TopicState
from ...metadata.records import MetadataSnapshot, broker_record
from ..metadata_log import LoadedLog, MetadataLog, MetadataUnreadable, entry_size
from ..metadata_publisher import MetadataPublisher, Send
from .acl_admin import AclAdmin
from .broker_requests import BrokerRequests
from .decommission import Decommissions
from .group_config_admin import GroupConfigAdmin
from .partition_moves import PartitionMoves
from .quota_admin import QuotaAdmin
from .scram_admin import ScramAdmin
from .state import ControllerSettings, ControllerState, TopicConfigCheck
from .topic_admin import TopicAdmin
from .writer import MetadataWriter

__all__ = ["Controller", "ControllerOperation", "ControllerSettings", "MetadataHistoryRefused"]

log = logging.getLogger("kelp.broker.controller")

PERIODIC_S = 2.0

ControllerOperation = Callable[..., Awaitable[Mapping[str, object]]]
"""A controller operation's method, called with its JSON arguments; it answers a `metadata.controller_answers` shape."""


class MetadataHistoryRefused(NotControllerError):
    """The metadata log ends before (or differs from) what a live broker applied: acting on it would answer success
    for changes no broker applies. The controller writes nothing; it says why."""


class Controller:
    """The controller of one incarnation: its lifecycle, and its roles composed over one state and one writer."""

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
        self.monotonic = monotonic  # the liveness watch's schedule
        # Where each live broker says its metadata is, (offset, digest, run): refreshed by `live_brokers`.
        self._positions = positions
        self.refused = ""  # why this controller refuses to act on its log ("" while it does not)
        self._task: asyncio.Task[None] | None = None
        self.state = state = ControllerState(broker_id=broker_id, settings=settings)
        self.publisher = MetadataPublisher(controller_id=broker_id, send=send, image=lambda: state.image,
                                           is_active=lambda: state.active, on_stale=state.deposed,
                                           on_history=self._refuse)
        self.writer = writer = MetadataWriter(state, log, self.publisher, lease_fresh)
        # The roles, each given the state and the one write path.
        self.topic_admin = TopicAdmin(state, writer, topic_config_check)
        self.moves = PartitionMoves(state, writer)
        self.broker_requests = BrokerRequests(state, writer)
        self.scram_admin = ScramAdmin(state, writer)
        self.acl_admin = AclAdmin(state, writer)
        self.quota_admin = QuotaAdmin(state, writer)
        self.group_config_admin = GroupConfigAdmin(state, writer)
        self.decommissions = Decommissions(state, writer)
        self._operations: dict[str, ControllerOperation] = {
            "create_topic": self.topic_admin.create_topic,
            "ensure_internal_topic": self.topic_admin.ensure_internal_topic,
            "delete_topic": self.topic_admin.delete_topic,
            "create_partitions": self.topic_admin.create_partitions,
            "alter_configs": self.topic_admin.alter_configs,
            "alter_partition": self.broker_requests.alter_partition,
            "alter_partitions": self.broker_requests.alter_partitions,
            "controlled_shutdown": self.broker_requests.controlled_shutdown,
            "allocate_producer_ids": self.broker_requests.allocate_producer_ids,
            "alter_broker_configs": self.broker_requests.alter_broker_configs,
            "reassign": self.moves.reassign,
            "elect_preferred_leaders": self.moves.elect_preferred_leaders,
            "alter_scram_credentials": self.scram_admin.alter_scram_credentials,
            "create_acls": self.acl_admin.create_acls,
            "delete_acls": self.acl_admin.delete_acls,
            "alter_client_quotas": self.quota_admin.alter_client_quotas,
            "alter_group_configs": self.group_config_admin.alter_group_configs,
            "decommission_broker": self.decommissions.decommission_broker,
            "broker_holdings": self.decommissions.broker_holdings,
        }

    def operation(self, op: str) -> ControllerOperation:
        """The operation a broker asks for by name (`/cluster/v1/controller/<op>`, `routing.call`): its role's
        method. Raises InvalidRequestError for a name that is none."""
        found = self._operations.get(op)
        if found is None:
            raise InvalidRequestError(f"unknown controller operation '{op}'")
        return found

    # -- lifecycle --------------------------------------------------------
    async def start(self) -> None:
        """Load the log, check it extends what every live broker applied, claim a new epoch, elect for the live
        brokers, start delivering. Raises on an unreadable log, and MetadataHistoryRefused (writing nothing) on a
        log that is shorter than, or differs from, what a live broker applied."""
        await self._live_brokers()  # the brokers' reported positions, fresh
        loaded = await self._load_checked()
        if self.state.image.offset < 0:
            await self._import_legacy()
        # Sizing thousands of entries (each serialised) is work for a thread, like their replay: not the loop's.
        self.writer.since_snapshot += await asyncio.to_thread(lambda: sum(entry_size(e) for e in loaded.entries))
        self.writer.retain(loaded)
        await self.writer.claim_epoch()
        # Brokers in a controlled shutdown stay so across a controller failover (their registration says so).
        self.state.shutting_down = {b for b, r in self.state.image.brokers.items() if r.shutting_down}
        alive = await self._live_brokers()
        self.state.active = True
        log.info("broker %d is the controller (epoch %d, metadata offset %d): %d topic(s), live brokers %s",
                 self.broker_id, self.state.epoch, self.state.image.offset, len(self.state.topics), sorted(alive))
        await self._on_liveness(alive, takeover=True)
        self._task = asyncio.create_task(self._watch(), name=f"controller-{self.state.epoch}")

    async def _load_checked(self) -> LoadedLog:
        """The log, replayed into the image; refused when a live broker applied more of it (or another history).
        A broker ahead may only be a deposed controller's last entry landing after this load: read once more."""
        for attempt in range(2):
            loaded = await self.log.load()
            if loaded.fell_back:
                log.error("the newest metadata snapshot cannot be read; loaded the older one and its entries "
                          "instead: %s", "; ".join(loaded.fell_back))
            try:  # in a thread: a log of thousands of topics and ACLs replays for hundreds of ms (loop-lag guard)
                self.state.image, self.writer.digests = await asyncio.to_thread(replay, loaded.snapshot, loaded.entries)
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
            if offset > self.state.image.offset:
                return (f"broker {broker} applied metadata offset {offset} but the metadata log ends at offset "
                        f"{self.state.image.offset}: the store lost entries that were applied (restored from an older "
                        "copy, or its newest entries removed)")
            mine = self.writer.digests.get(offset)
            if digest and mine and digest != mine:
                return (f"broker {broker} applied an entry at metadata offset {offset} (digest {digest}) other "
                        f"than the log's (digest {mine}): the store holds another history than the one applied")
            if mine is None and history_covers(self.state.image.runs, run, offset) is False:
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
        self.state.deposed(f"refused: {why}")

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
        self.state.image = image
        log.warning("imported %d topic(s) from the metadata store format before the log (producer ids from %d); "
                    "the old documents are no longer read", len(image.topics), image.next_producer_id)

    async def stop(self) -> None:
        self.state.active = False
        tasks = [t for t in (self._task, self.writer.snapshot_task)
                 if t is not None and t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.publisher.stop()
        self._task = self.writer.snapshot_task = None

    async def _watch(self) -> None:
        interval = self.settings.liveness_check_ms / 1000.0
        next_periodic = self.monotonic() + PERIODIC_S
        balance_s = self.settings.leader_balance_s
        next_balance = None if balance_s is None else self.monotonic() + balance_s
        while self.state.active:
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
                    await self.moves.periodic()
                if next_balance is not None and balance_s is not None and self.monotonic() >= next_balance:
                    more = await self.moves.balance_leaders()  # more left: the next check runs another pass
                    next_balance = self.monotonic() + (0.0 if more else balance_s)
            except asyncio.CancelledError:
                raise
            except NotControllerError as exc:
                self.state.deposed(str(exc))
                return
            except Exception:
                log.exception("controller liveness check failed")

    async def _on_liveness(self, alive: dict[int, BrokerEndpoint], *, takeover: bool = False) -> None:
        """React to the broker leases: gone brokers and restarted ones (a process other than the one registered
        in the metadata log, KRaft's broker epoch) leave every ISR and their leaderships; new processes are
        registered in the log; then partitions that can get a leader again get one."""
        old = self.state.alive
        gone = set(old) - set(alive)
        came = set(alive) - set(old)
        registered = self.state.image.brokers
        # A restarted process lost its in-memory state (ISR view, high watermark): fenced like a gone one,
        # even when it came back before its lease expired, or while no controller was watching.
        bounced = {b for b in alive if b in registered and registered[b].incarnation != alive[b].incarnation}
        unregistered = {b for b in alive if registered.get(b) is None
                        or registered[b].incarnation != alive[b].incarnation}
        moved = {b for b in set(alive) & set(old) if alive[b] != old[b]}
        if not (gone or came or moved or unregistered or takeover):
            return
        async with self.state.lock:
            self.state.alive = alive
            if gone:
                log.warning("broker(s) %s left the cluster (lease expired or released)", sorted(gone))
            if bounced:
                log.warning("broker(s) %s restarted (new process): fenced out of every ISR until caught up",
                            sorted(bounced))
            if came and not takeover:
                log.info("broker(s) %s joined the cluster", sorted(came))
            self.publisher.set_brokers(alive)
            self.state.shutting_down -= unregistered  # a new process: eligible again
            # One entry: every partition fenced from the gone and restarted brokers, then re-elected among the
            # live ones (a restarted broker that was the only in-sync replica leads again, at a new epoch), and
            # the new processes registered. Brokers never see the partitions offline in between.
            reason = (f"broker(s) {sorted(gone | bounced)} gone or restarted" if gone or bounced
                      else "controller failover" if takeover else f"broker(s) {sorted(came)} joined")
            fence = set(alive) - bounced
            elected = (self._elected(t, fence, set(alive), reason) for t in list(self.state.topics.values()))
            changed = [t for t in elected if t is not None]
            records = [r for t in changed for r in self.state.records_for(t)]
            records += [broker_record(b, alive[b].incarnation) for b in sorted(unregistered)]
            await self.writer.append(records)

    def _elected(self, topic: TopicState, fenced_view: set[int], alive: set[int], reason: str) -> TopicState | None:
        """The topic after electing with the brokers of `fenced_view` (gone and restarted ones left out of every
        ISR), then among all `alive` ones; None if nothing changes."""
        first, then = self.state.election(topic, fenced_view), self.state.election(topic, alive)
        new = topic
        for p, state in enumerate(topic.partition_states):
            s2 = elect(topic.name, p, elect(topic.name, p, state, first), then)
            if s2 != state:
                describe_change(topic.name, p, state, s2, reason)
                new = new.with_partition(p, s2)
        return None if new is topic else new

