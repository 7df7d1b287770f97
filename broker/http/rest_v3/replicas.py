"""Confluent REST v3 replicas, ongoing reassignments and a partition's offsets.

Why: Confluent's UI and scripts show where each partition's replicas live, which are in sync, which
partitions are being moved (a reassignment started with `kafka-reassign-partitions`, the `kelp partitions
reassign` CLI, the admin API or the operator), and a partition's earliest and latest offsets. Kelp answers
from what it already keeps: the partition states of the metadata this broker applied (replicas, leader,
ISR, and `adding`/`removing` while a reassignment runs — Kafka's ListPartitionReassignments answer) and
the leader's offsets (`LeaderRouting.partition_infos`). Routes, under `/v3/clusters/{cluster_id}`:

- `GET /topics/{topic}/partitions/{partition}/replicas`, `.../replicas/{broker_id}`;
- `GET /brokers/{broker_id}/partition-replicas` (of the topics the principal may DESCRIBE);
- `GET /topics/-/partitions/-/reassignment`, `/topics/{topic}/partitions/-/reassignment`,
  `/topics/{topic}/partitions/{partition}/reassignment` (404 when none runs for it);
- `GET /topics/{topic}/partitions/{partition}/offset` (`earliest_offset`: the log start offset,
  `latest_offset`: the high watermark, as a consumer sees them).

Confluent's document has no v3 route that starts or cancels a reassignment: that stays with Kafka's
AlterPartitionReassignments and `POST /admin/v1/partitions/reassign`.

This module must never change a partition: it only reads.
"""

from __future__ import annotations

from aiohttp import web

from kelp.errors import ErrorCode
from kelp.json_types import JsonData

from ...metadata.model import PartitionState
from ...parts import BrokerParts
from ..access.route_access import TOPIC, describable
from ..problems import HttpProblem
from ..serving import serving
from .views import CLUSTER, Links, collection, int_path, links_of, live_broker, resource, v3_response

__all__ = ["routes"]

routes = web.RouteTableDef()
PARTITION = CLUSTER + "/topics/{topic}/partitions/{partition}"



def _state(request: web.Request, broker: BrokerParts) -> tuple[str, int, PartitionState]:
    topic = request.match_info["topic"]
    p = int_path(request, "partition", f"partition of topic '{topic}'")
    info = broker.topics.check_partition(topic, p)  # 404 naming the topic or partition
    return topic, p, info.partition_states[p]


def _replica(links: Links, topic: str, p: int, state: PartitionState, broker_id: int) -> dict[str, JsonData]:
    return resource("KafkaReplica", links.url("topics", topic, "partitions", p, "replicas", broker_id),
                    links.crn(("topic", topic), ("partition", p), ("replica", broker_id)), cluster_id=links.cid,
                    topic_name=topic, partition_id=p, broker_id=broker_id, is_leader=state.leader == broker_id,
                    is_in_sync=broker_id in state.isr, broker=links.related("brokers", broker_id))


@routes.get(PARTITION + "/replicas")
async def list_replicas(request: web.Request) -> web.Response:
    links = links_of(request)
    topic, p, state = _state(request, serving(request))
    data: list[JsonData] = [_replica(links, topic, p, state, b) for b in state.replicas]
    return v3_response(collection("KafkaReplicaList", links.url("topics", topic, "partitions", p, "replicas"), data))


@routes.get(PARTITION + "/replicas/{broker_id}")
async def get_replica(request: web.Request) -> web.Response:
    links = links_of(request)
    topic, p, state = _state(request, serving(request))
    broker_id = int_path(request, "broker_id", "broker")
    if broker_id not in state.replicas:
        raise HttpProblem(404, f"broker {broker_id} holds no replica of partition {p} of topic '{topic}' (its "
                               f"replicas: {list(state.replicas)})", error_code=404)
    return v3_response(_replica(links, topic, p, state, broker_id))


