"""WriteTxnMarkers: a transaction coordinator asks this partition leader to end a producer's transaction.

Why: the end of a transaction is one control batch (COMMIT or ABORT) in every partition it wrote; the
coordinator — on whichever broker leads the producer's `__transaction_state` partition — sends each
partition leader this request (API key 27, Kafka's v1-v2; v2 adds the marker's transaction version, which
Kelp reads and ignores). The leader appends the markers as Kafka does (`ReplicaManager.append_txn_markers`:
checked against the producer's state, written with acks=all, bounded by `MARKER_TIMEOUT_MS`) and answers
per partition: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH (a marker of an
older producer epoch), TRANSACTION_COORDINATOR_FENCED (an older coordinator epoch), NOT_ENOUGH_REPLICAS,
REQUEST_TIMED_OUT... After a marker landed in `__consumer_offsets` partitions, the group coordinator is told
(`handle_txn_completion`), which makes the producer's transactional offset commits visible or drops them.

Authorization (Kafka's handleWriteTxnMarkersRequest, KIP-664): ALTER on the cluster — an administrator
aborting a hanging transaction with `kafka-transactions abort`, whose admin client sends this request itself —
or else CLUSTER_ACTION on the cluster (brokers); otherwise every partition is answered
CLUSTER_AUTHORIZATION_FAILED and nothing is written.
"""

from __future__ import annotations

import logging

from kafka.protocol.producer import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from kelp.broker.replica.manager import TxnMarker
from kelp.errors import ErrorCode, KelpError

from ...loop_budget import LoopBudget
from ..access import AclOperation, access
from .error_log import PartitionErrors
from .registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")

OFFSETS_TOPIC = "__consumer_offsets"
# How long the ISR wait of a marker may take: Kafka's handler uses the broker's request.timeout.ms, whose
# default this is (Kelp has no such broker setting; the coordinator resends a marker that timed out).
MARKER_TIMEOUT_MS = 30_000
_Result = WriteTxnMarkersResponse.WritableTxnMarkerResult
_TopicResult = _Result.WritableTxnMarkerTopicResult
_PartitionResult = _TopicResult.WritableTxnMarkerPartitionResult


# -- authorization: Kafka's handleWriteTxnMarkersRequest ------------------------------------------------------
def _refused(ctx: RequestContext) -> bool:
    acc = access(ctx)
    return acc.enabled and not acc.allows_cluster(AclOperation.ALTER) \
        and not acc.allows_cluster(AclOperation.CLUSTER_ACTION)


async def _answer(request: WriteTxnMarkersRequest,
                  codes: list[dict[tuple[str, int], int]]) -> WriteTxnMarkersResponse:
    markers = []
    budget = LoopBudget()  # a request may name thousands of partitions: their answers are tens of milliseconds
    for marker, answer in zip(request.markers, codes, strict=True):
        await budget.tick()
        topics = [_TopicResult(name=t.name, partitions=[
            _PartitionResult(partition_index=p, error_code=answer[(t.name, p)]) for p in t.partition_indexes])
            for t in marker.topics]
        markers.append(_Result(producer_id=marker.producer_id, topics=topics))
    return WriteTxnMarkersResponse(markers=markers)


@handles(WriteTxnMarkersRequest, min_version=1, max_version=2)
async def handle_write_txn_markers(ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    if _refused(ctx):
        log.info("WriteTxnMarkers from %s (%s): not authorized (ALTER or CLUSTER_ACTION on the cluster)", ctx.client,
                 ctx.principal)
        return await _answer(request, [{(t.name, p): ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                                  for t in m.topics for p in t.partition_indexes} for m in request.markers])
    markers = [TxnMarker(m.producer_id, m.producer_epoch, bool(m.transaction_result), m.coordinator_epoch,
                         tuple((t.name, p) for t in m.topics for p in t.partition_indexes))
               for m in request.markers]
    answers = await ctx.broker.replicas.append_txn_markers(markers, timeout_ms=MARKER_TIMEOUT_MS)
    codes: list[dict[tuple[str, int], int]] = []
    errors = PartitionErrors("WriteTxnMarkers", ctx.client)
    budget = LoopBudget()
    for marker, answer in zip(markers, answers, strict=True):
        await budget.tick()
        code: dict[tuple[str, int], int] = {}
        for (topic, partition), error in answer.items():
            code[(topic, partition)] = ErrorCode.NONE if error is None else error.code
            if error is not None:
                errors.add(topic, partition, f"{'COMMIT' if marker.commit else 'ABORT'} marker of producer "
                                             f"{marker.producer_id}: {error}")
        written = [p for (t, p), error in answer.items() if t == OFFSETS_TOPIC and error is None]
        if written:
            try:
                ctx.broker.groups.handle_txn_completion(marker.producer_id, written, marker.commit)
            except KelpError as exc:  # the markers are written: the coordinator retries the offsets' part
                log.error("completing the offsets of producer %d's transaction on %s partitions %s: %s",
                          marker.producer_id, OFFSETS_TOPIC, written, exc)
                for p in written:
                    code[(OFFSETS_TOPIC, p)] = exc.code
        codes.append(code)
    errors.log(log)
    return await _answer(request, codes)
