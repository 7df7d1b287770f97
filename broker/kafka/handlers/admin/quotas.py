"""DescribeClientQuotas (v0-v1) and AlterClientQuotas (v0-v1): client quotas, as `kafka-configs` sets and shows them.

Why: `kafka-configs --bootstrap-server ... --entity-type users --entity-name alice --alter --add-config
producer_byte_rate=1048576` sends AlterClientQuotas; `--describe` sends DescribeClientQuotas. The rules (entities,
keys, values, filters) are `kelp.broker.metadata.client_quotas`'; the change is the controller's
(`alter_client_quotas`), answered once this broker applied it. These handlers translate requests and answers.

Authorization (Kafka's KafkaApis): DescribeClientQuotas needs DESCRIBE_CONFIGS on the cluster, AlterClientQuotas
ALTER_CONFIGS; refused, Describe answers CLUSTER_AUTHORIZATION_FAILED, Alter answers it for every entry.
"""

from __future__ import annotations

import logging

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

from kelp.errors import ErrorCode, KelpError

from ....metadata.client_quotas import InvalidQuota, describe_quotas, entity_json
from ...access import AclOperation, access, denied_message
from ..registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")

DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


@handles(DescribeClientQuotasRequest, min_version=0, max_version=1)
async def handle_describe_client_quotas(ctx: RequestContext, request: DescribeClientQuotasRequest,
                                        ) -> DescribeClientQuotasResponse:
    if not access(ctx).allows_cluster(AclOperation.DESCRIBE_CONFIGS):
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=DENIED,
                                            error_message=denied_message(ctx, "DescribeClientQuotas"), entries=None)
    components = [(c.entity_type, int(c.match_type), c.match) for c in request.components or []]
    try:
        found = describe_quotas(ctx.broker.cluster.state.image.client_quotas, components, bool(request.strict))
    except InvalidQuota as exc:
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                                            error_message=str(exc), entries=None)
    E = DescribeClientQuotasResponse.EntryData
    return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, entries=[
        E(entity=[E.EntityData(**part) for part in entity_json(entity)],
          values=[E.ValueData(key=k, value=v) for k, v in sorted(values.items())]) for entity, values in found])


@handles(AlterClientQuotasRequest, min_version=0, max_version=1)
async def handle_alter_client_quotas(ctx: RequestContext, request: AlterClientQuotasRequest,
                                     ) -> AlterClientQuotasResponse:
    R = AlterClientQuotasResponse.EntryData
    entities: list[list[tuple[str, str | None]]] = [[(e.entity_type, e.entity_name) for e in entry.entity or []]
                                                     for entry in request.entries or []]

    def answer(results: list[tuple[int, str | None]]) -> AlterClientQuotasResponse:
        return AlterClientQuotasResponse(throttle_time_ms=0, entries=[
            R(error_code=code, error_message=message,
              entity=[R.EntityData(entity_type=kind, entity_name=name) for kind, name in entity])
            for (code, message), entity in zip(results, entities, strict=True)])

    if not access(ctx).allows_cluster(AclOperation.ALTER_CONFIGS):
        why = denied_message(ctx, "AlterClientQuotas")
        return answer([(DENIED, why)] * len(entities))
    entries = [{"entity": [{"entity_type": kind, "entity_name": name} for kind, name in entity],
                "ops": [{"key": op.key, "value": op.value, "remove": bool(op.remove)} for op in entry.ops or []]}
               for entity, entry in zip(entities, request.entries or [], strict=True)]
    decided = await ctx.broker.cluster.routing.call("alter_client_quotas", entries=entries,
                                            validate_only=bool(request.validate_only))
    results = _results(decided.get("results"), len(entities))
    for (code, message), entity in zip(results, entities, strict=True):
        if code:
            log.info("AlterClientQuotas for %s from %s: error %d: %s", entity, ctx.client, code, message)
    return answer(results)


def _results(doc: object, count: int) -> list[tuple[int, str | None]]:
    """The controller's answer, one (error code, message) per entry (JSON: lists of two)."""
    if not isinstance(doc, list) or len(doc) != count:
        raise KelpError(f"alter_client_quotas: the controller answered {count} entries with {doc!r:.200}")
    out: list[tuple[int, str | None]] = []
    for item in doc:
        code, message = item
        out.append((int(code), None if message is None else str(message)))
    return out
