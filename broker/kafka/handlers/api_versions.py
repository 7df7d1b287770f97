"""ApiVersions: advertise exactly the registered handlers' version ranges.

Why: clients pick each API's version from this answer (librdkafka uses the
v2 record format only if Produce >= 3 and Fetch >= 4). A request above our
highest version is answered in v0 with UNSUPPORTED_VERSION and the ranges, as
Kafka does, so the client can retry with a version we speak. v4 (what the
Java client 3.7+ sends first, Spark's Kafka connector among them) has v3's
body; serving it saves every Java connection a refused round trip.
"""

from __future__ import annotations

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from kelp.errors import ErrorCode

from .registry import RequestContext, all_handlers, handles


@handles(ApiVersionsRequest, min_version=0, max_version=4)
async def handle_api_versions(ctx: RequestContext, request: ApiVersionsRequest | None) -> ApiVersionsResponse:
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=s.api_key, min_version=s.min_version, max_version=s.max_version)
        for s in all_handlers()
    ]
    error = ErrorCode.UNSUPPORTED_VERSION if ctx.unsupported_version else ErrorCode.NONE
    return ApiVersionsResponse(error_code=error, api_keys=keys, throttle_time_ms=0)
