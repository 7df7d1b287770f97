"""ApiVersions: advertise exactly the registered handlers' version ranges.

Why: clients pick each API's version from this answer (librdkafka uses the
v2 record format only if Produce >= 3 and Fetch >= 4). A request above our
highest version is answered in v0 with UNSUPPORTED_VERSION and the ranges, as
Kafka does, so the client can retry with a version we speak. v4 (what the
Java client 3.7+ sends first, Spark's Kafka connector among them) has v3's
body; serving it saves every Java connection a refused round trip. v3+ also
carries the features (KIP-584): Kelp advertises Kafka's `transaction.version`
(supported 0-2, finalized at the broker's `transaction.version` setting), which
is how a Kafka 4 Java producer decides to run transactions v2 (KIP-890 part 2),
and `group.version` (supported 0-1, finalized 1: the consumer group protocol of
KIP-848 is always served, ConsumerGroupHeartbeat and ConsumerGroupDescribe are
registered), which Kafka 4's tools read to know the broker has it, and `share.version` (supported 0-1,
finalized 1: KIP-932's share groups are served, ShareGroupHeartbeat/Describe and ShareFetch/Acknowledge v1).
"""

from __future__ import annotations

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from kelp.errors import ErrorCode

from .registry import RequestContext, all_handlers, handles

TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"
GROUP_VERSION_LEVEL = 1  # 1: the consumer rebalance protocol (KIP-848) is enabled
SHARE_VERSION = "share.version"
SHARE_VERSION_LEVEL = 1  # 1: share groups (KIP-932) are enabled
FEATURES_EPOCH = 1


@handles(ApiVersionsRequest, min_version=0, max_version=4)
async def handle_api_versions(ctx: RequestContext, request: ApiVersionsRequest | None) -> ApiVersionsResponse:
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=s.api_key, min_version=s.min_version, max_version=s.max_version)
        for s in all_handlers()
    ]
    error = ErrorCode.UNSUPPORTED_VERSION if ctx.unsupported_version else ErrorCode.NONE
    if ctx.api_version < 3:
        return ApiVersionsResponse(error_code=error, api_keys=keys, throttle_time_ms=0)
    # Features (KIP-584): transaction.version, levels 0-2 supported, finalized at the broker's setting (a Java
    # client runs transactions v2, KIP-890 part 2, only when the finalized level is 2), and group.version 0-1,
    # finalized 1 (the consumer protocol is always on), and share.version 0-1, finalized 1 (share groups are
    # on). A level 0 is not listed as finalized, as Kafka. The
    # epoch is constant as the levels are static settings.
    level = ctx.broker.transactions.config.transaction_version
    R = ApiVersionsResponse
    finalized = {GROUP_VERSION: GROUP_VERSION_LEVEL, SHARE_VERSION: SHARE_VERSION_LEVEL, TRANSACTION_VERSION: level}
    return R(error_code=error, api_keys=keys, throttle_time_ms=0,
             supported_features=[R.SupportedFeatureKey(name=GROUP_VERSION, min_version=0, max_version=1),
                                 R.SupportedFeatureKey(name=SHARE_VERSION, min_version=0, max_version=1),
                                 R.SupportedFeatureKey(name=TRANSACTION_VERSION, min_version=0, max_version=2)],
             finalized_features_epoch=FEATURES_EPOCH,
             finalized_features=[R.FinalizedFeatureKey(name=name, max_version_level=lv, min_version_level=lv)
                                 for name, lv in finalized.items() if lv > 0])