@routes.get(CLUSTER + "/brokers/{broker_id}/partition-replicas")
async def list_broker_replicas(request: web.Request) -> web.Response:
    links, broker = links_of(request), serving(request)
    broker_id = live_broker(request, links)
    topics = sorted(broker.topics.list_topics(), key=lambda t: t.name)
    shown = describable(request, TOPIC, [t.name for t in topics])
    data: list[JsonData] = [_replica(links, t.name, p, s, broker_id) for t in topics if t.name in shown
                            for p, s in enumerate(t.partition_states) if broker_id in s.replicas]
    return v3_response(collection("KafkaReplicaList", links.url("brokers", broker_id, "partition-replicas"), data))


# -- reassignments --------------------------------------------------------------------------------------
def _reassignment(links: Links, topic: str, p: int, state: PartitionState) -> dict[str, JsonData]:
    base = ("topics", topic, "partitions", p)
    return resource("KafkaReassignment", links.url(*base, "reassignment"),
                    links.crn(("topic", topic), ("partition", p), ("reassignment", "")).removesuffix("="),
                    cluster_id=links.cid, topic_name=topic, partition_id=p, adding_replicas=list(state.adding),
                    removing_replicas=list(state.removing), replicas=links.related(*base, "replicas"))


def _reassignments(links: Links, broker: BrokerParts, topic: str | None) -> list[JsonData]:
    topics = [broker.topics.describe(topic)] if topic is not None else sorted(broker.topics.list_topics(),
                                                                             key=lambda t: t.name)
    return [_reassignment(links, t.name, p, s) for t in topics for p, s in enumerate(t.partition_states)
            if s.reassigning]


# The "-" routes first: `{topic}` and `{partition}` would take "-" as a name.
@routes.get(CLUSTER + "/topics/-/partitions/-/reassignment")
async def list_all_reassignments(request: web.Request) -> web.Response:
    links = links_of(request)
    data = _reassignments(links, serving(request), None)
    return v3_response(collection("KafkaReassignmentList", links.url("topics", "-", "partitions", "-",
                                                                     "reassignment"), data))


@routes.get(CLUSTER + "/topics/{topic}/partitions/-/reassignment")
async def list_topic_reassignments(request: web.Request) -> web.Response:
    links, topic = links_of(request), request.match_info["topic"]
    data = _reassignments(links, serving(request), topic)
    return v3_response(collection("KafkaReassignmentList", links.url("topics", topic, "partitions", "-",
                                                                     "reassignment"), data))


@routes.get(PARTITION + "/reassignment")
async def get_reassignment(request: web.Request) -> web.Response:
    links = links_of(request)
    topic, p, state = _state(request, serving(request))
    if not state.reassigning:
        raise HttpProblem(404, f"no reassignment of partition {p} of topic '{topic}' is in progress (its replicas: "
                               f"{list(state.replicas)})", error_code=ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
    return v3_response(_reassignment(links, topic, p, state))


# -- offsets ---------------------------------------------------------------------------------------------
@routes.get(PARTITION + "/offset")
async def partition_offsets(request: web.Request) -> web.Response:
    links, broker = links_of(request), serving(request)
    topic, p, state = _state(request, broker)
    info = (await broker.cluster.routing.partition_infos([(topic, p)])).get((topic, p))
    if info is None:
        raise HttpProblem(503, f"partition {p} of topic '{topic}' has no reachable leader now (leader: "
                               f"{state.leader}); retry", error_code=ErrorCode.LEADER_NOT_AVAILABLE)
    return v3_response(resource(
        "KafkaPartitionWithOffsets", links.url("topics", topic, "partitions", p, "offset"),
        links.crn(("topic", topic), ("partition", p), ("offset", "")).removesuffix("="), cluster_id=links.cid,
        topic_name=topic, partition_id=p, earliest_offset=info.log_start_offset, latest_offset=info.high_watermark))
