"""`/admin/v1/transactions` and a partition's producers: kafka-transactions' answers over plain HTTP.

Why: operators (the CLI's `kelp transactions`) need to see which transactions run, how long they have been
open and on which partitions, and which producers hold a partition's last stable offset back — a hanging
transaction — without a Java admin client. The answers are the Kafka APIs' (`ListTransactions`,
`DescribeTransactions`, `DescribeProducers`) from the same sources:

- `GET /admin/v1/transactions[?state=Ongoing[,PrepareCommit...]&producer_id=..&min_duration_ms=..&pattern=..]` lists
  the transactional ids this broker coordinates (those of the `__transaction_state` partitions it leads, as
  Kafka's ListTransactions; a cluster-wide list asks every broker), only those the principal may DESCRIBE.
- `GET /admin/v1/transactions/{transactional_id}`: state, producer id and epoch, timeout, start time and
  partitions; DESCRIBE on the transactional id. An id coordinated by another broker answers 421 Misdirected
  Request (NOT_COORDINATOR) naming that broker; a loading coordinator 503; an unknown id 404.
- `GET /admin/v1/topics/{topic}/partitions/{partition}/producers`: this replica's producers (epoch, last
  sequence and timestamp, coordinator epoch, open transaction's first offset) with its last stable offset
  and high watermark; READ on the topic, as Kafka's DescribeProducers.

This module must never change transaction or producer state.
"""

from __future__ import annotations

from aiohttp import web

from kelp.errors import CoordinatorLoadInProgressError, ErrorCode, TransactionalIdNotFoundError
from kelp.json_types import JsonData
from kelp.security.acl import AclOperation, ResourceType

from ...client_patterns import InvalidPattern, full_matches
from ...loop_budget import LoopBudget
from ...parts import BrokerParts
from ...transactions.txn_config import TXN_TOPIC
from ..access.route_access import access_of
from ..problems import HttpProblem, json_response
from ..serving import serving

__all__ = ["routes"]

routes = web.RouteTableDef()
PREFIX = "/admin/v1/transactions"


def _ints(request: web.Request, name: str) -> list[int]:
    out = []
    for raw in request.query.getall(name, []):
        for item in filter(None, raw.split(",")):
            try:
                out.append(int(item))
            except ValueError:
                raise HttpProblem(400, f"'{name}' must be an integer, got {item!r}") from None
    return out


@routes.get(PREFIX)
async def list_transactions(request: web.Request) -> web.Response:
    broker = serving(request)
    states = [s for raw in request.query.getall("state", []) for s in raw.split(",") if s]
    durations = _ints(request, "min_duration_ms")
    pattern = request.query.get("pattern") or None
    unknown, found = await broker.transactions.list_transactions(
        states=states, producer_ids=_ints(request, "producer_id"), duration_ms=durations[-1] if durations else -1)
    if unknown:
        raise HttpProblem(400, f"unknown transaction state(s) {', '.join(unknown)}: the states are Empty, Ongoing, "
                               "PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, PrepareEpochFence")
    # The ACLs first, then the client's pattern (RE2, off the loop) against only the ids it may see.
    shown = await access_of(request).allowed_in_slices(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                                       (tid for tid, _, _ in found))
    found = [f for f in found if f[0] in shown]
    if pattern:
        try:
            matched = set(await full_matches(pattern, [tid for tid, _, _ in found]))
        except InvalidPattern as exc:
            raise HttpProblem(400, f"'pattern' {pattern[:200]!r} is not a valid regular expression: {exc}") from None
        found = [f for f in found if f[0] in matched]
    out: list[JsonData] = []
    budget = LoopBudget()  # every id of the coordinator: thousands of descriptions
    for tid, pid, state in found:
        await budget.tick()
        d = broker.transactions.describe(tid)
        out.append({"transactional_id": tid, "producer_id": pid, "producer_epoch": d.producer_epoch,
                    "state": state, "start_ms": d.start_ms if d.start_ms >= 0 else None,
                    "partitions": len(d.partitions)})
    return json_response({"coordinator": broker.config.broker_id, "transactions": out})


def _coordinator_of(broker: BrokerParts, transactional_id: str) -> int | None:
    info = broker.topics.get(TXN_TOPIC)
    if info is None:
        return None
    p = broker.transactions.state.partition_for(transactional_id)
    if not 0 <= p < info.partitions:
        return None
    leader = info.partition_states[p].leader
    return leader if leader >= 0 else None


@routes.get(PREFIX + "/{transactional_id}")
async def describe_transaction(request: web.Request) -> web.Response:
    broker = serving(request)
    tid = request.match_info["transactional_id"]
    d = broker.transactions.describe(tid)
    if d.error == ErrorCode.NOT_COORDINATOR:
        leader = _coordinator_of(broker, tid)
        if leader is None:
            raise TransactionalIdNotFoundError(f"transactional id '{tid}' does not exist (no broker coordinates it)")
        raise HttpProblem(421, f"transactional id '{tid}' is coordinated by broker {leader}, not broker "
                               f"{broker.config.broker_id}", error_code=ErrorCode.NOT_COORDINATOR)
    if d.error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        raise CoordinatorLoadInProgressError(f"broker {broker.config.broker_id} is loading the transactions of "
                                             f"'{tid}'; retry")
    if d.error == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
        raise TransactionalIdNotFoundError(f"transactional id '{tid}' does not exist")
    if d.error:
        raise HttpProblem(400, f"cannot describe transactional id '{tid}': error {d.error}", error_code=d.error)
    return json_response({
        "transactional_id": tid, "coordinator": broker.config.broker_id, "state": d.state,
        "producer_id": d.producer_id, "producer_epoch": d.producer_epoch, "timeout_ms": d.timeout_ms,
        "start_ms": d.start_ms if d.start_ms >= 0 else None,
        "partitions": [{"topic": t, "partition": p} for t, p in d.partitions]})


@routes.get("/admin/v1/topics/{topic}/partitions/{partition}/producers")
async def describe_producers(request: web.Request) -> web.Response:
    broker = serving(request)
    topic = request.match_info["topic"]
    try:
        partition = int(request.match_info["partition"])
    except ValueError:
        raise HttpProblem(400, f"partition must be an integer, got {request.match_info['partition']!r}") from None
    broker.topics.check_partition(topic, partition)
    producers, lso, hw = broker.replicas.active_producers(topic, partition)
    return json_response({
        "topic": topic, "partition": partition, "broker": broker.config.broker_id, "last_stable_offset": lso,
        "high_watermark": hw,
        "producers": [{"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
                       "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
                       "coordinator_epoch": p.coordinator_epoch,
                       "current_txn_start_offset": p.txn_start_offset if p.txn_start_offset >= 0 else None}
                      for p in producers]})
