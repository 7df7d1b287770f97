"""kopf handlers: events on Cluster, Topic and ConsumerGroup resources, wired to `reconcile`.

Why: kopf owns watching, retries with backoff and finalizers; this module
only says which events trigger which reconciliation and writes the result
into the status subresource (conditions merged so `lastTransitionTime`
moves only on a real change). Handlers return nothing, so kopf writes no
`status.<handler>` keys (the CRDs' structural schemas would prune them
anyway). kopf keeps its own progress in `kelp.dev/` annotations, not in
status.

A reconciliation never depends on an event arriving: kopf's watch streams
are bounded by `server_timeout`, and a resync loop (`resync.py`) passes over
every resource every `KELP_OPERATOR_RESYNC_SECONDS`, repairing drift and
refreshing observed state such as lag. It is one loop, not kopf timers,
because kopf puts a finalizer on every object that has a timer.

Finalizers: only a Topic with `deletePolicy: delete` gets one (it must
delete the Kafka topic before the resource goes). A Topic that retains its
topic, a Cluster and a ConsumerGroup have none, so deleting a namespace
never waits for the operator; and the Topic finalizer lets go as soon as
its Cluster is gone.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import kopf

from .brokers import AdminError
from .builders import GROUP, VERSION
from .kube import KubeClient
from .reconcile import delete_topic, reconcile_cluster, reconcile_group, reconcile_topic
from .resync import admin_factory, resync_loop, status_patch

log = logging.getLogger("kelp.operator")

WATCH_SERVER_TIMEOUT_S = 60
FINALIZER = "kelp.dev/topic-deletion"


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kelp.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kelp.dev", key="last-handled-configuration")
    # Bounded watches: the server ends each stream, the client gives up on a silent one.
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT_S
    settings.watching.client_timeout = WATCH_SERVER_TIMEOUT_S + 30
    settings.watching.connect_timeout = 10
    settings.networking.request_timeout = 30
    settings.posting.level = logging.WARNING
    memo.kube = KubeClient()
    memo.http = aiohttp.ClientSession()
    memo.resync = asyncio.create_task(resync_loop(memo.kube, memo.http, getattr(memo, "namespaces", None)),
                                      name="kelp-resync")


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    memo.resync.cancel()
    await asyncio.gather(memo.resync, return_exceptions=True)
    await memo.http.close()
    memo.kube.close()


def _admin_factory(memo: kopf.Memo):
    return admin_factory(memo.kube, memo.http)


def _write(patch: kopf.Patch, body: kopf.Body, result: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    for key, value in status_patch(body, result).items():
        patch.status[key] = value


# -- Cluster --------------------------------------------------------------------------

@kopf.on.resume(GROUP, VERSION, "clusters")
@kopf.on.create(GROUP, VERSION, "clusters")
@kopf.on.update(GROUP, VERSION, "clusters")
async def cluster_changed(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    _write(patch, body, await reconcile_cluster(body, memo.kube, _admin_factory(memo)))


# -- Topic ------------------------------------------------------------------------------

@kopf.on.resume(GROUP, VERSION, "topics")
@kopf.on.create(GROUP, VERSION, "topics")
@kopf.on.update(GROUP, VERSION, "topics")
async def topic_changed(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    _write(patch, body, await reconcile_topic(body, memo.kube, _admin_factory(memo)))


def _deletes_topic(spec: kopf.Spec, **_: Any) -> bool:
    return spec.get("deletePolicy") == "delete"


@kopf.on.delete(GROUP, VERSION, "topics", when=_deletes_topic)
async def topic_deleted(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    try:
        logger.info(await delete_topic(body, memo.kube, _admin_factory(memo)))
    except AdminError as exc:
        raise kopf.TemporaryError(f"cannot delete the topic yet: {exc.message}", delay=10) from None


# -- ConsumerGroup ------------------------------------------------------------------------

@kopf.on.resume(GROUP, VERSION, "consumergroups")
@kopf.on.create(GROUP, VERSION, "consumergroups")
@kopf.on.update(GROUP, VERSION, "consumergroups")
async def group_changed(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    _write(patch, body, await reconcile_group(body, memo.kube, _admin_factory(memo)))
