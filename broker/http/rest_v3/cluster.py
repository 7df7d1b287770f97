"""Confluent REST v3: the cluster, its brokers, topics and partitions.

Why: tools written against Confluent's v3 API (its UI, Terraform's provider, scripts) manage topics with
these routes; Kelp answers them in Confluent's shapes (`views`) from the same parts the admin API
uses — the topic manager (changes go through the controller, so any broker takes them), the cluster
member's view of brokers and partition roles. Routes:

- `GET /v3/clusters`, `GET /v3/clusters/{cluster_id}`;
- `GET .../brokers`, `GET .../brokers/{broker_id}`;
- `GET|POST .../topics`, `GET|PATCH|DELETE .../topics/{topic}` (PATCH: `{"partitions_count"}`, grow only);
- `GET .../topics/{topic}/partitions`, `GET .../topics/{topic}/partitions/{partition}`.

Configs are `configs.py`'s; replicas, reassignments and partition offsets `replicas.py`'s.

Authorization is `route_access`'s (the admin API's needs); listing topics shows those the principal may
DESCRIBE, creating one needs CREATE on the cluster or the topic, as Kafka's CreateTopics.

This module must never change a topic but through the topic manager.
"""

from __future__ import annotations

from aiohttp import web

from kelp.errors import ErrorCode, TopicAuthorizationFailedError, UnknownTopicOrPartitionError
from kelp.json_types import JsonData, JsonObject

from ...metadata.model import TopicState
from ...parts import BrokerParts
from ..access.route_access import TOPIC, access_of, describable, may_create_topic
from ..json_body import read_json
from ..problems import HttpProblem
from ..serving import serving
from .views import (
    CLUSTER,
    V3,
    Links,
    body_object,
    collection,
    int_path,
    is_int,
    links_of,
    live_broker,
    resource,
    v3_response,
)

__all__ = ["routes", "topic_data"]

routes = web.RouteTableDef()
TOPICS = CLUSTER + "/topics"
TOPIC_PATH = TOPICS + "/{topic}"



def _cluster_data(links: Links, broker: BrokerParts) -> dict[str, JsonData]:
    controller = broker.cluster.state.controller_id
    data = resource(
        "KafkaCluster", links.url(), links.crn(), cluster_id=links.cid,
        controller=links.related("brokers", controller), acls=links.related("acls"),
        brokers=links.related("brokers"), broker_configs=links.related("broker-configs"),
        consumer_groups=links.related("consumer-groups"), topics=links.related("topics"),
        partition_reassignments=links.related("topics", "-", "partitions", "-", "reassignment"))
    if controller is None or controller < 0:
        del data["controller"]  # none elected right now: Confluent leaves the link out
    return data


@routes.get(V3)
async def list_clusters(request: web.Request) -> web.Response:
    links = links_of(request)
    self_url = f"{request.url.scheme}://{request.host}{V3}"
    return v3_response(collection("KafkaClusterList", self_url, [_cluster_data(links, serving(request))]))


@routes.get(CLUSTER)
async def get_cluster(request: web.Request) -> web.Response:
    return v3_response(_cluster_data(links_of(request), serving(request)))


# -- brokers -------------------------------------------------------------------------------------------
def _broker_data(links: Links, broker: BrokerParts, broker_id: int) -> dict[str, JsonData]:
    ep = broker.cluster.state.brokers[broker_id]
    return resource("KafkaBroker", links.url("brokers", broker_id), links.crn(("broker", broker_id)),
                    cluster_id=links.cid, broker_id=broker_id, host=ep.host, port=ep.port, rack=ep.rack,
                    configs=links.related("brokers", broker_id, "configs"),
                    partition_replicas=links.related("brokers", broker_id, "partition-replicas"))


@routes.get(CLUSTER + "/brokers")
async def list_brokers(request: web.Request) -> web.Response:
    links, broker = links_of(request), serving(request)
    data: list[JsonData] = [_broker_data(links, broker, b) for b in sorted(broker.cluster.state.brokers)]
    return v3_response(collection("KafkaBrokerList", links.url("brokers"), data))


@routes.get(CLUSTER + "/brokers/{broker_id}")
async def get_broker(request: web.Request) -> web.Response:
    links = links_of(request)
    return v3_response(_broker_data(links, serving(request), live_broker(request, links)))


# -- topics --------------------------------------------------------------------------------------------
def topic_data(links: Links, broker: BrokerParts, name: str, *,
               created: TopicState | None = None) -> dict[str, JsonData]:
    """`created`: the controller's answer to a creation this broker may not have applied yet, shown in the
    topic's place (as `topic_views.describe_topic`: a 404 for the topic just created would say it failed)."""
    try:
        info = broker.topics.describe(name)
    except UnknownTopicOrPartitionError:
        if created is None or created.name != name:
            raise
        info = created
    return resource("KafkaTopic", links.url("topics", name), links.crn(("topic", name)), cluster_id=links.cid,
                    topic_name=name, is_internal=info.internal, replication_factor=info.replication_factor,
                    partitions_count=info.partitions, partitions=links.related("topics", name, "partitions"),
                    configs=links.related("topics", name, "configs"),
                    partition_reassignments=links.related("topics", name, "partitions", "-", "reassignment"))


@routes.get(TOPICS)
async def list_topics(request: web.Request) -> web.Response:
    links, broker = links_of(request), serving(request)
    names = sorted(t.name for t in broker.topics.list_topics())
    shown = describable(request, TOPIC, names)
    data: list[JsonData] = [topic_data(links, broker, n) for n in names if n in shown]
    return v3_response(collection("KafkaTopicList", links.url("topics"), data))


