"""Requests a broker cannot serve alone: to the controller, or to a partition's leader.

Why: topic admin, ISR changes, producer-id blocks and controlled shutdowns
are the controller's to decide; REST produce, DeleteRecords and offset
lookups are a partition leader's. A broker sends them where they belong —
in-process when that is itself, over HTTP otherwise — and retries within a
bound while a new controller is elected. A controller's answer names the
metadata offset that holds the change (`metadata_offset`); the caller waits
(bounded) until this broker applied that offset, so a client sees its own
change at once without anything being applied out of log order.

Composed by `member.ClusterMember`, which gives it the shared state (`member_state`), the HTTP session,
and how to wait for an offset and to list the live brokers. An answer is
JSON; a caller that reads one names the operation's shape
(`metadata.controller_answers`). This module never changes metadata itself.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Awaitable, Callable, Mapping, Protocol, cast

from kelp.errors import (
    CoordinatorNotAvailableError,
    ErrorCode,
    KelpError,
    NotControllerError,
    RequestTimedOutError,
)
from kelp.json_types import JsonObject

from ..metadata.controller_answers import AlterPartitionItem, AlterPartitionsAnswer, PartitionAnswer
from ..metadata.model import BrokerEndpoint
from ..replica.results import PartitionInfo, ProduceResult
from .alter_partition_batcher import AlterPartitionBatcher
from .member_state import ControlSession, MemberState

__all__ = ["ControllerCall", "LeaderRouting", "error_for", "broker_id_of", "CONTROLLER_CALL_TIMEOUT_S"]

log = logging.getLogger("kelp.broker.cluster")

CONTROLLER_CALL_TIMEOUT_S = 30.0
ALTER_PARTITION_TIMEOUT_S = 10.0  # then the ISR change's outcome is unknown: its leader asks again
APPLY_WAIT_S = 5.0


class ControllerCall(Protocol):
    """`LeaderRouting.call`'s shape: a controller operation by name, wherever the controller is."""

    async def __call__(self, op: str, *, timeout_s: float = ..., **kwargs: object) -> JsonObject: ...


def broker_id_of(identity: str | None) -> int:
    """`broker-3/<uuid>` -> 3; -1 for anything else."""
    if not identity or not identity.startswith("broker-"):
        return -1
    head = identity[len("broker-"):].split("/", 1)[0]
    return int(head) if head.isdigit() else -1


def error_for(code: int, message: str) -> KelpError:
    """The KelpError subclass for a Kafka error code (the one table is kelp.errors)."""
    import kelp.errors as errors

    for value in vars(errors).values():
        if isinstance(value, type) and issubclass(value, KelpError) and value is not KelpError \
                and getattr(value, "code", None) == code:
            return value(message)
    err = KelpError(message)
    err.code = code
    return err


