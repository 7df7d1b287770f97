"""The controller: the one writer of cluster metadata, active on the holder of the controller lease.

Why: partition leadership, ISR changes, topic creation and reassignment must
be decided in one place, in one order, and written durably before anyone
acts on them — Kafka's controller (`QuorumController`/`ReplicationControlManager`).
Kelp's controller keeps the authoritative copy of every topic in memory,
writes each change to the metadata store with its version as precondition,
and then pushes it to the live brokers. It watches the broker liveness
leases: when one expires, every partition it led gets a new leader from the
ISR (leader epoch + 1) and it leaves every ISR; when one comes back it gets
the full metadata and leads again partitions that were offline.

Fencing: the controller epoch is the controller lease's transition count;
brokers refuse pushes from an older epoch. Before every write the controller
checks that its lease is still fresh (renewed within the lease duration less
a safety margin), so a paused controller that wakes up writes nothing.

Requests are serialised by one asyncio lock: every decision sees the result
of the previous one. This module never touches logs or sockets directly:
storage goes through the store, pushes through the `push` callback.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any, Awaitable, Callable, Iterable, Mapping

from kelp.errors import (
    BrokerIdNotRegisteredError,
    CoordinatorLoadInProgressError,
    ElectionNotNeededError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    InvalidUpdateVersionError,
    KelpError,
    NoReassignmentInProgressError,
    NotControllerError,
    NotLeaderOrFollowerError,
    PreferredLeaderNotAvailableError,
    ReassignmentInProgressError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from ..topic_manager import check_topic_collision
from .model import NO_LEADER, BrokerEndpoint, INTERNAL_TOPICS, PartitionState, TopicState
from .placement import assign_replicas
from .store import MetadataStore, StoreConflict, StoreUnreadable

__all__ = ["Controller", "ControllerSettings"]

log = logging.getLogger("kelp.broker.controller")

MAX_PARTITIONS = 100_000
_FULL: dict = {"full": True}  # outbox marker: send the whole metadata, built at delivery time
Push = Callable[[BrokerEndpoint, dict], Awaitable[None]]


class ControllerSettings:
    """What the controller reads from the broker config (Kafka names)."""

    def __init__(self, cfg: Any) -> None:
        self.num_partitions = int(cfg["num.partitions"])
        self.default_replication_factor = int(cfg["default.replication.factor"])
        self.unclean_leader_election = bool(cfg["unclean.leader.election.enable"])
        self.producer_id_block = int(cfg["producer.id.block.size"])
        self.lease_duration_ms = int(cfg["lease.duration.ms"])
        self.liveness_check_ms = int(cfg["controller.liveness.check.interval.ms"])
        self.validate_configs: Callable[[Mapping[str, Any], str], dict[str, str]] = lambda c, t: dict(c)


class Controller:
    def __init__(
        self,
        *,
        broker_id: int,
        epoch: int,
        settings: ControllerSettings,
        store: MetadataStore,
        live_brokers: Callable[[], Awaitable[dict[int, BrokerEndpoint]]],
        push: Push,
        lease_fresh: Callable[[], bool],
        topic_config_check: Callable[[str, dict[str, str]], None] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.epoch = epoch
        self.settings = settings
        self.store = store
        self._live_brokers = live_brokers
        self._push_to = push
        self._lease_fresh = lease_fresh
        self._topic_config_check = topic_config_check
        self.topics: dict[str, TopicState] = {}
        self._versions: dict[str, str] = {}
        self._cluster_doc: dict[str, Any] = {}
        self._cluster_version: str | None = None
        # Why the cluster record (the producer-id counter) cannot be trusted, if it cannot: unreadable
        # in the store, or a write whose outcome is unknown. No id block is handed out until it is re-read.
        self._cluster_doubt: str | None = None
        self.alive: dict[int, BrokerEndpoint] = {}
        self._shutting_down: set[int] = set()
        self._unsynced: set[int] = set()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task | None = None
        self._outboxes: dict[int, asyncio.Queue] = {}
        self._workers: dict[int, asyncio.Task] = {}
        self._full_queued: set[int] = set()
        self.active = False

    # -- lifecycle --------------------------------------------------------
    async def start(self) -> None:
        cluster, topics = await self.store.load()
        if isinstance(cluster, StoreUnreadable):
            # Never start the producer-id counter again from 0 over a record that exists but cannot be read:
            # ids already handed out would be handed out twice (their producers' new batches taken for retries).
            self._cluster_doubt = str(cluster)
            log.error("%s; no producer ids are handed out until it is repaired", cluster)
        elif cluster is not None:
            self._cluster_doc, self._cluster_version = dict(cluster.doc), cluster.version
        from .model import topic_from_json

        for name, versioned in topics.items():
            try:
                self.topics[name] = topic_from_json(versioned.doc)
                self._versions[name] = versioned.version
            except (KeyError, TypeError, ValueError) as exc:
                log.error("metadata of topic '%s' in the store is unreadable (%s); leaving it alone", name, exc)
        self.alive = await self._live_brokers()
        self.active = True
        log.info("broker %d is the controller (epoch %d): %d topic(s), live brokers %s",
                 self.broker_id, self.epoch, len(self.topics), sorted(self.alive))
        async with self._lock:
            self._unsynced = set(self.alive)
            await self._elect_for(set(self.alive), reason="controller failover")
        await self._sync_unsynced()
        self._task = asyncio.create_task(self._watch(), name=f"controller-{self.epoch}")

    async def stop(self) -> None:
        self.active = False
        tasks = [t for t in [self._task, *self._workers.values()] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        self._workers.clear()
        self._outboxes.clear()

    async def _watch(self) -> None:
        interval = self.settings.liveness_check_ms / 1000.0
        while self.active:
            await asyncio.sleep(interval)
            try:
                alive = await self._live_brokers()
                await self._on_liveness(alive)
                await self._sync_unsynced()
            except asyncio.CancelledError:
                raise
            except NotControllerError as exc:
                log.warning("controller epoch %d stepping down: %s", self.epoch, exc)
                self.active = False
                return
            except Exception:
                log.exception("controller liveness check failed")

    async def _on_liveness(self, alive: dict[int, BrokerEndpoint]) -> None:
        gone = set(self.alive) - set(alive)
        came = set(alive) - set(self.alive)
        changed = {b for b in set(alive) & set(self.alive) if alive[b] != self.alive[b]}
        if not gone and not came and not changed:
            return
        async with self._lock:
            self.alive = alive
            for b in came | {b for b in changed if alive[b].incarnation != self.alive[b].incarnation}:
                self._shutting_down.discard(b)  # a new process: eligible again (it restarted within the lease)
            if gone:
                log.warning("broker(s) %s left the cluster (lease expired or released)", sorted(gone))
            if came:
                log.info("broker(s) %s joined the cluster", sorted(came))
            await self._elect_for(set(alive), reason=f"broker(s) {sorted(gone)} gone" if gone else "broker(s) joined")
            self._unsynced |= set(alive)  # every broker needs the new broker list

    # -- pushing ----------------------------------------------------------
    # Each broker has its own ordered outbox and worker, so a slow or paused broker
    # delays only itself: the controller's decisions never wait on another broker.
    def _payload(self, topics: Iterable[TopicState], deleted: Iterable[str] = (), *, full: bool = False) -> dict:
        return {
            "controller_id": self.broker_id,
            "controller_epoch": self.epoch,
            "brokers": [b.to_json() for b in sorted(self.alive.values(), key=lambda b: b.id)],
            "topics": [t.to_json() for t in topics],
            "deleted": list(deleted),
            "full": full,
        }

    async def _push(self, topics: Iterable[TopicState], deleted: Iterable[str] = ()) -> None:
        payload = self._payload(list(topics), deleted)
        for b in self.alive.values():
            if b.id == self.broker_id:
                await self._push_one(b, payload)  # this broker applies at once, in order
            elif b.id not in self._unsynced:
                self._outbox(b.id).put_nowait(payload)

    def _outbox(self, broker_id: int) -> asyncio.Queue:
        box = self._outboxes.get(broker_id)
        if box is None:
            box = self._outboxes[broker_id] = asyncio.Queue()
            self._workers[broker_id] = asyncio.create_task(self._deliver(broker_id, box), name=f"push-{broker_id}")
        return box

    async def _deliver(self, broker_id: int, box: asyncio.Queue) -> None:
        while True:
            payload = await box.get()
            broker = self.alive.get(broker_id)
            if broker is None:
                continue
            if payload is _FULL:
                # Built now, not when queued: every change committed from here on is queued behind it.
                self._full_queued.discard(broker_id)
                self._unsynced.discard(broker_id)
                payload = self._payload(self.topics.values(), full=True)
            elif broker_id in self._unsynced:
                continue  # superseded by the full push that follows
            await self._push_one(broker, payload)

    async def _push_one(self, broker: BrokerEndpoint, payload: dict) -> None:
        try:
            await self._push_to(broker, payload)
        except StaleEpoch as exc:
            log.warning("controller epoch %d is stale (%s): stepping down", self.epoch, exc)
            self.active = False
        except Exception as exc:
            if broker.id not in self._unsynced:
                log.warning("metadata push to broker %d failed (%s); it gets the full metadata once it answers",
                            broker.id, exc or type(exc).__name__)
            self._unsynced.add(broker.id)

    async def _sync_unsynced(self) -> None:
        for b in sorted(self._unsynced):
            if b not in self.alive:
                self._unsynced.discard(b)
            elif b == self.broker_id:
                self._unsynced.discard(b)
                await self._push_one(self.alive[b], self._payload(self.topics.values(), full=True))
            elif b not in self._full_queued:
                self._full_queued.add(b)
                self._outbox(b).put_nowait(_FULL)

    # -- writing ----------------------------------------------------------
    def _check_fresh(self) -> None:
        if not self.active or not self._lease_fresh():
            self.active = False
            raise NotControllerError(
                f"broker {self.broker_id} no longer holds a fresh controller lease (epoch {self.epoch}); retry against the new controller"
            )

    async def _write(self, states: Iterable[TopicState]) -> None:
        for state in states:
            self._check_fresh()
            try:
                version = await self.store.put_topic(state.name, state.to_json(),
                                                     expected_version=self._versions.get(state.name))
            except StoreConflict as exc:
                self.active = False
                raise NotControllerError(
                    f"topic '{state.name}' was changed in the metadata store by someone else ({exc}); "
                    f"controller epoch {self.epoch} steps down"
                ) from None
            self._versions[state.name] = version
            self.topics[state.name] = state

    async def _commit(self, states: list[TopicState]) -> None:
        if not states:
            return
        await self._write(states)
        await self._push(states)

    # -- leader election --------------------------------------------------
    def _eligible(self, alive: set[int]) -> set[int]:
        return alive - self._shutting_down

    def _elect(self, topic: TopicState, p: int, state: PartitionState, alive: set[int], *,
               avoid: int | None = None) -> PartitionState:
        """New state for one partition given the live brokers: drop dead ISR members, re-elect a dead leader."""
        eligible = self._eligible(alive)
        live_isr = tuple(r for r in state.isr if r in alive and r != avoid)
        leader_ok = state.leader in eligible and state.leader != avoid and state.leader in state.isr
        if leader_ok:
            if live_isr == state.isr:
                return state
            return replace(state, isr=live_isr, partition_epoch=state.partition_epoch + 1)
        candidates = [r for r in state.target_replicas if r in live_isr and r in eligible]
        candidates += [r for r in state.replicas if r in live_isr and r in eligible and r not in candidates]
        if candidates:
            leader = candidates[0]
            return replace(state, leader=leader, leader_epoch=state.leader_epoch + 1, isr=live_isr,
                           partition_epoch=state.partition_epoch + 1)
        unclean = self.settings.unclean_leader_election or str(
            topic.configs.get("unclean.leader.election.enable", "")).lower() == "true"
        others = [r for r in state.replicas if r in eligible]
        if unclean and others:
            log.warning("%s-%d: no in-sync replica is alive; UNCLEAN election of broker %d (records may be lost)",
                         topic.name, p, others[0])
            return replace(state, leader=others[0], leader_epoch=state.leader_epoch + 1, isr=(others[0],),
                           partition_epoch=state.partition_epoch + 1)
        # Offline: keep the last ISR so its members stay eligible when they come back.
        keep_isr = live_isr or state.isr
        if state.leader == NO_LEADER and keep_isr == state.isr:
            return state
        if state.leader != NO_LEADER:
            log.error("%s-%d is OFFLINE: no live in-sync replica among ISR %s (unclean election is off)",
                      topic.name, p, list(state.isr))
        return replace(state, leader=NO_LEADER, leader_epoch=state.leader_epoch + 1, isr=keep_isr,
                       partition_epoch=state.partition_epoch + 1)

    async def _elect_for(self, alive: set[int], *, reason: str) -> None:
        changed: list[TopicState] = []
        for topic in list(self.topics.values()):
            new = topic
            for p, state in enumerate(topic.partition_states):
                s2 = self._elect(topic, p, state, alive)
                if s2 is not state:
                    if s2.leader != state.leader:
                        log.info("%s-%d: leader %d -> %d at epoch %d (%s)", topic.name, p, state.leader, s2.leader,
                                 s2.leader_epoch, reason)
                    new = new.with_partition(p, s2)
            if new is not topic:
                changed.append(new)
        await self._commit(changed)

    # -- requests from brokers and admins ------------------------------------
    def _topic(self, name: str) -> TopicState:
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
        return topic

    def _partition_state(self, topic: str, partition: int) -> tuple[TopicState, PartitionState]:
        t = self._topic(topic)
        if not 0 <= partition < t.partitions:
            raise UnknownTopicOrPartitionError(f"partition {partition} of topic '{topic}' does not exist")
        return t, t.partition(partition)

    def _existing_replicas(self) -> list[tuple[int, ...]]:
        return [s.replicas for t in self.topics.values() for s in t.partition_states]

    def _racks(self) -> dict[int, str | None]:
        return {b.id: b.rack for b in self.alive.values() if b.id not in self._shutting_down}

    async def create_topic(self, *, name: str, partitions: int | None = None, replication_factor: int | None = None,
                           configs: Mapping[str, str] | None = None, validate_only: bool = False,
                           assignments: Mapping[int, list[int]] | None = None) -> dict:
        async with self._lock:
            self._check_fresh()
            if name in self.topics:
                raise TopicAlreadyExistsError(f"topic '{name}' already exists")
            check_topic_collision(name, self.topics)  # against the cluster metadata, not one broker's cache
            partitions = self.settings.num_partitions if partitions in (None, -1) else int(partitions)
            rf = self.settings.default_replication_factor if replication_factor in (None, -1) else int(replication_factor)
            clean = dict(configs or {})
            if self._topic_config_check is not None:
                self._topic_config_check(name, clean)
            if assignments:
                plan = self._manual_assignment(name, {int(k): list(v) for k, v in assignments.items()})
                partitions = len(plan)
            else:
                if partitions <= 0:
                    raise InvalidPartitionsError(f"topic '{name}': number of partitions must be > 0, got {partitions}")
                if partitions > MAX_PARTITIONS:
                    raise InvalidPartitionsError(f"topic '{name}': {partitions} partitions is over the limit of {MAX_PARTITIONS}")
                if rf <= 0:
                    raise InvalidReplicationFactorError(f"topic '{name}': replication factor must be > 0, got {rf}")
                plan = assign_replicas(brokers=self._racks(), partitions=partitions, replication_factor=rf,
                                       existing=self._existing_replicas(), topic=name)
            state = TopicState(
                name=name,
                partition_states=tuple(PartitionState(tuple(r), r[0], 0, tuple(r), 0) for r in plan),
                configs=clean,
            )
            if validate_only:
                return state.to_json()
            await self._commit([state])
            log.info("created topic %s: %d partition(s), replication factor %d, configs %s",
                     name, state.partitions, state.replication_factor, clean or "{}")
            return state.to_json()

    def _manual_assignment(self, name: str, assignments: Mapping[int, list[int]]) -> list[list[int]]:
        keys = sorted(int(k) for k in assignments)
        if keys != list(range(len(keys))):
            raise InvalidRequestError(f"topic '{name}': manual assignment must name partitions 0..{len(keys) - 1}, got {keys}")
        plan = [list(assignments[k]) for k in keys]  # type: ignore[index]
        sizes = {len(r) for r in plan}
        if len(sizes) != 1:
            raise InvalidReplicationFactorError(f"topic '{name}': every partition needs the same number of replicas, got {sorted(sizes)}")
        for p, replicas in enumerate(plan):
            self._check_replica_list(name, p, replicas)
        return plan

    def _check_replica_list(self, name: str, p: int, replicas: list[int]) -> None:
        if not replicas:
            raise InvalidReplicationFactorError(f"topic '{name}' partition {p}: the replica list is empty")
        if len(set(replicas)) != len(replicas):
            raise InvalidRequestError(f"topic '{name}' partition {p}: replica list {replicas} names a broker twice")
        unknown = [r for r in replicas if r not in self.alive]
        if unknown:
            raise BrokerIdNotRegisteredError(
                f"topic '{name}' partition {p}: broker(s) {unknown} are not live members of the cluster "
                f"(live: {sorted(self.alive)})"
            )

    async def ensure_internal_topic(self, *, name: str, partitions: int, configs: Mapping[str, str],
                                    replication_factor: int) -> dict:
        """Create an internal topic if missing, with RF = min(wanted, live brokers) (Kafka's offsets-topic rule)."""
        if name in self.topics:
            return self.topics[name].to_json()
        rf = max(1, min(replication_factor, len(self._racks())))
        try:
            return await self.create_topic(name=name, partitions=partitions, replication_factor=rf, configs=configs)
        except TopicAlreadyExistsError:
            return self.topics[name].to_json()

    async def delete_topic(self, *, name: str) -> dict:
        async with self._lock:
            self._check_fresh()
            self._topic(name)
            if name in INTERNAL_TOPICS:
                raise InvalidTopicError(
                    f"topic '{name}' is internal: deleting it would lose every consumer group's committed offsets; refused"
                )
            version = self._versions.get(name)
            try:
                await self.store.delete_topic(name, expected_version=version or "")
            except StoreConflict as exc:
                self.active = False
                raise NotControllerError(f"deleting topic '{name}' conflicted in the metadata store ({exc})") from None
            self.topics.pop(name, None)
            self._versions.pop(name, None)
            await self._push([], deleted=[name])
            log.info("deleted topic %s", name)
            return {"name": name, "deleted": True}

    async def create_partitions(self, *, name: str, total: int, validate_only: bool = False,
                                assignments: list[list[int]] | None = None) -> dict:
        async with self._lock:
            self._check_fresh()
            topic = self._topic(name)
            if total < topic.partitions:
                raise InvalidPartitionsError(
                    f"topic '{name}' has {topic.partitions} partitions; partitions can only grow, not shrink to {total}")
            if total == topic.partitions:
                raise InvalidPartitionsError(f"topic '{name}' already has {total} partitions")
            if total > MAX_PARTITIONS:
                raise InvalidPartitionsError(f"topic '{name}': {total} partitions is over the limit of {MAX_PARTITIONS}")
            extra = total - topic.partitions
            if assignments:
                if len(assignments) != extra:
                    raise InvalidRequestError(f"topic '{name}': {len(assignments)} assignment(s) for {extra} new partition(s)")
                for i, replicas in enumerate(assignments):
                    self._check_replica_list(name, topic.partitions + i, list(replicas))
                plan = [list(r) for r in assignments]
            else:
                plan = assign_replicas(brokers=self._racks(), partitions=extra,
                                       replication_factor=topic.replication_factor,
                                       first_partition=topic.partitions, existing=self._existing_replicas(), topic=name)
            new = replace(topic, partition_states=topic.partition_states + tuple(
                PartitionState(tuple(r), r[0], 0, tuple(r), 0) for r in plan))
            if not validate_only:
                await self._commit([new])
                log.info("topic %s grown from %d to %d partitions", name, topic.partitions, total)
            return new.to_json()

    async def alter_configs(self, *, name: str, configs: Mapping[str, str], replace_all: bool = False,
                            delete: list[str] | None = None, validate_only: bool = False) -> dict:
        async with self._lock:
            self._check_fresh()
            topic = self._topic(name)
            new_configs = {} if replace_all else dict(topic.configs)
            new_configs.update(configs)
            for key in delete or ():
                new_configs.pop(key, None)
            if self._topic_config_check is not None:
                self._topic_config_check(name, new_configs)
            new = replace(topic, configs=new_configs)
            if not validate_only:
                await self._commit([new])
                log.info("altered config of topic %s: %s", name, new_configs)
            return new.to_json()

    async def alter_partition(self, *, topic: str, partition: int, leader: int, leader_epoch: int,
                              partition_epoch: int, isr: list[int]) -> dict:
        """AlterPartition (KIP-497) from a leader: a new ISR, checked against the current epochs."""
        async with self._lock:
            self._check_fresh()
            t, state = self._partition_state(topic, partition)
            if leader != state.leader or leader_epoch != state.leader_epoch:
                err = FencedLeaderEpochError if leader_epoch < state.leader_epoch else NotLeaderOrFollowerError
                raise err(f"{topic}-{partition}: ISR change from broker {leader} at leader epoch {leader_epoch}, "
                          f"but the leader is {state.leader} at epoch {state.leader_epoch}")
            if partition_epoch != state.partition_epoch:
                raise InvalidUpdateVersionError(
                    f"{topic}-{partition}: ISR change based on partition epoch {partition_epoch}, current is {state.partition_epoch}")
            new_isr = tuple(dict.fromkeys(int(r) for r in isr))
            if leader not in new_isr or any(r not in state.replicas for r in new_isr):
                raise InvalidRequestError(f"{topic}-{partition}: ISR {list(new_isr)} must include the leader and only replicas {list(state.replicas)}")
            added = [r for r in new_isr if r not in state.isr]
            bad = [r for r in added if r not in self.alive or r in self._shutting_down]
            if bad:
                raise IneligibleReplicaError(f"{topic}-{partition}: broker(s) {bad} cannot join the ISR: not live or shutting down")
            new_state = replace(state, isr=new_isr, partition_epoch=state.partition_epoch + 1)
            new_state = self._maybe_complete_reassignment(t, partition, new_state)
            await self._commit([t.with_partition(partition, new_state)])
            return new_state.to_json()

    async def controlled_shutdown(self, *, broker_id: int) -> dict:
        """Move leadership off `broker_id` and take it out of every ISR; returns what it still leads."""
        async with self._lock:
            self._check_fresh()
            self._shutting_down.add(broker_id)
            alive = set(self.alive)
            changed = []
            for topic in list(self.topics.values()):
                new = topic
                for p, state in enumerate(topic.partition_states):
                    if broker_id not in state.replicas:
                        continue
                    if state.leader == broker_id:
                        s2 = self._elect(topic, p, state, alive, avoid=broker_id)
                        if s2.leader == NO_LEADER:
                            continue  # nobody else in sync: it keeps leading until it stops
                    elif broker_id in state.isr and len(state.isr) > 1:
                        s2 = replace(state, isr=tuple(r for r in state.isr if r != broker_id),
                                     partition_epoch=state.partition_epoch + 1)
                    else:
                        continue
                    new = new.with_partition(p, s2)
                if new is not topic:
                    changed.append(new)
            await self._commit(changed)
            remaining = [f"{t.name}-{p}" for t in self.topics.values()
                         for p, s in enumerate(t.partition_states) if s.leader == broker_id]
            log.info("controlled shutdown of broker %d: leadership moved for %d topic(s); it still leads %d partition(s)",
                     broker_id, len(changed), len(remaining))
            return {"broker_id": broker_id, "remaining_leaderships": remaining}

    async def allocate_producer_ids(self, *, broker_id: int) -> dict:
        """A block of producer ids, persisted before it is handed out (ids are never reused).

        The counter in memory moves only once the store has the new value durably. A failed write
        (a full disk) answers a retriable error; as it may have landed all the same, the record is
        re-read from the store before the next block, so a block is skipped rather than repeated.
        """
        async with self._lock:
            self._check_fresh()
            if self._cluster_doubt is not None:
                await self._reload_cluster_doc()
            first = int(self._cluster_doc.get("next_producer_id", 0))
            count = self.settings.producer_id_block
            doc = dict(self._cluster_doc, next_producer_id=first + count)
            try:
                self._cluster_version = await self.store.put_cluster(doc, expected_version=self._cluster_version)
            except StoreConflict as exc:
                self.active = False
                raise NotControllerError(f"the cluster record changed in the metadata store ({exc})") from None
            except Exception as exc:  # a full disk, an API server error: the write's outcome is unknown
                self._cluster_doubt = f"writing the producer-id counter failed ({exc})"
                log.error("producer ids %d..%d not allocated to broker %d: the metadata store write failed (%s); "
                          "the request is answered with a retriable error", first, first + count - 1, broker_id, exc)
                raise CoordinatorLoadInProgressError(
                    f"producer ids are not available: persisting the next id block failed ({exc}); retry") from None
            self._cluster_doc = doc
            log.info("producer ids %d..%d allocated to broker %d", first, first + count - 1, broker_id)
            return {"first": first, "count": count}

    async def _reload_cluster_doc(self) -> None:
        """Re-read the cluster record after a doubt; raises a retriable error while it cannot be read."""
        try:
            cluster, _ = await self.store.load()
        except OSError as exc:
            cluster = StoreUnreadable(f"the metadata store cannot be read ({exc})")
        if isinstance(cluster, StoreUnreadable):
            self._cluster_doubt = str(cluster)
            raise CoordinatorLoadInProgressError(
                f"producer ids are not available: {cluster}; retry once it is repaired")
        self._cluster_doc, self._cluster_version = (dict(cluster.doc), cluster.version) if cluster else ({}, None)
        self._cluster_doubt = None

    # -- reassignment and preferred leaders --------------------------------------
    async def reassign(self, *, topic: str, partition: int, replicas: list[int] | None) -> dict:
        """Start moving a partition to `replicas` (None cancels a running move)."""
        async with self._lock:
            self._check_fresh()
            t, state = self._partition_state(topic, partition)
            if replicas is None:
                if not state.reassigning:
                    raise NoReassignmentInProgressError(f"{topic}-{partition} has no reassignment in progress")
                original = tuple(r for r in state.replicas if r not in state.adding)
                target = original
            else:
                target = tuple(int(r) for r in replicas)
                self._check_replica_list(topic, partition, list(target))
                if state.reassigning:
                    raise ReassignmentInProgressError(
                        f"{topic}-{partition} is already moving to {list(state.target_replicas)}; cancel it first")
                if set(target) == set(state.replicas) and target[0] == state.replicas[0]:
                    return state.to_json()
                original = state.replicas
            union = target + tuple(r for r in original if r not in target)
            adding = tuple(r for r in target if r not in original)
            removing = tuple(r for r in original if r not in target)
            new_state = replace(state, replicas=union, adding=adding, removing=removing,
                                partition_epoch=state.partition_epoch + 1)
            if replicas is None:
                new_state = replace(new_state, replicas=target, adding=(), removing=(),
                                    isr=tuple(r for r in state.isr if r in target) or state.isr)
            new_state = self._maybe_complete_reassignment(t, partition, new_state)
            await self._commit([t.with_partition(partition, new_state)])
            log.info("%s-%d: reassignment %s -> %s started (adding %s, removing %s)", topic, partition,
                     list(original), list(target), list(adding), list(removing))
            return new_state.to_json()

    def _maybe_complete_reassignment(self, t: TopicState, p: int, state: PartitionState) -> PartitionState:
        """Once every target replica is in the ISR: move leadership into the target set and drop the old replicas."""
        if not state.reassigning:
            return state
        target = state.target_replicas
        if any(r not in state.isr for r in target):
            return state
        leader, epoch = state.leader, state.leader_epoch
        if leader not in target:
            candidates = [r for r in target if r in state.isr and r in self._eligible(set(self.alive))]
            if not candidates:
                return state
            leader, epoch = candidates[0], epoch + 1
        log.info("%s-%d: reassignment to %s complete (leader %d)", t.name, p, list(target), leader)
        return replace(state, replicas=target, leader=leader, leader_epoch=epoch,
                       isr=tuple(r for r in state.isr if r in target), adding=(), removing=(),
                       partition_epoch=state.partition_epoch + 1)

    async def elect_preferred_leaders(self, *, topic: str | None = None, partitions: list[int] | None = None) -> dict:
        """Move leadership to each partition's first replica where it is alive and in sync."""
        async with self._lock:
            self._check_fresh()
            eligible = self._eligible(set(self.alive))
            results: dict[str, int] = {}
            changed = []
            names = [topic] if topic is not None else sorted(self.topics)
            for name in names:
                t = self._topic(name)
                new = t
                for p, state in enumerate(t.partition_states):
                    if partitions is not None and p not in partitions:
                        continue
                    preferred = state.target_replicas[0]
                    key = f"{name}-{p}"
                    if state.leader == preferred:
                        results[key] = ElectionNotNeededError.code
                        continue
                    if preferred not in state.isr or preferred not in eligible:
                        results[key] = PreferredLeaderNotAvailableError.code
                        continue
                    new = new.with_partition(p, replace(state, leader=preferred, leader_epoch=state.leader_epoch + 1,
                                                        partition_epoch=state.partition_epoch + 1))
                    results[key] = 0
                if new is not t:
                    changed.append(new)
            await self._commit(changed)
            return {"results": results}

    def reassignments(self) -> list[dict]:
        out = []
        for t in self.topics.values():
            for p, s in enumerate(t.partition_states):
                if s.reassigning:
                    out.append({"topic": t.name, "partition": p, "replicas": list(s.replicas),
                                "adding": list(s.adding), "removing": list(s.removing), "isr": list(s.isr),
                                "leader": s.leader})
        return out

    async def periodic(self) -> None:
        """Re-check reassignments that can complete (a target replica caught up while nothing else changed)."""
        async with self._lock:
            changed = []
            for t in list(self.topics.values()):
                new = t
                for p, s in enumerate(t.partition_states):
                    s2 = self._maybe_complete_reassignment(t, p, s)
                    if s2 is not s:
                        new = new.with_partition(p, s2)
                if new is not t:
                    changed.append(new)
            if changed:
                self._check_fresh()
                await self._commit(changed)


class StaleEpoch(KelpError):
    """A broker answered that a newer controller epoch exists: this controller is deposed."""


def now_ms() -> int:
    return int(time.time() * 1000)
