"""Broker config changes that need no restart: spec.config's dynamic keys, applied through the admin API.

Why: every key of `spec.config` written into the brokers' config file is
part of the pod template's config hash, so changing it restarts every broker
pod (one at a time, under the min.insync rule) — for `log.retention.ms` or
`min.insync.replicas` that is an hour of rolling for nothing. Kafka changes
those at run time (`kafka-configs --entity-type brokers --entity-default`),
and so does Kelp (`kelp.config.keys.DYNAMIC_BROKER_KEYS`, kept in the
metadata log, applied by every broker at once). So the operator keeps them
out of the file (`ClusterSpec.broker_config`) and makes the cluster-wide
default entity equal `ClusterSpec.dynamic_config()` on every pass:
`GET /admin/v1/brokers/configs`, then one `PATCH` with what differs — keys
to set, and keys set there but not in the spec to delete (the Cluster is
the source of truth, as in Strimzi: a change made by hand with kafka-configs
to the default entity is reverted; per-broker entities are left alone).

Nothing here raises for what a user can act on: an unreachable cluster is
retried next pass, a refusal becomes a condition and a Warning Event.
"""

from __future__ import annotations

from ..model.objects_kelp import Condition
from ..model.status import condition
from .brokers import CONFIGS_PATH, AdminError
from .resources import ClusterPass

__all__ = ["apply_dynamic_config", "CONFIGS_PATH"]


def _describe(patch: dict[str, str | None]) -> str:
    return ", ".join(f"{k}={v}" if v is not None else f"{k} (back to the broker default)"
                     for k, v in sorted(patch.items()))


async def apply_dynamic_config(ctx: ClusterPass) -> Condition | None:
    """Bring the cluster-wide dynamic broker config to the spec's; a Progressing condition only on refusal."""
    if ctx.admin is None or ctx.observed.cluster is None:
        return None  # applied once a broker answers; the brokers keep what the metadata log holds meanwhile
    desired = ctx.spec.dynamic_config()
    try:
        current = dict((await ctx.admin.broker_configs()).get("configs") or {})
    except AdminError as exc:
        if exc.status == 0:
            return None  # unreachable between the observation and now: next pass
        message = f"reading the brokers' dynamic config failed: {exc.message}; retried next pass"
        await ctx.emit("BrokerConfigUnknown", message, warning=True)
        return None
    patch: dict[str, str | None] = {k: v for k, v in desired.items() if str(current.get(k)) != v}
    patch.update({k: None for k in current if k not in desired})
    if not patch:
        return None
    await ctx.kube.fence()  # min.insync.replicas and unclean election change what the cluster promises
    try:
        await ctx.admin.alter_broker_configs(patch)
    except AdminError as exc:
        message = (f"the brokers refused the dynamic config change {_describe(patch)}: {exc.message}; fix "
                   "spec.config (the brokers keep their current values)")
        await ctx.emit("BrokerConfigRefused", message, warning=True)
        return condition("Progressing", False, "BrokerConfigRefused", message)
    await ctx.emit("BrokerConfigUpdated", f"applied to every broker without a restart: {_describe(patch)}")
    return None
