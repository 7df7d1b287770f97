"""ConsumerGroup resources: the coordinator's view in status, offset resets applied once and only while Empty.

Why: a ConsumerGroup resource is mostly observation (state, members, lag per
partition as `kelp groups describe` shows it); its one action,
`spec.resetOffsets`, must never run twice for one `requestId` nor while
consumers are active, as Kafka's `kafka-consumer-groups --reset-offsets`
refuses a non-empty group. A reset follows a fence (`KubeClient.fence`): a
replica that lost the Lease moves no offsets.
"""

from __future__ import annotations

from kelp.errors import ErrorCode

from ..kube.client import KubeClient
from ..kube.events import Recorder
from ..manifests.spec import ClusterSpec
from ..model.admin_types import GroupDescription, OffsetResetRequest, ResetTarget
from ..model.objects_kelp import Condition, ConsumerGroupResource, ConsumerGroupSpec, ConsumerGroupStatus
from ..model.status import condition, group_status, group_unobserved
from .brokers import AdminError
from .resources import AdminFactory, Result, cluster_of, paused

__all__ = ["reconcile_group"]

# spec.resetOffsets.to -> what the admin API's reset-offsets calls it.
_RESET_TO: dict[str, ResetTarget] = {
    "earliest": "earliest", "latest": "latest", "timestamp": "datetime", "offset": "offset"}


async def reconcile_group(body: ConsumerGroupResource, kube: KubeClient, admin_for: AdminFactory, *,
                          events: Recorder | None = None) -> Result[ConsumerGroupStatus]:
    spec: ConsumerGroupSpec = body.get("spec") or {}
    meta = body["metadata"]
    group = spec.get("groupId") or meta["name"]
    old: ConsumerGroupStatus = body.get("status") or {}
    status: ConsumerGroupStatus = {"observedGeneration": int(meta.get("generation") or 0), **group_unobserved()}
    cluster = await cluster_of(body, kube)
    if not isinstance(cluster, ClusterSpec):
        return status, [cluster]
    admin = await admin_for(cluster)
    conds: list[Condition] = []

    async def emit(reason: str, message: str, *, warning: bool = False) -> None:
        if events is not None:
            await events.emit(body, reason, message, warning=warning)

    async def describe() -> GroupDescription | None:
        try:
            return await admin.describe_group(group)
        except AdminError as exc:
            if exc.status == 404 or exc.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                return None
            raise

    try:
        described = await describe()
        reset = spec.get("resetOffsets")
        if reset and reset.get("requestId") != old.get("lastAppliedRequestId") and paused(body):
            conds.append(condition("OffsetsReset", False, "ReconciliationPaused",
                                   f"reset {reset.get('requestId')} waits: the ConsumerGroup is annotated "
                                   "kelp.dev/pause-reconciliation=true"))
        elif reset and reset.get("requestId") != old.get("lastAppliedRequestId"):
            request_id = reset["requestId"]
            if described and described["members"]:
                message = (f"reset {request_id} waits: group '{group}' has {len(described['members'])} member(s) "
                           f"(state {described['state']}); it is applied once the group is Empty")
                await emit("OffsetsResetWaiting", message)
                conds.append(condition("OffsetsReset", False, "Waiting", message))
            else:
                req: OffsetResetRequest = {"topic": reset["topic"], "to": _RESET_TO[reset["to"]], "execute": True}
                if reset.get("partitions"):
                    req["partitions"] = list(reset["partitions"])
                if reset["to"] == "timestamp":
                    req["value"] = reset["timestamp"]
                elif reset["to"] == "offset":
                    req["value"] = int(reset["offset"])
                await kube.fence()  # moves the group's committed offsets: consumers re-read or skip records
                try:
                    await admin.reset_offsets(group, req)
                except AdminError as exc:
                    if exc.status == 0:
                        raise
                    reason = "Waiting" if exc.error_code == ErrorCode.NON_EMPTY_GROUP else "Refused"
                    message = f"reset {request_id}: {exc.message}"
                    if reason == "Waiting":
                        await emit("OffsetsResetWaiting", message)
                    else:
                        await emit("OffsetsResetRefused", message, warning=True)
                    conds.append(condition("OffsetsReset", False, reason, message))
                else:
                    status["lastAppliedRequestId"] = request_id
                    await emit("OffsetsReset", f"reset {request_id} moved '{reset['topic']}' to {reset['to']}")
                    conds.append(condition("OffsetsReset", True, "Applied",
                                           f"reset {request_id} moved '{reset['topic']}' to {reset['to']}"))
                    described = await describe()
    except AdminError as exc:
        reason = "BrokersUnreachable" if exc.status == 0 else "BrokerRefused"
        return status, [condition("Ready", False, reason, exc.message), *conds]
    status.update(group_status(described))
    message = (f"group '{group}': {status['state']}, {status['members']} member(s), total lag {status['totalLag']}"
               if described else f"group '{group}' has no members and no committed offsets yet")
    return status, [condition("Ready", True, "GroupObserved", message), *conds]
