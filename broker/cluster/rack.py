"""A broker's rack from its Kubernetes node's label, read once at start-up.

Why: rack-aware replica placement (placement.py, the operator's plans) only
helps if each broker knows which failure domain it runs in, and on
Kubernetes that is a label on the node the pod landed on
(`topology.kubernetes.io/zone` usually) — known only after scheduling.
Strimzi reads it with an init container; a Kelp broker reads it itself
before it registers (`broker.rack.node.label` names the label, the pod's
`spec.nodeName` arrives as `kube.node.name` through the downward API, and
the operator binds the broker's ServiceAccount to a ClusterRole that may
`get` nodes). An explicit `broker.rack` wins. A node without the label is
not fatal: the broker runs without a rack, says so in its log, and the
operator's `RackAware` condition names it.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from kelp import clock
from kelp.clock import Monotonic
from kelp.kube.api import ApiClient, KubeApiError, request

__all__ = ["rack_from_node", "RackLookupError"]

log = logging.getLogger("kelp.broker.cluster")


class RackLookupError(Exception):
    """The node could not be read (missing name, RBAC, API server unreachable for the whole budget)."""


def rack_from_node(api_factory: Callable[[], ApiClient], node: str, label: str, *, budget_s: float = 30.0,
                   sleep: Callable[[float], None] = time.sleep, monotonic: Monotonic = clock.monotonic) -> str | None:
    """The value of `label` on node `node`, None when the node has no such label.

    Blocking (call it in a worker thread). Retries transient failures (5xx,
    connection errors) for up to `budget_s`; missing credentials and a
    401/403/404 fail at once — they do not heal by waiting.
    """
    if not node:
        raise RackLookupError(f"broker.rack.node.label is {label!r} but kube.node.name is empty: give the pod "
                              "KELP_KUBE_NODE_NAME from the downward API (fieldRef spec.nodeName)")
    try:
        api = api_factory()
    except Exception as exc:  # noqa: BLE001 — kubernetes' ConfigException and friends
        raise RackLookupError(f"no Kubernetes API credentials to read node {node!r} for its {label!r} label "
                              f"(in-cluster service account, or kube.config): {exc}") from None
    deadline = monotonic() + budget_s
    delay = 0.2
    while True:
        try:
            body = request(api, "GET", f"/api/v1/nodes/{node}", timeout_s=5.0)
            break
        except KubeApiError as exc:
            if exc.status in (401, 403, 404):
                raise RackLookupError(f"cannot read node {node!r} for its {label!r} label: {exc}") from None
            error: Exception = exc
        except Exception as exc:  # noqa: BLE001 — urllib3/socket errors: retried, then reported
            error = exc
        if monotonic() + delay > deadline:
            raise RackLookupError(f"cannot read node {node!r} for its {label!r} label within {budget_s:.0f} s: "
                                  f"{error}") from None
        sleep(delay)
        delay = min(delay * 2, 2.0)
    meta = body.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    value = labels.get(label) if isinstance(labels, dict) else None
    if not value:
        log.warning("node %s has no label %s: this broker runs without a rack (replica placement "
                    "cannot keep its replicas apart from others' by rack)", node, label)
        return None
    return str(value)