def _optional_int(body: JsonObject, key: str, what: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not is_int(value) or not 0 < value <= (1 << 31) - 1:
        raise HttpProblem(400, f"{what}: '{key}' must be a positive integer, got {value!r}", error_code=400)
    return value


@routes.post(TOPICS)
async def create_topic(request: web.Request) -> web.Response:
    links, broker = links_of(request), serving(request)
    body = body_object(await read_json(request), "create topic")
    name = body.get("topic_name")
    if not isinstance(name, str) or not name:
        raise HttpProblem(400, "create topic: 'topic_name' (a non-empty string) is required", error_code=400)
    acc = access_of(request)
    if not may_create_topic(acc, name):  # Kafka's CreateTopics: CREATE on the cluster or on the topic
        raise TopicAuthorizationFailedError(f"{acc.principal} is not authorized to CREATE topic '{name}'")
    what = f"create topic '{name}'"
    partitions = _optional_int(body, "partitions_count", what)
    rf = _optional_int(body, "replication_factor", what)
    configs: dict[str, str | int | float | None] = {}
    raw_configs = body.get("configs", [])
    if not isinstance(raw_configs, list):
        raise HttpProblem(400, f"{what}: 'configs' must be a list of {{\"name\", \"value\"}}", error_code=400)
    for i, item in enumerate(raw_configs):
        cname = item.get("name") if isinstance(item, dict) else None
        value = item.get("value") if isinstance(item, dict) else None
        if not isinstance(cname, str) or not (value is None or isinstance(value, str)):
            raise HttpProblem(400, f"{what}: configs[{i}] must be {{\"name\": string, \"value\": string}}",
                              error_code=400)
        if value is not None:
            configs[cname] = value
    assignments = None
    raw_assign = body.get("replicas_assignments")
    if raw_assign is not None:
        if not isinstance(raw_assign, dict) or not raw_assign or partitions is not None or rf is not None or not all(
                k.isdigit() and isinstance(v, list) and all(is_int(b) for b in v) for k, v in raw_assign.items()):
            raise HttpProblem(400, f"{what}: 'replicas_assignments' maps partition ids (\"0\") to broker id lists, "
                                   "without partitions_count and replication_factor", error_code=400)
        assignments = {int(k): [b for b in v if is_int(b)] for k, v in raw_assign.items() if isinstance(v, list)}
    validate_only = body.get("validate_only", False) is True
    created = await broker.topics.create_topic(name, partitions, rf, configs, validate_only=validate_only,
                                               assignments=assignments)
    if validate_only:
        return v3_response(resource("KafkaTopic", links.url("topics", name), links.crn(("topic", name)),
                                    cluster_id=links.cid, topic_name=name, is_internal=False,
                                    replication_factor=rf or 0, partitions_count=partitions or 0,
                                    partitions=links.related("topics", name, "partitions"),
                                    configs=links.related("topics", name, "configs"),
                                    partition_reassignments=links.related("topics", name, "partitions", "-",
                                                                          "reassignment")))
    return v3_response(topic_data(links, broker, name, created=created), status=201)


@routes.get(TOPIC_PATH)
async def get_topic(request: web.Request) -> web.Response:
    return v3_response(topic_data(links_of(request), serving(request), request.match_info["topic"]))


@routes.patch(TOPIC_PATH)
async def grow_topic(request: web.Request) -> web.Response:
    """Confluent's "Update Partition Count": `{"partitions_count": n}`, partitions only grow (CreatePartitions)."""
    links, broker, name = links_of(request), serving(request), request.match_info["topic"]
    what = f"update the partition count of topic '{name}'"
    total = _optional_int(body_object(await read_json(request), what), "partitions_count", what)
    if total is None:
        raise HttpProblem(400, f"{what}: 'partitions_count' (the new total, a positive integer) is required",
                          error_code=400)
    await broker.topics.create_partitions(name, total)
    return v3_response(topic_data(links, broker, name))


@routes.delete(TOPIC_PATH)
async def delete_topic(request: web.Request) -> web.Response:
    links_of(request)
    await serving(request).topics.delete_topic(request.match_info["topic"])
    return web.Response(status=204)


# -- partitions ----------------------------------------------------------------------------------------
def _partition_data(links: Links, broker: BrokerParts, topic: str, p: int) -> dict[str, JsonData]:
    info = broker.topics.describe(topic)
    if not 0 <= p < info.partitions:
        raise HttpProblem(404, f"partition {p} of topic '{topic}' does not exist (it has {info.partitions})",
                          error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    leader = info.partition_states[p].leader
    base = ("topics", topic, "partitions", p)
    data = resource("KafkaPartition", links.url(*base), links.crn(("topic", topic), ("partition", p)),
                    cluster_id=links.cid, topic_name=topic, partition_id=p,
                    leader=links.related(*base, "replicas", leader),
                    replicas=links.related(*base, "replicas"), reassignment=links.related(*base, "reassignment"))
    if leader < 0:
        del data["leader"]  # offline: no leader to link to
    return data


@routes.get(TOPIC_PATH + "/partitions")
async def list_partitions(request: web.Request) -> web.Response:
    links, broker, topic = links_of(request), serving(request), request.match_info["topic"]
    n = broker.topics.describe(topic).partitions
    data: list[JsonData] = [_partition_data(links, broker, topic, p) for p in range(n)]
    return v3_response(collection("KafkaPartitionList", links.url("topics", topic, "partitions"), data))


@routes.get(TOPIC_PATH + "/partitions/{partition}")
async def get_partition(request: web.Request) -> web.Response:
    links, broker, topic = links_of(request), serving(request), request.match_info["topic"]
    p = int_path(request, "partition", f"partition of topic '{topic}'")
    return v3_response(_partition_data(links, broker, topic, p))
