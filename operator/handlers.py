"""kopf handlers: events on Cluster, Topic, ConsumerGroup and KelpUser resources, wired to `reconcile`.

Why: kopf owns watching, retries with backoff and finalizers; this module
only says which events trigger which reconciliation. Every reconciliation
goes through the `Runner` the resync loop uses too (one pass per object at
a time, on a freshly read body, status written through the status
subresource by the guarded client — conditions merged so
`lastTransitionTime` moves only on a real change). Handlers return nothing,
so kopf writes no `status.<handler>` keys (the CRDs' structural schemas
would prune them anyway). kopf keeps its own progress in `kelp.dev/`
annotations, not in status.

A reconciliation never depends on an event arriving: kopf's watch streams
are bounded by `server_timeout`, and a resync loop (`resync.py`) passes over
every resource every `KELP_OPERATOR_RESYNC_SECONDS`, repairing drift and
refreshing observed state such as lag. It is one loop, not kopf timers,
because kopf puts a finalizer on every object that has a timer.

Finalizers: a Topic with `deletePolicy: delete` gets kopf's (it must
delete the Kafka topic before the resource goes); a KelpUser gets the
operator's own `kelp.dev/user-cleanup` (its credential and ACLs go first),
handled through kopf's raw events and the resync pass, not a kopf deletion
handler (kopf's one finalizer name is the Topics'). A Topic that retains
its topic, a Cluster and a ConsumerGroup have none, so deleting a namespace
never waits for the operator; and both finalizers let go as soon as their
Cluster is gone or being deleted.
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

import aiohttp
import kopf

from .kube.client import KubeClient
from .kube.events import Recorder
from .kube.leadership import LeadershipLost
from .manifests.builders import GROUP, VERSION
from .model.objects_kelp import TopicResource
from .reconcile.brokers import AdminError
from .reconcile.resync import admin_factory, resync_loop
from .reconcile.runner import Runner
from .reconcile.topics import TopicOwners, delete_topic

log = logging.getLogger("kelp.operator")

WATCH_SERVER_TIMEOUT_S = 60
FINALIZER = "kelp.dev/topic-deletion"


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: object) -> None:
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
    leadership = getattr(memo, "leadership", None)
    memo.kube = KubeClient(guard=leadership)
    memo.http = aiohttp.ClientSession()
    memo.runner = Runner(memo.kube, admin_factory(memo.kube, memo.http),
                         instance=leadership.identity if leadership is not None else "kelp-operator")
    memo.topic_owners = TopicOwners()
    memo.resync = asyncio.create_task(resync_loop(memo.runner, getattr(memo, "namespaces", None)),
                                      name="kelp-resync")


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: object) -> None:
    memo.resync.cancel()
    await asyncio.gather(memo.resync, return_exceptions=True)
    await memo.http.close()
    memo.kube.close()


async def _reconcile(memo: kopf.Memo, kind: str, body: kopf.Body) -> None:
    # Topic events share one ownership index (rebuilt only when stale): a resume event per Topic at start-up
    # must not list every Topic each.
    owners = memo.topic_owners if kind == "Topic" else None
    try:
        await memo.runner.reconcile(kind, body["metadata"]["namespace"], body["metadata"]["name"], owners=owners)
    except LeadershipLost as exc:
        # Not kopf's to retry: the run loop stops this replica; until then, nothing is written.
        raise kopf.PermanentError(str(exc)) from None


# -- Cluster --------------------------------------------------------------------------

@kopf.on.resume(GROUP, VERSION, "clusters")
@kopf.on.create(GROUP, VERSION, "clusters")
@kopf.on.update(GROUP, VERSION, "clusters")
async def cluster_changed(body: kopf.Body, memo: kopf.Memo, **_: object) -> None:
    await _reconcile(memo, "Cluster", body)


# -- Topic ------------------------------------------------------------------------------

@kopf.on.resume(GROUP, VERSION, "topics")
@kopf.on.create(GROUP, VERSION, "topics")
@kopf.on.update(GROUP, VERSION, "topics")
async def topic_changed(body: kopf.Body, memo: kopf.Memo, **_: object) -> None:
    await _reconcile(memo, "Topic", body)


def _deletes_topic(spec: kopf.Spec, **_: object) -> bool:
    return spec.get("deletePolicy") == "delete"


@kopf.on.delete(GROUP, VERSION, "topics", when=_deletes_topic)
async def topic_deleted(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: object) -> None:
    # kopf's body of a Topic: the CRD's shape, as the API server validated it.
    topic = cast(TopicResource, body)
    try:
        async with memo.runner.lock("Topic", body["metadata"]["namespace"], body["metadata"]["name"]):
            logger.info(await delete_topic(topic, memo.kube, memo.runner.admin_for,
                                           events=Recorder(memo.kube, instance=memo.runner.instance)))
    except LeadershipLost as exc:
        raise kopf.TemporaryError(str(exc), delay=10) from None
    except AdminError as exc:
        raise kopf.TemporaryError(f"cannot delete the topic yet: {exc.message}", delay=10) from None


# -- KelpUser ---------------------------------------------------------------------------------

@kopf.on.resume(GROUP, VERSION, "kelpusers")
@kopf.on.create(GROUP, VERSION, "kelpusers")
@kopf.on.update(GROUP, VERSION, "kelpusers")
async def user_changed(body: kopf.Body, memo: kopf.Memo, **_: object) -> None:
    await _reconcile(memo, "KelpUser", body)


@kopf.on.event(GROUP, VERSION, "kelpusers")
async def user_event(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: object) -> None:
    """A deleted KelpUser: its credential and ACLs go, then the operator's own finalizer (not kopf's, which is
    named for Topics); the resync pass retries what this could not finish."""
    if not (body.get("metadata") or {}).get("deletionTimestamp"):
        return
    try:
        done = await memo.runner.finalize("KelpUser", body["metadata"]["namespace"], body["metadata"]["name"])
    except LeadershipLost as exc:
        logger.warning("KelpUser clean-up stopped: %s", exc)
        return
    if done:
        logger.info(done)


# -- ConsumerGroup ------------------------------------------------------------------------

@kopf.on.resume(GROUP, VERSION, "consumergroups")
@kopf.on.create(GROUP, VERSION, "consumergroups")
@kopf.on.update(GROUP, VERSION, "consumergroups")
async def group_changed(body: kopf.Body, memo: kopf.Memo, **_: object) -> None:
    await _reconcile(memo, "ConsumerGroup", body)