class LeaderRouting:
    """Requests to the controller and to partition leaders, from this broker."""

    def __init__(self, state: MemberState, session: ControlSession, *,
                 wait_applied: Callable[[int, float], Awaitable[bool]],
                 refresh_brokers: Callable[[], Awaitable[dict[int, BrokerEndpoint]]]) -> None:
        self.state = state
        self._session = session
        self._wait_applied = wait_applied  # until this broker applied a metadata offset (`MemberMetadata`)
        # This broker's ISR changes, one controller request at a time carrying all that are pending.
        self.isr_batcher = AlterPartitionBatcher(self._alter_partitions, self._alter_one_partition, error_for)
        self._refresh_brokers = refresh_brokers  # the live brokers, as the leases show them (`MemberLeases`)

    # -- to the controller --------------------------------------------------------------
    def _controller_url(self) -> str | None:
        ep = self.state.brokers.get(self.state.controller_id)
        return ep.http_url if ep is not None else None

    async def call(self, op: str, *, timeout_s: float = CONTROLLER_CALL_TIMEOUT_S, **kwargs: object) -> JsonObject:
        """Run a controller operation (in-process if this broker is the controller), retrying while none is elected;
        then wait (bounded) until this broker applied the metadata offset the answer names. The answer is the
        operation's (`metadata.controller_answers`), as JSON."""
        deadline = self.state.monotonic() + timeout_s
        delay = 0.05
        last: Exception | None = None
        while True:
            try:
                controller = self.state.controller
                if controller is not None and controller.state.active:
                    # The operation's answer is a TypedDict of JSON values (mypy#4976).
                    result = cast(JsonObject, await controller.operation(op)(**kwargs))
                else:
                    url = self._controller_url()
                    if url is None or self.state.controller_id == self.state.broker_id:
                        raise NotControllerError(f"no controller known yet in cluster '{self.state.cluster}'")
                    result = await self._remote(url, op, kwargs)
                offset = result.get("metadata_offset") if isinstance(result, dict) else None
                if isinstance(offset, int):
                    await self._wait_applied(offset, APPLY_WAIT_S)
                return result
            except (NotControllerError, OSError, asyncio.TimeoutError) as exc:
                last = exc
            except Exception as exc:
                aiohttp = sys.modules.get("aiohttp")  # a ClientError only when a remote call loaded it
                if aiohttp is None or not isinstance(exc, aiohttp.ClientError):
                    raise
                last = exc
            if self.state.monotonic() + delay > deadline:
                raise RequestTimedOutError(
                    f"no controller answered '{op}' within {timeout_s:.0f}s (last: {last}); is a "
                    "majority of brokers up?"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
            await self._learn_controller()

    async def _learn_controller(self) -> None:
        if self.state.leases is None:
            return
        try:
            rec = await self.state.leases.get(self.state.controller_lease_name)
        except Exception:
            return
        if rec is not None and rec.holder:
            holder = broker_id_of(rec.holder)
            if holder >= 0:
                self.state.controller_id = holder
                if holder not in self.state.brokers:
                    alive = await self._refresh_brokers()
                    for b, ep in alive.items():
                        self.state.brokers.setdefault(b, ep)

    async def _remote(self, url: str, op: str, kwargs: Mapping[str, object]) -> JsonObject:
        async with self._session.session().post(f"{url}/cluster/v1/controller/{op}", json=kwargs) as resp:
            body = await resp.json(content_type=None)
            if resp.status < 300:
                if not isinstance(body, dict):
                    raise KelpError(f"the controller answered '{op}' with {str(body)[:200]}, not a JSON object")
                return body
            unknown = ErrorCode.UNKNOWN_SERVER_ERROR
            code = int(body.get("error_code", unknown)) if isinstance(body, dict) else unknown
            message = body.get("message", "") if isinstance(body, dict) else str(body)
            raise error_for(code, message)

    async def ensure_internal_topic(self, name: str, *, partitions: int, configs: dict[str, str],
                                    replication_factor: int | None = None) -> None:
        """Ask the controller to create an internal topic; `replication_factor` defaults to
        offsets.topic.replication.factor (`__transaction_state` passes transaction.state.log.replication.factor)."""
        if self.state.broker.topics.exists(name):
            return
        rf = int(self.state.broker.config["offsets.topic.replication.factor"]) if replication_factor is None \
            else replication_factor
        await self.call("ensure_internal_topic", name=name, partitions=partitions, configs=configs,
                        replication_factor=rf, timeout_s=5.0)
        if not self.state.broker.topics.exists(name):
            raise CoordinatorNotAvailableError(f"internal topic '{name}' is being created; retry")

    async def alter_partition(self, topic: str, partition: int, *, leader_epoch: int, partition_epoch: int,
                              isr: list[int]) -> PartitionAnswer:
        """AlterPartition to the controller; returns its answer (the partition's state) once applied here.
        Sent with every other ISR change this broker has pending (`alter_partition_batcher`)."""
        return await self.isr_batcher.submit({"topic": topic, "partition": partition, "leader_epoch": leader_epoch,
                                              "partition_epoch": partition_epoch, "isr": isr})

    async def _alter_partitions(self, items: list[AlterPartitionItem]) -> AlterPartitionsAnswer:
        answer = await self.call("alter_partitions", leader=self.state.broker_id, partitions=items,
                                 timeout_s=ALTER_PARTITION_TIMEOUT_S)
        return cast(AlterPartitionsAnswer, answer)  # the controller's answer to this operation

    async def _alter_one_partition(self, item: AlterPartitionItem) -> PartitionAnswer:
        answer = await self.call("alter_partition", leader=self.state.broker_id, timeout_s=ALTER_PARTITION_TIMEOUT_S,
                                 **item)
        return cast(PartitionAnswer, answer)  # the controller's answer to this operation

    async def broker_json(self, broker_id: int, path: str) -> tuple[int, object]:
        """GET `path` of live broker `broker_id`'s HTTP API as this broker (the control plane's TLS and
        credentials): the status and the JSON body. The REST v3 group routes read the group's coordinator
        this way; the caller has already authorized its own client."""
        ep = self.state.brokers.get(broker_id)
        if ep is None:
            raise CoordinatorNotAvailableError(f"broker {broker_id} is not a live member of the cluster")
        async with self._session.session().get(f"{ep.http_url}{path}") as resp:
            return resp.status, await resp.json(content_type=None)

    # -- to a partition's leader ---------------------------------------------------------
    def partition_leader(self, topic: str, partition: int) -> tuple[int, str, int] | None:
        info = self.state.broker.topics.get(topic)
        if info is None or not 0 <= partition < info.partitions:
            return None
        leader = info.partition_states[partition].leader
        ep = self.state.brokers.get(leader)
        if ep is None:
            return None
        return ep.id, ep.host, ep.port

    def _leader_of(self, topic: str, partition: int) -> int:
        info = self.state.broker.topics.get(topic)
        return info.partition_states[partition].leader if info is not None and 0 <= partition < info.partitions else -1

    async def partition_infos(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], PartitionInfo | None]:
        """Log start/end, high watermark and size of partitions as their leaders know them (None where unknown)."""
        replicas = self.state.broker.replicas
        out: dict[tuple[str, int], PartitionInfo | None] = {}
        remote: dict[int, list[tuple[str, int]]] = {}
        for topic, p in keys:
            part = replicas.get_partition(topic, p)
            if part is not None and part.is_leader:
                out[(topic, p)] = replicas.partition_info(topic, p)
                continue
            leader = self._leader_of(topic, p)
            if leader in self.state.brokers and leader != self.state.broker_id:
                remote.setdefault(leader, []).append((topic, p))
            else:
                out[(topic, p)] = replicas.partition_info(topic, p) if part is not None else None

        async def ask(leader: int, wanted: list[tuple[str, int]]) -> None:
            try:
                url = f"{self.state.brokers[leader].http_url}/cluster/v1/partitions/info"
                async with self._session.session().post(url,
                                                json={"partitions": [[t, p] for t, p in wanted]}) as resp:
                    body = await resp.json(content_type=None) if resp.status == 200 else {}
            except Exception as exc:
                log.debug("partition info from broker %d failed: %s", leader, exc)
                body = {}
            for item in body.get("partitions", []):
                if item.get("log_end_offset") is None:
                    continue
                out[(item["topic"], item["partition"])] = PartitionInfo(
                    item["topic"], item["partition"], item["log_start_offset"], item["log_end_offset"],
                    item["high_watermark"], item["size_bytes"])
            for key in wanted:
                out.setdefault(key, None)

        await asyncio.gather(*(ask(b, ks) for b, ks in remote.items()))
        return out

    async def append(self, topic: str, partition: int, batch: bytes, *, acks: int = 1,
                     timeout_ms: int = 30000) -> ProduceResult:
        """Append one batch where the partition's leader is: here, or over HTTP on the leader (REST produce)."""
        part = self.state.broker.replicas.get_partition(topic, partition)
        leader = self._leader_of(topic, partition)
        if (part is not None and part.is_leader) or leader == self.state.broker_id or leader not in self.state.brokers:
            return await self.state.broker.replicas.append(topic, partition, batch, acks=acks, timeout_ms=timeout_ms)
        url = (f"{self.state.brokers[leader].http_url}/cluster/v1/partitions/{topic}/{partition}/append"
               f"?acks={acks}&timeout_ms={timeout_ms}")
        async with self._session.session().post(url, data=batch,
                                                headers={"Content-Type": "application/octet-stream"}) as resp:
            body = await resp.json(content_type=None)
            if resp.status >= 300:
                raise error_for(int(body.get("error_code", ErrorCode.UNKNOWN_SERVER_ERROR)),
                                body.get("message", f"broker {leader} answered {resp.status}"))
        return ProduceResult(topic, partition, body["base_offset"], body["last_offset"], body["log_append_time_ms"],
                             body["log_start_offset"], body["record_count"])

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords where the partition's leader is: here, or over HTTP on the leader; the new log start."""
        part = self.state.broker.replicas.get_partition(topic, partition)
        self.state.broker.topics.check_partition(topic, partition)
        leader = self._leader_of(topic, partition)
        if (part is not None and part.is_leader) or leader == self.state.broker_id or leader not in self.state.brokers:
            return await self.state.broker.replicas.delete_records(topic, partition, offset)
        url = (f"{self.state.brokers[leader].http_url}/cluster/v1/partitions/{topic}/{partition}/delete-records"
               f"?offset={offset}")
        async with self._session.session().post(url) as resp:
            body = await resp.json(content_type=None)
            if resp.status >= 300:
                raise error_for(int(body.get("error_code", ErrorCode.UNKNOWN_SERVER_ERROR)),
                                body.get("message", f"broker {leader} answered {resp.status}"))
        return int(body["low_watermark"])

    async def replica_progress(self, topic: str, partition: int) -> dict[int, int] | None:
        """Each replica's log end offset as the partition's leader sees it."""
        part = self.state.broker.replicas.get_partition(topic, partition)
        if part is not None and part.is_leader:
            return part.describe_replicas()
        ep = self.state.brokers.get(self._leader_of(topic, partition))
        if ep is None:
            return None
        try:
            url = f"{ep.http_url}/cluster/v1/partitions/{topic}/{partition}/replicas"
            async with self._session.session().get(url) as resp:
                if resp.status != 200:
                    return None
                body = await resp.json(content_type=None)
                return {int(k): int(v) for k, v in body.items()}
        except Exception:
            return None
