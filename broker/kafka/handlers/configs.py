"""DescribeConfigs: effective topic configs and broker configs.

Why: AdminClient.describe_configs and tools like kcat show a topic's
effective settings; each entry says whether it is a default or an override
(config source DYNAMIC_TOPIC_CONFIG=1 / DEFAULT_CONFIG=5 / STATIC_BROKER_CONFIG=4).
"""

from __future__ import annotations

import logging

from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse

from kelp.errors import InvalidRequestError, KelpError

from .registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")

TOPIC = 2
BROKER = 4
SOURCE_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5


@handles(DescribeConfigsRequest, min_version=0, max_version=4)
async def handle_describe_configs(ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    broker = ctx.broker
    R = DescribeConfigsResponse.DescribeConfigsResult
    E = R.DescribeConfigsResourceResult
    results = []
    for res in request.resources:
        keys = set(res.configuration_keys) if res.configuration_keys else None
        try:
            entries: list[tuple[str, str | None, int, bool]] = []
            if res.resource_type == TOPIC:
                for name, (value, is_default) in sorted(broker.topics.effective_configs(res.resource_name).items()):
                    entries.append((name, value, SOURCE_DEFAULT if is_default else SOURCE_TOPIC, is_default))
            elif res.resource_type == BROKER:
                if res.resource_name not in ("", str(broker.config.broker_id)):
                    raise InvalidRequestError(f"broker '{res.resource_name}' is not this broker ({broker.config.broker_id})")
                for name, value in sorted(broker.config.as_dict().items()):
                    if value is None:
                        continue
                    text = ",".join(value) if isinstance(value, list) else (str(value).lower() if isinstance(value, bool) else str(value))
                    explicit = name in broker.config.explicit
                    entries.append((name, text, SOURCE_STATIC_BROKER if explicit else SOURCE_DEFAULT, not explicit))
            else:
                raise InvalidRequestError(f"config resource type {res.resource_type} is not supported (topic=2, broker=4)")
            configs = [
                E(name=n, value=v, read_only=res.resource_type == BROKER, config_source=src,
                  is_default=d, is_sensitive=False, synonyms=[], config_type=0, documentation=None)
                for n, v, src, d in entries if keys is None or n in keys
            ]
            results.append(R(error_code=0, error_message=None, resource_type=res.resource_type,
                             resource_name=res.resource_name, configs=configs))
        except KelpError as exc:
            log.warning("describe configs of %s '%s' from %s: %s", res.resource_type, res.resource_name, ctx.client, exc)
            results.append(R(error_code=exc.code, error_message=str(exc), resource_type=res.resource_type,
                             resource_name=res.resource_name, configs=[]))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)
