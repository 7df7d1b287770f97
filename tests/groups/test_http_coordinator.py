"""The HTTP admin group APIs act on this broker's coordinator only.

A group coordinated by another broker is refused with 421 and NOT_COORDINATOR (16),
naming the coordinating broker; the admin list covers this broker's partitions and
says so. A real aiohttp server on loopback, a fake cluster (see test_find_coordinator).
REST v2 consumers are not refused: they join their group wherever it is coordinated
(tests/groups/test_rest_consumers_cluster.py).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kelp.broker.groups.group import CommittedOffset
from kelp.broker.http.admin import groups as admin_groups
from kelp.broker.http.keys import BROKER
from kelp.broker.http.problems import error_middleware
from kelp.errors import UnknownTopicOrPartitionError
from tests.support.acls import open_acls

from .test_coordinator_ownership import groups_on_distinct_partitions
from .test_find_coordinator import THIS_BROKER, N, make_broker


class NoReplicas:
    def partition_info(self, topic: str, partition: int) -> Any:
        raise UnknownTopicOrPartitionError(f"topic '{topic}' partition {partition} is not on this fake broker")


async def serve(broker: Any) -> TestClient:
    app = web.Application(middlewares=[error_middleware])
    # The HTTP listener holds the broker; the routes read its parts once it serves (kelp.broker.parts).
    app[BROKER] = SimpleNamespace(parts=broker, config=broker.config, started_at=0.0, acls=open_acls())
    app.add_routes(admin_groups.routes)
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    return client


async def setup() -> tuple[Any, str, str]:
    """Broker 1 leads (and has loaded) every partition but the remote group's, which broker 2 leads."""
    broker = make_broker(topic_exists=True)
    broker.replicas = NoReplicas()
    coord = broker.groups
    local, remote = groups_on_distinct_partitions(coord, 2)
    for p in range(N):
        if p == coord.partition_for(remote):
            broker.cluster.leaders[p] = (2, "10.0.0.2", 9092)
        else:
            broker.cluster.leaders[p] = (THIS_BROKER, "10.0.0.1", 9092)
            await coord.on_become_leader(p, 0)
    return broker, local, remote


async def test_group_coordinated_elsewhere_is_refused_naming_the_broker() -> None:
    broker, local, remote = await setup()
    client = await serve(broker)
    try:
        for method, path, body in [
            ("GET", f"/admin/v1/groups/{remote}", None),
            ("DELETE", f"/admin/v1/groups/{remote}", None),
        ]:
            resp = await client.request(method, path, json=body)
            got = await resp.json()
            assert resp.status == 421, (path, got)
            assert got["error_code"] == 16
            assert f"group '{remote}' is coordinated by broker 2 (10.0.0.2:9092)" in got["message"], got
        await broker.groups.commit_offsets(local, offsets={("t", 0): CommittedOffset(4)})
        resp = await client.get(f"/admin/v1/groups/{local}")
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["offsets"][0]["committed_offset"] == 4
    finally:
        await client.close()


async def test_admin_list_is_local_and_says_which_partitions_it_covers() -> None:
    broker, local, remote = await setup()
    await broker.groups.commit_offsets(local, offsets={("t", 0): CommittedOffset(1)})
    client = await serve(broker)
    try:
        resp = await client.get("/admin/v1/groups")
        body = await resp.json()
        assert resp.status == 200
        assert [g["group_id"] for g in body["groups"]] == [local]
        assert body["scope"] == "local" and body["broker_id"] == THIS_BROKER
        assert body["offsets_topic_partitions"] == N
        assert body["coordinated_partitions"] == sorted(set(range(N)) - {broker.groups.partition_for(remote)})
    finally:
        await client.close()
